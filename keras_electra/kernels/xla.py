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

from typing import TYPE_CHECKING

import tensorflow as tf

from keras_electra.kernels.interface import Kernels
from keras_electra.layers.dropout import hash_bits

if TYPE_CHECKING:
    from keras_electra.layers.dropout import DropoutDraw

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


# === dropout ===


def dropped(v, drop):
    """``v`` (float32 rows) dropped by ``drop``, ``(key, threshold, scale)`` or None: the
    draws hashed from the flat indices inside the kernel, as ``DropoutDraw.bits`` does."""
    if drop is None:
        return v
    key, threshold, scale = drop
    rows, width = tf.unstack(tf.shape(v))  # static to XLA, which compiles per shape
    index = tf.range(rows)[:, None] * width + tf.range(width)[None, :]
    return tf.where(hash_bits(index, key) >= threshold, v * scale, 0.0)


def kernel_dropout(draw: DropoutDraw | None) -> tuple | None:
    """A :class:`~keras_electra.layers.dropout.DropoutDraw` as the kernels take it:
    ``(key, threshold, scale)``, or None."""
    if draw is None:
        return None
    return draw.key, draw.threshold, tf.constant(draw.scale, tf.float32)


@tf.function(jit_compile=True, reduce_retracing=True)
def _dropped_rows(x, drop):
    return tf.cast(dropped(tf.cast(rows(x), tf.float32), drop), x.dtype)


def dropout_rows(x: tf.Tensor, drop: tuple) -> tf.Tensor:
    """``x`` dropped by ``drop`` (:func:`kernel_dropout`), in float32, one kernel."""
    return tf.reshape(_dropped_rows(x, drop), tf.shape(x))


def dropout(x: tf.Tensor, draw: DropoutDraw) -> tf.Tensor:
    """``x`` with the elements ``draw`` drops zeroed and the others scaled (in float32),
    the draws hashed inside the kernel, forward and backward: no mask is kept."""
    drop = kernel_dropout(draw)

    @tf.custom_gradient
    def run(x):
        return dropout_rows(x, drop), lambda upstream: dropout_rows(upstream, drop)

    return run(x)


# === dropout + residual + LayerNorm ===


def _normalize(s, gamma, beta, epsilon):
    mean = tf.reduce_mean(s, axis=-1, keepdims=True)
    centered = s - mean
    inv_std = tf.math.rsqrt(tf.reduce_mean(centered * centered, axis=-1, keepdims=True) + epsilon)
    y = centered * inv_std * tf.cast(gamma, tf.float32) + tf.cast(beta, tf.float32)
    return y, inv_std


@tf.function(jit_compile=True, reduce_retracing=True)
def _add_norm_forward(x, residual, gamma, beta, epsilon, drop, bias=None):
    v = tf.cast(x, tf.float32)
    v = v if bias is None else v + tf.cast(bias, tf.float32)
    s = dropped(v, drop) + tf.cast(residual, tf.float32)
    y, inv_std = _normalize(s, gamma, beta, epsilon)
    return tf.cast(y, x.dtype), inv_std


# The smallest LayerNorm scale magnitude add_layer_norm's backward pass divides by.
_SMALLEST_GAMMA = 1e-3


@tf.function(jit_compile=True, reduce_retracing=True)
def _add_norm_backward(y, gamma, beta, inv_std, upstream, drop):
    gamma = tf.cast(gamma, tf.float32)
    floor = tf.where(gamma < 0, -_SMALLEST_GAMMA, _SMALLEST_GAMMA)
    safe_gamma = tf.where(tf.abs(gamma) < _SMALLEST_GAMMA, floor, gamma)
    # The normalized sum read back from the output: y = normalized * gamma + beta.
    normalized = (tf.cast(y, tf.float32) - tf.cast(beta, tf.float32)) / safe_gamma
    dy = tf.cast(upstream, tf.float32)
    g = dy * gamma
    ds = inv_std * (
        g
        - tf.reduce_mean(g, axis=-1, keepdims=True)
        - normalized * tf.reduce_mean(g * normalized, axis=-1, keepdims=True)
    )
    dgamma = tf.reduce_sum(dy * normalized, axis=0)
    dbeta = tf.reduce_sum(dy, axis=0)
    dx = dropped(ds, drop)
    # dx's column sums: the gradient of a bias added to x (unused without one).
    return tf.cast(dx, y.dtype), tf.cast(ds, y.dtype), dgamma, dbeta, tf.reduce_sum(dx, axis=0)


