"""The fast dropout: Keras' dropout statistics, its gradient, its seed state, its slots."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_electra.config import ElectraConfig
from keras_electra.layers.backbone import ElectraBackbone
from keras_electra.layers.dropout import Dropout, dropout_mask


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_the_mask_keeps_one_minus_rate_and_scales_the_kept(dtype):
    # 1,000,001 elements (odd: one 16-bit half of the last draw is unused).
    mask = dropout_mask([1001, 999], 0.1, tf.constant([3, 4], tf.int64), dtype).numpy()
    mask = mask.astype("float32")
    kept = mask != 0
    # Binomial standard deviation 0.0003: within 0.0015 of 0.9 (Keras' bfloat16 draw
    # keeps 0.898, its uniform having 8 bits).
    assert abs(kept.mean() - 0.9) < 0.0015, kept.mean()
    expected = np.float32(tf.cast(1 / 0.9, dtype).numpy())
    assert np.all(mask[kept] == expected)
    # Neither rows nor columns repeat a pattern (the two halves of one draw differ).
    assert not np.array_equal(kept[:, 0::2], kept[:, 1::2][:, :499])


def test_the_layer_is_identity_without_training_and_random_per_call_with_it():
    layer = Dropout(0.25, seed=7)
    x = tf.ones([64, 64])
    np.testing.assert_array_equal(layer(x, training=False).numpy(), x.numpy())
    first, second = layer(x, training=True).numpy(), layer(x, training=True).numpy()
    assert not np.array_equal(first, second)
    assert abs((first != 0).mean() - 0.75) < 0.03
    # The same seed state gives the same mask: a restored checkpoint resumes the draws.
    again = Dropout(0.25, seed=7)
    np.testing.assert_array_equal(again(x, training=True).numpy(), first)


def test_the_gradient_is_the_forward_mask():
    layer = Dropout(0.5, seed=1)
    x = tf.Variable(tf.random.normal([8, 32]))
    weights = tf.random.normal([8, 32])
    with tf.GradientTape() as tape:
        y = layer(x, training=True)
        loss = tf.reduce_sum(y * weights)
    grad = tape.gradient(loss, x).numpy()
    mask = (y.numpy() / x.numpy()).round(5)
    assert set(np.unique(mask)) == {0.0, 2.0}
    np.testing.assert_allclose(grad, weights.numpy() * mask, rtol=1e-6)


def test_every_dropout_of_the_backbone_is_fast_and_the_seed_state_is_unchanged():
    config = ElectraConfig.from_preset("tiny", vocab_size=100, num_layers=2)
    model = ElectraBackbone(config)
    plain = keras.layers.Dropout
    seen = []
    for layer in model.encoder.transformer_layers:
        attention = layer._self_attention_layer
        for slot in (layer._self_attention_dropout, layer._feedforward_dropout):
            seen.append(slot)
        seen.append(attention._dropout_layer)
    seen.append(model.embedding.dropout_layer)
    assert all(isinstance(d, Dropout) for d in seen), [type(d) for d in seen]
    assert all(isinstance(d, plain) for d in seen)  # same config and checkpoint layout
    # One seed state per dropout, as with Keras' layers: no state added or lost.
    seeds = [v for v in model.variables if "seed_generator" in v.path]
    assert len(seeds) == len(seen), [v.path for v in seeds]


def _chi_square(counts: np.ndarray) -> float:
    expected = counts.sum() / counts.size
    return float(((counts - expected) ** 2 / expected).sum())


def test_hashed_draws_are_uniform_and_independent_of_neighbours_and_keys():
    """The keyed hash's 16-bit draws, 2^20 of them per key: uniform in their high and
    low bytes (chi-square, 255 degrees of freedom: 390 is p = 1e-6), uncorrelated with
    the next element's and the next row's, and two seeds' masks agree only as
    independent draws do."""
    from keras_electra.layers.dropout import dropout_bits

    n = 1 << 20
    first = dropout_bits([n], tf.constant([3, 4], tf.int64)).numpy().astype(np.int64)
    second = dropout_bits([n], tf.constant([3, 5], tf.int64)).numpy().astype(np.int64)
    assert first.min() >= 0 and first.max() < 65536
    for draws in (first, second):
        assert _chi_square(np.bincount(draws >> 8, minlength=256)) < 390
        assert _chi_square(np.bincount(draws & 255, minlength=256)) < 390
        centred = draws - draws.mean()
        for lag in (1, 2, 128, 1024):  # the next element, the next row of [., 128] ...
            corr = (centred[:-lag] * centred[lag:]).mean() / centred.var()
            assert abs(corr) < 5 / np.sqrt(n), (lag, corr)
    # Rate 0.1: both seeds drop an element with probability 0.01 if independent.
    both = ((first < 6554) & (second < 6554)).mean()
    assert abs(both - 0.01) < 5 * np.sqrt(0.01 * 0.99 / n), both
    # Every column of a [8192, 128] view drops its share (no column pattern).
    kept = (first < 6554).reshape(-1, 128).sum(0)
    assert _chi_square(kept.astype(float)) < 127 + 6 * np.sqrt(2 * 127)
