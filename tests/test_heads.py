"""The towers' output heads (layers/heads.py). That the generator's head computes
keras-hub's ``MaskedLMHead`` values from its checkpoints is in test_layer_layout.py."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_electra.layers.heads import GeneratorHead


def _head(dtype: str):
    rng = np.random.default_rng(0)
    embedding = keras.layers.Embedding(97, 8, dtype=dtype)
    embedding.build((None,))
    embedding.embeddings.assign(rng.normal(0, 1, (97, 8)))
    head = GeneratorHead(embedding, dtype=dtype)
    x = tf.constant(rng.normal(0, 1, (2, 6, 4)), tf.float32)
    positions = tf.constant([[0, 2, 5], [1, 1, 3]])
    head(x, positions)
    head._bias.assign(rng.normal(0, 1, 97))
    return head, x, positions


@pytest.mark.parametrize("dtype", ["float32", "mixed_bfloat16", "mixed_float16"])
def test_generator_head_projects_in_the_compute_dtype(dtype):
    ours, x, positions = _head(dtype)

    @tf.function
    def step(x):
        with tf.GradientTape() as tape:
            logits = ours(x, positions, float32_logits=False)
            loss = tf.reduce_sum(tf.cast(logits, tf.float32) ** 2)
        return tape.gradient(loss, ours.trainable_variables + [ours.token_embedding.embeddings])

    graph = step.get_concrete_function(x).graph
    wide_float32 = [
        op.name
        for op in graph.get_operations()
        for t in op.outputs
        if "generator_head" in op.name  # the head's ops, forward and backward
        and t.dtype == tf.float32
        and t.shape.rank
        and t.shape.rank >= 2
        and t.shape[-1] == 97
    ]
    # Under mixed_bfloat16 no float32 [positions, vocabulary] tensor is written:
    # keras-hub's projection writes the logits and their gradient in float32, which
    # float16 (whose range is not float32's) keeps.
    assert (not wide_float32) == (dtype == "mixed_bfloat16"), wide_float32
    grads = step(x)
    assert all(np.isfinite(tf.cast(g, tf.float32).numpy()).all() for g in grads)
    assert keras.backend.standardize_dtype(grads[-1].dtype) == "float32"
