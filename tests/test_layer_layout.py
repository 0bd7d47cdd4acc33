"""The model's layers are written here but keep keras-hub's weight layout: the same
seed gives the same initial values, checkpoints written with keras-hub's layers
restore into ours, and the restored layers compute what keras-hub's compute.
Training imports no keras-hub (it costs about 48 MB of resident memory and half a
second at import)."""

import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf
from conftest import OnFirstUse

from keras_electra.layers.embedding import PositionEmbedding
from keras_electra.layers.encoder import TransformerLayer
from keras_electra.layers.heads import GeneratorHead

keras_hub = OnFirstUse("keras_hub")

LAYER = dict(
    intermediate_dim=24,
    num_heads=2,
    dropout=0.1,
    activation="gelu",
    layer_norm_epsilon=1e-12,
    kernel_initializer=keras.initializers.TruncatedNormal(stddev=0.02),
)


def _weights(layer) -> dict[str, np.ndarray]:
    return {v.path.split("/", 1)[1]: v.numpy() for v in layer.weights}


def _round_trip(source, target, tmp_path):
    path = tf.train.Checkpoint(layer=source).write(str(tmp_path / "ckpt"))
    status = tf.train.Checkpoint(layer=target).read(path)
    status.assert_consumed()  # every value in the file found its variable, and back
    return status


def test_a_seed_builds_the_transformer_layer_keras_hub_builds(tmp_path):
    keras.utils.set_random_seed(3)
    theirs = keras_hub.layers.TransformerEncoder(
        **{**LAYER, "kernel_initializer": "glorot_uniform"}
    )
    theirs.build((2, 7, 16))
    keras.utils.set_random_seed(3)
    ours = TransformerLayer(**{**LAYER, "kernel_initializer": "glorot_uniform"})
    ours.build((2, 7, 16))
    a, b = _weights(theirs), _weights(ours)
    assert list(a) == list(b)  # the same weights, in the same order
    for name in a:
        np.testing.assert_array_equal(a[name], b[name], err_msg=name)


@pytest.mark.parametrize("normalize_first", [False, True])
def test_keras_hub_transformer_checkpoints_restore_and_compute_the_same(tmp_path, normalize_first):
    config = {**LAYER, "normalize_first": normalize_first}
    theirs = keras_hub.layers.TransformerEncoder(**config)
    theirs.build((2, 7, 16))
    rng = np.random.default_rng(0)
    for v in theirs.weights:  # values unlike any initializer's
        if "seed_generator" not in v.path:
            v.assign(rng.normal(0, 0.3, v.shape))
    ours = TransformerLayer(**config)
    ours.build((2, 7, 16))
    _round_trip(theirs, ours, tmp_path)
    x = tf.constant(rng.normal(0, 1, (2, 7, 16)), tf.float32)
    padding = tf.constant(np.arange(7)[None, :] < np.array([[7], [4]]))
    allowed = tf.constant(rng.random((2, 7, 7)) < 0.8)
    for kwargs in (
        {},
        {"padding_mask": padding},
        {"padding_mask": padding, "attention_mask": allowed},
    ):
        np.testing.assert_allclose(
            ours(x, **kwargs).numpy(), theirs(x, **kwargs).numpy(), rtol=1e-5, atol=1e-5
        )
    y, scores = ours(x, padding_mask=padding, return_attention_scores=True)
    y_ref, scores_ref = theirs(x, padding_mask=padding, return_attention_scores=True)
    np.testing.assert_allclose(scores.numpy(), scores_ref.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(y.numpy(), y_ref.numpy(), rtol=1e-5, atol=1e-5)
    assert ours.get_config()["normalize_first"] == normalize_first
    assert TransformerLayer.from_config(ours.get_config()).intermediate_dim == 24


def test_a_transformer_narrower_than_its_heads_gets_one_sentence():
    with pytest.raises(ValueError, match="^A transformer layer 2 wide cannot have 4 heads.$"):
        TransformerLayer(intermediate_dim=8, num_heads=4).build((1, 3, 2))


@pytest.mark.parametrize("dtype", ["float32", "mixed_bfloat16", "mixed_float16"])
def test_keras_hub_embeddings_and_masked_lm_head_restore_and_compute_the_same(tmp_path, dtype):
    rng = np.random.default_rng(1)
    table = keras_hub.layers.ReversibleEmbedding(97, 8, dtype=dtype)
    table.build((None,))
    theirs = keras_hub.layers.MaskedLMHead(
        token_embedding=table, intermediate_activation="gelu", layer_norm_epsilon=1e-12, dtype=dtype
    )
    x = tf.constant(rng.normal(0, 1, (2, 6, 4)), tf.float32)
    positions = tf.constant([[0, 2, 5], [1, 1, 3]])
    theirs(x, positions)
    for v in (*table.weights, *theirs.weights):
        v.assign(rng.normal(0, 0.5, v.shape))
    our_table = keras.layers.Embedding(97, 8, dtype=dtype)
    our_table.build((None,))
    ours = GeneratorHead(our_table, dtype=dtype)
    ours(x, positions)
    _round_trip(table, our_table, tmp_path / "table")
    _round_trip(theirs, ours, tmp_path / "head")
    expected = tf.cast(theirs(x, positions), tf.float32).numpy()
    got = ours(x, positions).numpy()
    if dtype == "mixed_bfloat16":  # keras-hub multiplies in float32 and rounds; we multiply bf16
        assert np.abs(got - expected).max() <= 0.02 * np.abs(expected).max()
    else:
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)

    their_positions = keras_hub.layers.PositionEmbedding(16)
    their_positions.build((2, 16, 8))
    their_positions.position_embeddings.assign(rng.normal(0, 1, (16, 8)))
    our_positions = PositionEmbedding(16)
    our_positions.build((2, 16, 8))
    _round_trip(their_positions, our_positions, tmp_path / "positions")
    inputs = tf.zeros((3, 11, 8))
    np.testing.assert_array_equal(our_positions(inputs).numpy(), their_positions(inputs).numpy())


def test_a_head_without_a_table_owns_its_projection():
    head = GeneratorHead(vocabulary_size=13)
    logits = head(np.ones((2, 5, 4), "float32"), np.array([[0, 4], [1, 1]]))
    assert tuple(logits.shape) == (2, 2, 13)
    assert sorted(v.name for v in head.weights if "kernel" in v.name)[-1] == "output_kernel"
    with pytest.raises(ValueError, match="needs a token_embedding or a vocabulary_size"):
        GeneratorHead()


def test_training_imports_no_keras_hub():
    code = (
        "import sys\n"
        "import keras_electra.pretraining.pretrainer, keras_electra.layers\n"
        "import keras_electra.finetuning, keras_electra.export\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'keras_hub'))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "[]", out
