"""TensorFlow-op helpers the backends and the layers share, on every backend."""

from __future__ import annotations

import tensorflow as tf


def rows(x: tf.Tensor) -> tf.Tensor:
    """``x`` as ``[-1, width]`` (its last axis kept): XLA's CPU loops are slower on 3-D
    tensors, and the compiled kernels take rows."""
    return tf.reshape(x, [-1, tf.shape(x)[-1]])


@tf.custom_gradient
def bias_add(x: tf.Tensor, bias: tf.Tensor):
    """``x + bias``, ``bias`` over ``x``'s trailing axes, the bias gradient accumulated
    in float32 (``tf.reduce_sum``) whatever ``x``'s dtype; ``BiasAddGrad`` accumulates
    a bfloat16 gradient in bfloat16 (10% off over 4,096 rows).

    Examples:
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
