"""The ``reference`` backend: TensorFlow's and Keras' own ops, as Keras' layers call them.

The specification of every operation, the only path of inference and export, and the
oracle of ``tests/test_kernel_conformance.py``. Each function is written with the ops
the Keras layers it stands for use, in the same order (a ``Dense`` layer's bias add and
activation in its compute dtype, ...), so a model trained on this backend computes what
Keras' layers compute, bit for bit.

Examples:
    >>> y = KERNELS.bias_gelu(tf.constant([[1.0]]), tf.constant([0.5]))
    >>> round(float(y[0, 0]), 4)
    1.3998
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import keras
import tensorflow as tf

from keras_electra.kernels.interface import Kernels
from keras_electra.layers.dropout import apply_mask

if TYPE_CHECKING:
    from keras_electra.layers.dropout import DropoutDraw


def bias_gelu(h: tf.Tensor, bias: tf.Tensor) -> tf.Tensor:
    """A ``Dense`` layer's bias add and exact GELU, in ``h``'s dtype (the bias cast to
    it, as Keras' autocasting reads it)."""
    return keras.activations.gelu(keras.ops.add(h, tf.cast(bias, h.dtype)))


def bias_gelu_matmul(h: tf.Tensor, bias: tf.Tensor, kernel: tf.Tensor) -> tf.Tensor:
    """:func:`bias_gelu`, then the next ``Dense`` layer's matmul."""
    return keras.ops.matmul(bias_gelu(h, bias), kernel)


def dropout(x: tf.Tensor, draw: DropoutDraw) -> tf.Tensor:
    """The ``Dropout`` layer's: ``x`` times the draw's mask in ``x``'s dtype."""
    return apply_mask(x, draw.mask(x.dtype))


def add_layer_norm(
    x: tf.Tensor,
    residual: tf.Tensor,
    gamma: tf.Tensor,
    beta: tf.Tensor,
    epsilon: float,
    dropout: DropoutDraw | None = None,
    bias: tf.Tensor | None = None,
) -> tf.Tensor:
    """A ``Dense`` layer's bias add, the ``Dropout`` layer, the residual add and a
    ``LayerNormalization`` layer (axis -1), in ``x``'s dtype but the LayerNorm's float32
    math."""
    if bias is not None:
        x = keras.ops.add(x, tf.cast(bias, x.dtype))
    if dropout is not None:
        x = apply_mask(x, dropout.mask(x.dtype))
    normalized = keras.ops.layer_normalization(x + residual, gamma, beta, -1, epsilon)
    return keras.ops.cast(normalized, x.dtype)


KERNELS = Kernels(
    name="reference",
    bias_gelu=bias_gelu,
    bias_gelu_matmul=bias_gelu_matmul,
    dropout=dropout,
    add_layer_norm=add_layer_norm,
)
