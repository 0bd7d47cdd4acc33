"""The attention layer written here: its softmax, its two ways, its position seam, and
the one read of a variable that skips Keras' autocasting.

(Its weight layout against keras-hub's is tests/test_layer_layout.py's; its fused
way's dropout masks against keras-hub's path are tests/test_fused.py's.)
"""

import dataclasses

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_electra.internals import stored_value
from keras_electra.kernels import implementation
from keras_electra.layers.attention import SelfAttention, float32_softmax


def test_the_softmax_is_computed_in_float32_and_rounded_once():
    rng = np.random.default_rng(0)
    scores = tf.constant(rng.normal(0, 3, (2, 2, 5, 7)), tf.bfloat16)
    mask = tf.constant(rng.random((2, 5, 7)) < 0.7)
    expected = tf.nn.softmax(tf.where(mask[:, None], tf.cast(scores, tf.float32), -1e9))
    expected = tf.where(mask[:, None], expected, 0.0)
    got = float32_softmax(scores, mask)
    assert got.dtype == tf.bfloat16
    np.testing.assert_array_equal(
        tf.cast(got, tf.float32).numpy(), tf.cast(tf.cast(expected, tf.bfloat16), tf.float32)
    )
    # A row masked entirely gives zeros, as Keras' Softmax does.
    none = float32_softmax(scores, tf.zeros((2, 5, 7), tf.bool))
    assert not tf.reduce_any(none != 0)


class Shifted(SelfAttention):
    """A toy position scheme: each key gets its position times a fixed vector."""

    def positions(self, query, key):
        length = tf.shape(key)[2]
        ramp = tf.cast(tf.range(length), key.dtype)[None, None, :, None]
        return query, key + ramp * tf.constant(0.3, key.dtype)


class FusedWay(keras.layers.Layer):
    """An attention's fused way on the kernel table ``kernels``, with its output bias
    added, called as a layer of the attention's policy (its inputs and reads autocast)."""

    def __init__(self, attention, kernels):
        super().__init__(dtype=attention.dtype_policy)
        self.attention, self.kernels = attention, kernels

    def call(self, x, attention_mask):
        out, bias = self.attention.fused_output(x, attention_mask, self.kernels)
        return out + tf.cast(bias, out.dtype)


@pytest.mark.parametrize("heads", [1, 2])
def test_a_position_scheme_is_one_override_and_both_ways_take_it(heads):
    # bfloat16 scores on the xla kernels: the fused way (attention_values) runs; in
    # inference the reference way. Without dropout both compute the same attention,
    # and both see the subclass' positions.
    fused_calls = []
    xla = implementation("xla")
    counting = dataclasses.replace(
        xla, attention_values=lambda *a: fused_calls.append(1) or xla.attention_values(*a)
    )
    rng = np.random.default_rng(heads)
    x = tf.constant(rng.normal(0, 1, (3, 6, 8)), tf.float32)
    mask = tf.constant((np.arange(6)[None, :] < np.array([[6], [4], [2]]))[:, None, :])
    outputs = {}
    for cls in (SelfAttention, Shifted):
        keras.utils.set_random_seed(0)
        layer = cls(num_heads=heads, key_dim=8 // heads, dtype="mixed_bfloat16")
        layer.build((3, 6, 8))
        fused = FusedWay(layer, counting)(x, attention_mask=mask)
        reference = layer(x, attention_mask=mask, training=False)
        outputs[cls] = [tf.cast(t, tf.float32).numpy() for t in (fused, reference)]
    assert len(fused_calls) == 2  # one fused call per class: the subclass keeps the way
    for fused, reference in outputs.values():
        np.testing.assert_allclose(fused, reference, atol=0.05 * np.abs(reference).max())
    plain, shifted = outputs[SelfAttention][1], outputs[Shifted][1]
    assert np.abs(plain - shifted).max() > 0.05 * np.abs(plain).max()  # the scheme acts


def test_the_reference_path_matches_keras_multi_head_attention():
    rng = np.random.default_rng(4)
    x = tf.constant(rng.normal(0, 1, (2, 5, 8)), tf.float32)
    mask = tf.constant(rng.random((2, 5, 5)) < 0.8)
    theirs = keras.layers.MultiHeadAttention(num_heads=2, key_dim=4)
    theirs.build(query_shape=x.shape, value_shape=x.shape)
    ours = SelfAttention(num_heads=2, key_dim=4)
    ours.build(x.shape)
    for a, b in zip(ours.weights, theirs.weights, strict=True):
        assert a.path.split("/", 1)[1] == b.path.split("/", 1)[1]
        a.assign(rng.normal(0, 0.5, a.shape))
        b.assign(a.numpy())
    y, probs = ours(x, attention_mask=mask, return_attention_scores=True)
    y_ref, probs_ref = theirs(x, x, attention_mask=mask, return_attention_scores=True)
    np.testing.assert_allclose(y.numpy(), y_ref.numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(probs.numpy(), probs_ref.numpy(), rtol=1e-5, atol=1e-6)
    assert SelfAttention.from_config(ours.get_config()).key_dim == 4


def test_stored_value_reads_float32_inside_a_mixed_layer_and_passes_the_gradient():
    # The one read that skips Keras' autocasting (Keras has no public one): this test
    # fails the day Keras stops keeping the stored value where stored_value reads it.
    class Probe(keras.layers.Layer):
        def build(self, shape):
            self.bias = self.add_weight(shape=(3,), initializer="ones", name="bias")

        def call(self, x):
            self.seen = (tf.identity(self.bias).dtype, stored_value(self.bias).dtype)
            return x + tf.cast(stored_value(self.bias), x.dtype)

    layer = Probe(dtype="mixed_bfloat16")
    x = tf.ones((4, 3))
    with tf.GradientTape() as tape:
        y = tf.reduce_sum(tf.cast(layer(x), tf.float32))
    assert layer.seen == (tf.bfloat16, tf.float32)
    np.testing.assert_array_equal(tape.gradient(y, layer.bias).numpy(), [4.0, 4.0, 4.0])
    with pytest.raises(RuntimeError, match="no longer has a variable.s stored value"):
        stored_value(object())