def _norm_forward(x, residual, gamma, beta, bias, epsilon, drop):
    added = () if bias is None else (bias,)
    return _add_norm_forward(x, residual, gamma, beta, epsilon, drop, *added)


def _norm_backward(y, upstream, gamma, beta, inv_std, drop, with_bias):
    return _add_norm_backward(y, gamma, beta, inv_std, upstream, drop)


def add_layer_norm_with(forward, backward, x, residual, gamma, beta, epsilon, dropout, bias):
    """:func:`add_layer_norm` on the row kernels ``forward`` (``(y, inv_std)``) and
    ``backward`` (``(dx, ds, dgamma, dbeta, dbias)``): this module's or the compiled ones."""

    @tf.custom_gradient
    def on_rows(x, residual, gamma, beta, *bias):
        y, inv_std = forward(x, residual, gamma, beta, bias[0] if bias else None, epsilon, drop)

        def grad(upstream):
            dx, ds, dgamma, dbeta, dbias = backward(
                y, upstream, gamma, beta, inv_std, drop, bool(bias)
            )
            grads = (dx, tf.cast(ds, residual.dtype))
            grads += (tf.cast(dgamma, gamma.dtype), tf.cast(dbeta, beta.dtype))
            return (*grads, tf.cast(dbias, bias[0].dtype)) if bias else grads

        return y, grad

    with tf.name_scope("fused_layer_norm"):
        drop = kernel_dropout(dropout)
        gamma, beta = tf.convert_to_tensor(gamma), tf.convert_to_tensor(beta)
        extra = () if bias is None else (tf.convert_to_tensor(bias),)
        return tf.reshape(on_rows(rows(x), rows(residual), gamma, beta, *extra), tf.shape(x))


def add_layer_norm(
    x: tf.Tensor,
    residual: tf.Tensor,
    gamma: tf.Tensor,
    beta: tf.Tensor,
    epsilon: float,
    dropout: DropoutDraw | None = None,
    bias: tf.Tensor | None = None,
) -> tf.Tensor:
    """``LayerNorm(dropout(x + bias) + residual)`` over the last axis, the sum kept in
    float32, one XLA kernel per direction.

    The backward pass keeps neither input: it reads the normalized sum back from the
    output, ``(y - beta) / gamma``, which the next layer keeps anyway, and the rows'
    inverse standard deviations. On ELECTRA-Small that is one ``[tokens, hidden]`` tensor
    less per LayerNorm alive at the step's peak (2 MB each in bfloat16 at batch 32 x 128).
    Its precision is the output's: under ``mixed_bfloat16`` the normalized values come back
    with bfloat16's rounding (the gradients are of bfloat16 activations anyway). A scale
    smaller than 1e-3 in magnitude is divided as 1e-3 (``_SMALLEST_GAMMA``): too little of
    the input is left in the output to read back, so that column's gradient comes out
    smaller, never infinite (a trained ELECTRA's scales are far from it). The dropout's
    mask is recomputed from its key in the backward pass; the bias's gradient is summed
    in float32 in the backward kernel's pass over ``x``'s.

    Examples:
        >>> y = add_layer_norm(tf.constant([[1.0, 3.0]]), tf.constant([[1.0, 1.0]]),
        ...                    tf.ones([2]), tf.zeros([2]), 1e-12)
        >>> [round(float(v), 4) for v in y[0]]
        [-1.0, 1.0]
    """
    return add_layer_norm_with(
        _norm_forward, _norm_backward, x, residual, gamma, beta, epsilon, dropout, bias
    )


KERNELS = Kernels(
    name="xla",
    bias_gelu=bias_gelu,
    bias_gelu_matmul=bias_gelu_matmul,
    dropout=dropout,
    add_layer_norm=add_layer_norm,
)
