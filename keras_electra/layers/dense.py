"""Dense layers' training path: bias gradients summed in float32, projections as 2-D matmuls.

Two things Keras' ``Dense`` and ``EinsumDense`` do on TensorFlow cost accuracy or time
in training (measured in benchmarks/measurements.md):

- **Bias gradients under a 16-bit policy.** ``tf.nn.bias_add``'s gradient,
  ``BiasAddGrad``, accumulates a bfloat16 gradient in bfloat16 (10% off over 4,096
  rows). :func:`bias_add` sums it with ``tf.reduce_sum``, which accumulates in float32.
- **The attention's projections.** ``EinsumDense("abc,cde->abde")`` is a broadcast batch
  matmul, whose kernel gradient is one product per sequence, then summed. As a
  ``[batch * length, width]`` matmul (reshapes, no copies) it is one product.

:class:`Dense` and :class:`EinsumDense`, which the model's layers are built as, are
Keras' layers with this path in training (``training=True``, passed down from the
model's call). Inference keeps Keras' own ``call``, so SavedModels, weights, config and
checkpoints are unchanged.
"""

from __future__ import annotations

import math

import keras
import tensorflow as tf

from keras_electra.layers import backend

# EinsumDense equations taken as 2-D matmuls: the input's last 1 or 2 axes are
# contracted with the kernel's first ones, the kernel's remaining axes are the output's.
_EQUATIONS = {"abc,cde->abde": 1, "abcd,cde->abe": 2, "abc,cd->abd": 1, "ab,bc->ac": 1}


@tf.custom_gradient
def bias_add(x: tf.Tensor, bias: tf.Tensor):
    """``x + bias``, ``bias`` over ``x``'s trailing axes, the bias gradient accumulated
    in float32 (``tf.reduce_sum``) whatever ``x``'s dtype; ``BiasAddGrad`` accumulates
    a bfloat16 gradient in bfloat16.

    Examples:
        >>> import tensorflow as tf
        >>> x = tf.zeros([4096, 2], tf.bfloat16)
        >>> b = tf.zeros([2], tf.bfloat16)
        >>> with tf.GradientTape() as tape:
        ...     tape.watch(b)
        ...     y = tf.reduce_sum(tf.cast(bias_add(x, b), tf.float32) * 0.001)
        >>> [round(float(g), 2) for g in tape.gradient(y, b)]
        [4.09, 4.09]
    """

    def grad(upstream):
        lead = tf.rank(upstream) - tf.rank(bias)
        dbias = tf.reduce_sum(upstream, tf.range(lead))
        # The rest of the backward pass waits for it: off the critical path, the sum can
        # stay queued, and the whole upstream gradient alive, to the pass's end.
        with tf.control_dependencies([dbias]):
            return tf.identity(upstream), dbias

    return x + bias, grad


def _two_d(layer: keras.layers.Layer, inputs, contracted: int):
    """``layer``'s affine map of ``inputs`` as ``[rows, in] x [in, out]``, reshaped to
    the output's axes, plus :func:`bias_add` (and the activation).

    The reshape stands between the matmul and the bias, as in Keras' ``Dense`` on 3-D
    inputs (``tensordot``): Grappler fuses a matmul followed by a bias into one
    ``_FusedMatMul``, whose float16 kernel on this CPU took 473 ms where the two ops
    took 0.9 ms each (``[2048, 128] x [128, 128]``).
    """
    kernel = layer.kernel
    out_shape = [int(d) for d in kernel.shape[contracted:]]
    width = math.prod(int(d) for d in kernel.shape[:contracted])
    units = math.prod(out_shape)
    lead = tf.shape(inputs)[: len(inputs.shape) - contracted]
    rows = tf.reshape(inputs, [-1, width])
    y = tf.matmul(rows, tf.reshape(kernel, [width, units]))
    y = tf.reshape(y, tf.concat([lead, out_shape], 0))
    if layer.bias is not None:
        y = bias_add(y, tf.identity(layer.bias))  # a tensor, autocast
    if getattr(layer, "activation", None) is not None:
        y = layer.activation(y)
    return y


def _takes_two_d(layer, inputs, training, contracted: int | None) -> bool:
    """Whether a training call of ``layer`` takes :func:`_two_d`: a 2-D matmul's equation,
    a bias over the output axes (or none), no quantization or LoRA, and not a 2-D float16
    input (no reshape to keep its matmul and bias unfused, see :func:`_two_d`)."""
    return bool(
        training
        and contracted is not None
        and backend.fast_training()
        and getattr(layer, "quantization_mode", None) is None
        and getattr(layer, "lora_rank", None) is None
        and (layer.bias is None or layer.bias.shape == layer.kernel.shape[contracted:])
        and not (len(inputs.shape) == 2 and inputs.dtype == tf.float16)
    )


@keras.saving.register_keras_serializable(package="keras_electra")
class Dense(keras.layers.Dense):
    """``keras.layers.Dense`` with this module's training path (same weights, config, inference)."""

    def call(self, inputs, training=None):
        if _takes_two_d(self, inputs, training, 1):
            return _two_d(self, inputs, 1)
        return super().call(inputs, training=training)


@keras.saving.register_keras_serializable(package="keras_electra")
class EinsumDense(keras.layers.EinsumDense):
    """``keras.layers.EinsumDense`` with the training path for 2-D matmul equations (same
    weights, config and inference)."""

    def call(self, inputs, training=None):
        contracted = _EQUATIONS.get(self.equation)
        if _takes_two_d(self, inputs, training, contracted):
            return _two_d(self, inputs, contracted)
        return super().call(inputs, training=training)
