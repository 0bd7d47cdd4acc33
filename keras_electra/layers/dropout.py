"""Dropout whose random bits are a keyed hash of each element's index.

``keras.layers.Dropout`` on TensorFlow draws one float per element in the compute dtype
(under ``mixed_bfloat16`` a rate of 0.1 drops 10.2%) and writes it to memory. Here each
element's 16-bit draw is a hash of its flat index and a 64-bit key (:func:`hash_bits`)
drawn once per call from the layer's seed (each replica's shifted past the earlier
replicas' rows, :func:`replica_key`: N replicas draw one device's masks of the global
batch), so the rate is exact to 1/65,536 and a fused kernel recomputes the bits from the
key, forward and backward
(:mod:`keras_electra.kernels`). Outside the kernels, the kept elements' scale
``1 / (1 - rate)`` is one mask tensor, and the gradient is that mask times the
incoming gradient.

The hash: the index times the 32-bit golden ratio plus the key's first word, XOR its
second word, then MurmurHash3's 32-bit finalizer (a bijection with full avalanche); the
draw is the top 16 bits. One key's draws are a permutation of distinct 32-bit values,
and two keys' sequences are not shifts of each other (the XOR breaks the progression).

:class:`Dropout` is a ``keras.layers.Dropout`` (same config, same ``seed_generator``
attribute, so checkpoints keep their layout), as which the transformer layers and their
attention build their dropouts.
"""

from __future__ import annotations

from typing import NamedTuple

import keras
import tensorflow as tf

_U32 = tf.uint32
_GOLDEN = 0x9E3779B9  # 2^32 / golden ratio, odd


def _fmix32(x: tf.Tensor) -> tf.Tensor:
    """MurmurHash3's 32-bit finalizer (uint32 in, uint32 out)."""
    shift = tf.bitwise.right_shift
    x = tf.bitwise.bitwise_xor(x, shift(x, tf.constant(16, _U32)))
    x = x * tf.constant(0x85EBCA6B, _U32)
    x = tf.bitwise.bitwise_xor(x, shift(x, tf.constant(13, _U32)))
    x = x * tf.constant(0xC2B2AE35, _U32)
    return tf.bitwise.bitwise_xor(x, shift(x, tf.constant(16, _U32)))


def hash_bits(index: tf.Tensor, key: tf.Tensor) -> tf.Tensor:
    """The 16-bit draws (uint32 in ``[0, 65536)``) of the elements at flat ``index``
    (uint32) under ``key`` (``[2]`` uint32). Element-wise: inside an XLA kernel it
    fuses into the loop that uses it.

    Examples:
        >>> key = tf.constant([1, 2], tf.uint32)
        >>> bits = hash_bits(tf.range(100_000, dtype=tf.int32), key)
        >>> 0.49 < float(tf.reduce_mean(tf.cast(bits, tf.float32))) / 65536 < 0.51
        True
    """
    index = tf.cast(index, _U32)
    x = tf.bitwise.bitwise_xor(index * tf.constant(_GOLDEN, _U32) + key[0], key[1])
    return tf.bitwise.right_shift(_fmix32(x), tf.constant(16, _U32))


def dropout_key(seed: tf.Tensor) -> tf.Tensor:
    """A ``[2]`` uint32 key from a stateless seed (``[2]``, int32 or int64): one
    Philox draw, so nearby seeds give unrelated keys."""
    return tf.random.stateless_uniform(
        [2], seed=tf.cast(seed, tf.int64), minval=None, maxval=None, dtype=_U32
    )


class DropoutDraw(NamedTuple):
    """One dropout call's random key, for a kernel that applies the dropout itself.

    An element is kept where its draw ``hash_bits(flat index, key) >= threshold`` and
    then scaled by ``scale``: :func:`dropout_mask` is ``where(keep, scale, 0)`` of the
    same draws (:attr:`bits`).
    """

    key: tf.Tensor  # [2] uint32
    shape: tf.Tensor  # the shape of the tensor dropped
    rate: float

    @property
    def threshold(self) -> tf.Tensor:
        """A draw below it (uint32, of 65,536) drops its element."""
        return tf.constant(round(self.rate * 65536), _U32)

    @property
    def scale(self) -> float:
        """What a kept element is multiplied by."""
        return 1.0 / (1.0 - self.rate)

    @property
    def bits(self) -> tf.Tensor:
        """The draws of every element, uint32 of ``shape`` (computed, never stored by
        the kernels)."""
        size = tf.reduce_prod(self.shape)
        return tf.reshape(hash_bits(tf.range(size), self.key), self.shape)

    def mask(self, dtype) -> tf.Tensor:
        """``scale`` where kept, 0 where dropped, in ``dtype``."""
        return tf.where(
            self.bits >= self.threshold, tf.constant(self.scale, dtype), tf.zeros((), dtype)
        )


