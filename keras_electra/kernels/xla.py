"""The ``xla`` backend: each chain of element-wise ops one XLA kernel per direction.

Each chain is one small ``tf.function(jit_compile=True)`` forward and one hand-written
gradient: XLA fuses the element-wise work into one loop, while the matmuls stay on
TensorFlow's oneDNN kernels. The math is done in float32 and returned in the input's
dtype, so under a mixed policy bias gradients are summed in float32 too. XLA's CPU loops
are slower on 3-D tensors, so the functions take ``[-1, width]`` views. Timings against
Keras' ops: benchmarks/measurements.md. These kernels run wherever the compiled ones
(:mod:`keras_electra.kernels.native`) cannot: no compiler, a GPU or TPU, float16, a graph
XLA compiles whole.

Examples:
    >>> y = KERNELS.bias_gelu(tf.constant([[1.0]]), tf.constant([0.5]))
    >>> round(float(y[0, 0]), 4)
    1.3998
"""

from __future__ import annotations

import tensorflow as tf

from keras_electra.kernels.interface import Kernels

_SQRT_HALF = 0.7071067811865476
_INV_SQRT_2PI = 0.3989422804014327


def rows(x: tf.Tensor) -> tf.Tensor:
    """``x`` as ``[-1, width]`` (its last axis kept)."""
    return tf.reshape(x, [-1, tf.shape(x)[-1]])


# === bias + GELU ===


def _gelu(z: tf.Tensor) -> tf.Tensor:
    return 0.5 * z * (1.0 + tf.math.erf(z * _SQRT_HALF))


def _gelu_derivative(z: tf.Tensor) -> tf.Tensor:
    return 0.5 * (1.0 + tf.math.erf(z * _SQRT_HALF)) + z * tf.exp(-0.5 * z * z) * _INV_SQRT_2PI


@tf.function(jit_compile=True, reduce_retracing=True)
def _bias_gelu_forward(h, bias):
    return tf.cast(_gelu(tf.cast(h, tf.float32) + tf.cast(bias, tf.float32)), h.dtype)


@tf.function(jit_compile=True, reduce_retracing=True)
def _bias_gelu_backward(h, bias, upstream):
    z = tf.cast(h, tf.float32) + tf.cast(bias, tf.float32)
    dz = tf.cast(upstream, tf.float32) * _gelu_derivative(z)
    return tf.cast(dz, h.dtype), tf.cast(tf.reduce_sum(dz, axis=0), bias.dtype)


def gelu_forward(h, bias):
    """``gelu(h + bias)`` on rows."""
    return _bias_gelu_forward(h, bias)


def gelu_backward(h, bias, upstream, with_output=False):
    """``(dh, dbias)`` of :func:`gelu_forward`, with ``with_output`` also ``gelu(h +
    bias)``, recomputed in a kernel of its own."""
    grads = _bias_gelu_backward(h, bias, upstream)
    if not with_output:
        return grads
    # Held back until the backward pass reaches it: a graph runs an op once its inputs
    # exist, and h and the bias exist in the forward pass.
    with tf.control_dependencies([upstream]):
        return (*grads, _bias_gelu_forward(h, bias))


def bias_gelu_with(forward, backward, h, bias):
    """:func:`bias_gelu` on the row kernels ``forward`` and ``backward`` (this module's
    :func:`gelu_forward` and :func:`gelu_backward`, or the compiled ones)."""

    @tf.custom_gradient
    def on_rows(h, bias):
        def grad(upstream):
            return backward(h, bias, upstream)

        return forward(h, bias), grad

    with tf.name_scope("fused_gelu"):  # the scope names the kernels in a profile
        # Variables are read out here, so the custom gradient sees tensors only.
        return tf.reshape(on_rows(rows(h), tf.convert_to_tensor(bias)), tf.shape(h))


def bias_gelu_matmul_with(forward, backward, h, bias, kernel):
    """:func:`bias_gelu_matmul` on the row kernels ``forward`` and ``backward``."""

    @tf.custom_gradient
    def on_rows(h, bias, kernel):
        def grad(upstream):
            dg = tf.matmul(upstream, kernel, transpose_b=True)
            dh, dbias, g = backward(h, bias, dg, with_output=True)
            return dh, dbias, tf.matmul(g, upstream, transpose_a=True)

        return tf.matmul(forward(h, bias), kernel), grad

    with tf.name_scope("fused_gelu"):
        out = on_rows(rows(h), tf.convert_to_tensor(bias), kernel)
        return tf.reshape(out, tf.concat([tf.shape(h)[:-1], tf.shape(kernel)[-1:]], 0))


def bias_gelu(h: tf.Tensor, bias: tf.Tensor) -> tf.Tensor:
    """Exact (erf) ``gelu(h + bias)``, ``bias`` added along the last axis, one XLA
    kernel forward and one backward (``h`` kept for it)."""
    return bias_gelu_with(gelu_forward, gelu_backward, h, bias)


def bias_gelu_matmul(h: tf.Tensor, bias: tf.Tensor, kernel: tf.Tensor) -> tf.Tensor:
    """``gelu(h + bias) @ kernel``, GELU's output recomputed in the backward pass (for
    the matmul's kernel gradient), not kept: it is a layer's widest tensor (``[tokens,
    intermediate]``, 8 MB per layer of ELECTRA-Small at batch 32 x 128 in bfloat16).

    Examples:
        >>> y = bias_gelu_matmul(tf.constant([[1.0, -1.0]]), tf.constant([0.5, 0.0]),
        ...                      tf.constant([[1.0], [1.0]]))
        >>> round(float(y[0, 0]), 4)  # gelu(1.5) + gelu(-1) = 1.39979 - 0.15866
        1.2411
    """
    return bias_gelu_matmul_with(gelu_forward, gelu_backward, h, bias, kernel)


KERNELS = Kernels(name="xla", bias_gelu=bias_gelu, bias_gelu_matmul=bias_gelu_matmul)
