"""Dropout that draws half the random bits and keeps its mask for the backward pass.

``keras.layers.Dropout`` on TensorFlow draws one float per element (in the compute
dtype: under ``mixed_bfloat16`` a bfloat16 uniform, so a rate of 0.1 drops 10.2%),
then multiplies and selects, and its gradient selects again. Here one 32-bit draw
gives two 16-bit thresholds (the rate exact to 1/65,536), the kept elements' scale
``1 / (1 - rate)`` becomes one mask tensor, and the gradient is that same mask times
the incoming gradient. Fwd + bwd of a ``[32, 4, 128, 128]`` bfloat16 attention
dropout takes 0.4-0.7x the time of Keras' (``benchmarks/step_profile.py`` shows the
share of the step).

:class:`Dropout` is a ``keras.layers.Dropout`` (same config, same ``seed_generator``
attribute, so checkpoints keep their layout); :func:`use_fast_dropout` swaps it into
the dropout slots of a built keras-hub ``TransformerEncoder``.
"""

from __future__ import annotations

from typing import NamedTuple

import keras
import tensorflow as tf


class DropoutDraw(NamedTuple):
    """One dropout call's random bits, for a kernel that applies the dropout itself.

    An element is kept where ``bits >= threshold`` and then scaled by ``scale``:
    :func:`dropout_mask` is ``where(keep, scale, 0)`` of the same bits.
    """

    bits: tf.Tensor  # uint16, the shape of the tensor dropped
    rate: float

    @property
    def threshold(self) -> tf.Tensor:
        """The uint16 threshold: a 16-bit draw below it drops its element."""
        return tf.constant(round(self.rate * 65536), tf.uint16)

    @property
    def scale(self) -> float:
        """What a kept element is multiplied by."""
        return 1.0 / (1.0 - self.rate)

    def mask(self, dtype) -> tf.Tensor:
        """``scale`` where kept, 0 where dropped, in ``dtype``."""
        return tf.where(
            self.bits >= self.threshold, tf.constant(self.scale, dtype), tf.zeros((), dtype)
        )


def dropout_bits(shape: tf.Tensor, seed: tf.Tensor) -> tf.Tensor:
    """Uniform 16-bit draws of ``shape``, two from each 32-bit draw.

    Args:
        shape: the shape (a 1-D int tensor or a list).
        seed: a stateless seed, shape ``[2]``, int32 or int64.
    """
    size = tf.reduce_prod(shape)
    bits = tf.random.stateless_uniform(
        [(size + 1) // 2], seed=seed, minval=None, maxval=None, dtype=tf.uint32
    )
    return tf.reshape(tf.reshape(tf.bitcast(bits, tf.uint16), [-1])[:size], shape)


def dropout_mask(shape: tf.Tensor, rate: float, seed: tf.Tensor, dtype) -> tf.Tensor:
    """``1 / (1 - rate)`` where kept, 0 where dropped, each element kept with ``1 - rate``.

    Args:
        shape: the mask's shape (a 1-D int tensor or a list).
        rate: the probability of dropping an element, in [0, 1).
        seed: a stateless seed, shape ``[2]``, int32 or int64.
        dtype: the mask's dtype.
    """
    return DropoutDraw(dropout_bits(shape, seed), rate).mask(dtype)


@tf.custom_gradient
def _apply_mask(x: tf.Tensor, mask: tf.Tensor):
    def grad(upstream):
        return upstream * mask, None

    return x * mask, grad


@keras.saving.register_keras_serializable(package="keras_electra")
class Dropout(keras.layers.Dropout):
    """``keras.layers.Dropout`` with a cheaper mask (see the module docstring).

    With a ``noise_shape`` it falls back to Keras' implementation.
    """

    @classmethod
    def replacing(cls, layer: keras.layers.Dropout) -> Dropout:
        """A fast dropout in place of ``layer``: its rate, dtype, name and seed state."""
        fast = cls(
            layer.rate, noise_shape=layer.noise_shape, dtype=layer.dtype_policy, name=layer.name
        )
        if getattr(layer, "seed_generator", None) is not None:
            # One seed state, tracked (and checkpointed) by the replaced layer as before.
            object.__setattr__(fast, "seed_generator", layer.seed_generator)
        return fast

    def call(self, inputs, training=False):
        if not training or not self.drawable:
            return super().call(inputs, training=training)
        return _apply_mask(inputs, self.draw(tf.shape(inputs)).mask(inputs.dtype))

    @property
    def drawable(self) -> bool:
        """Whether :meth:`draw` gives bits: a rate above 0 and no ``noise_shape``."""
        return self.rate > 0 and self.noise_shape is None

    def draw(self, shape: tf.Tensor) -> DropoutDraw | None:
        """This call's random bits (the same :meth:`call` would draw, taking the same
        seed), for a kernel that applies the dropout itself; None if this layer drops
        nothing (rate 0) or needs Keras' own implementation (a ``noise_shape``)."""
        if not self.drawable:
            return None
        seed = tf.cast(self.seed_generator.next(), tf.int64)
        return DropoutDraw(dropout_bits(shape, seed), self.rate)


def use_fast_dropout(layer: keras.layers.Layer) -> None:
    """Give a built keras-hub ``TransformerEncoder`` :class:`Dropout` in its three slots.

    The attention probabilities', the attention output's and the feed-forward
    output's dropout. The replaced layers stay tracked (their seed state is shared
    with the replacements), so checkpoints keep their layout; the replacements are
    set untracked, as ``_float32_attention_softmax`` sets the softmax.
    """
    attention = getattr(layer, "_self_attention_layer", None)
    for owner, slot in (
        (layer, "_self_attention_dropout"),
        (layer, "_feedforward_dropout"),
        (attention, "_dropout_layer"),
    ):
        old = getattr(owner, slot, None)
        if isinstance(old, keras.layers.Dropout) and not isinstance(old, Dropout):
            object.__setattr__(owner, slot, Dropout.replacing(old))