def replica_key(key: tf.Tensor, shape: tf.Tensor, replica_id) -> tf.Tensor:
    """``key`` for replica ``replica_id`` of a dropout over ``shape`` (one replica's rows,
    batch first): the key whose draws at flat index ``i`` are ``key``'s at ``i`` plus the
    earlier replicas' elements, so the replicas' masks together are one device's mask of
    the global batch (``tf.distribute`` gives replica ``r`` the rows from ``r *
    local_batch``). The hash reads the index only as ``index * golden + key[0]``, so the
    shift is one addition to ``key[0]`` (modulo 2**32).

    Examples:
        >>> key = tf.constant([5, 9], tf.uint32)
        >>> whole = DropoutDraw(key, tf.constant([4, 3]), 0.5).bits
        >>> second = DropoutDraw(replica_key(key, tf.constant([2, 3]), 1), [2, 3], 0.5).bits
        >>> bool(tf.reduce_all(whole[2:] == second))
        True
    """
    earlier = tf.cast(replica_id, _U32) * tf.cast(tf.reduce_prod(shape), _U32)
    return tf.stack([key[0] + earlier * tf.constant(_GOLDEN, _U32), key[1]])


def dropout_bits(shape: tf.Tensor, seed: tf.Tensor) -> tf.Tensor:
    """Uniform 16-bit draws (uint32 in ``[0, 65536)``) of ``shape`` from a stateless seed.

    Args:
        shape: the shape (a 1-D int tensor or a list).
        seed: a stateless seed, shape ``[2]``, int32 or int64.
    """
    return DropoutDraw(dropout_key(seed), shape, 0.0).bits


def dropout_mask(shape: tf.Tensor, rate: float, seed: tf.Tensor, dtype) -> tf.Tensor:
    """``1 / (1 - rate)`` where kept, 0 where dropped, each element kept with ``1 - rate``.

    Args:
        shape: the mask's shape (a 1-D int tensor or a list).
        rate: the probability of dropping an element, in [0, 1).
        seed: a stateless seed, shape ``[2]``, int32 or int64.
        dtype: the mask's dtype.
    """
    return DropoutDraw(dropout_key(seed), shape, rate).mask(dtype)


@tf.custom_gradient
def apply_mask(x: tf.Tensor, mask: tf.Tensor):
    """``x * mask``, whose gradient is the upstream gradient times ``mask`` (no gradient
    for the mask): a dropout outside the kernels."""

    def grad(upstream):
        return upstream * mask, None

    return x * mask, grad


@keras.saving.register_keras_serializable(package="keras_electra")
class Dropout(keras.layers.Dropout):
    """``keras.layers.Dropout`` with a cheaper mask (see the module docstring).

    With a ``noise_shape`` it falls back to Keras' implementation.
    """

    def call(self, inputs, training=False):
        if not training or not self.drawable:
            return super().call(inputs, training=training)
        return apply_mask(inputs, self.draw(tf.shape(inputs)).mask(inputs.dtype))

    @property
    def drawable(self) -> bool:
        """Whether :meth:`draw` gives bits: a rate above 0 and no ``noise_shape``."""
        return self.rate > 0 and self.noise_shape is None

    def draw(self, shape: tf.Tensor) -> DropoutDraw | None:
        """This call's random key (the same :meth:`call` would draw, taking the same
        seed), for a kernel that applies the dropout itself; None if this layer drops
        nothing (rate 0) or needs Keras' own implementation (a ``noise_shape``)."""
        if not self.drawable:
            return None
        seed = tf.cast(self.seed_generator.next(), tf.int64)
        key = dropout_key(seed)
        replica = tf.distribute.get_replica_context()
        if replica is not None and replica.num_replicas_in_sync > 1:
            key = replica_key(key, shape, replica.replica_id_in_sync_group)
        return DropoutDraw(key, shape, self.rate)
