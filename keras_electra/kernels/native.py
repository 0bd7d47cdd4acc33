"""The ``native`` backend: the compiled C++ kernels (``kernels.cc``, built and loaded by
:mod:`keras_electra.kernels.compiled`), and the ``xla`` ones where those cannot run.

The same loops as the XLA kernels, vectorized by the C++ compiler, about twice as fast
(benchmarks/measurements.md); the same math and hashed dropout draws, outputs within one
rounding step of XLA's. A compiled op takes bfloat16 or float32 tensors, all of one
dtype, in a graph TensorFlow runs op by op: float16 tensors, mixed dtypes and graphs XLA
compiles whole (``--xla``, ``jit_compile``, which cannot hold a custom op) take the
``xla`` kernels instead. That is decided here, per call, by :func:`_ops` (bias + GELU's
backward pass asks again, for its upstream gradient's dtype; the other operations'
backward passes take the ops their forward pass took); callers never see it.
"""

from __future__ import annotations

import tensorflow as tf

from keras_electra.kernels import compiled, reference, shared, xla
from keras_electra.kernels.interface import Kernels


def _ops(*dtypes):
    """The compiled op module where it takes tensors of these dtypes in the graph being
    traced, else None: the call is the ``xla`` backend's."""
    return compiled.ops_for(*dtypes)


# === bias + GELU ===


def _gelu_forward(h, bias):
    ops = _ops(h.dtype)
    if ops is None:
        return xla.gelu_forward(h, bias)
    return ops.electra_bias_gelu(h, tf.cast(bias, tf.float32))


def _gelu_backward(h, bias, upstream, with_output=False):
    """``(dh, dbias)``, with ``with_output`` also ``gelu(h + bias)``, which the compiled
    kernel takes from the gradient's erf in the same pass."""
    ops = _ops(h.dtype, upstream.dtype)
    if ops is None:
        return xla.gelu_backward(h, bias, upstream, with_output)
    dh, dbias, y = ops.electra_bias_gelu_grad(
        h, tf.cast(bias, tf.float32), upstream, with_output=with_output
    )
    dbias = tf.cast(dbias, bias.dtype)
    return (dh, dbias, y) if with_output else (dh, dbias)


def bias_gelu(h: tf.Tensor, bias: tf.Tensor) -> tf.Tensor:
    """Exact (erf) ``gelu(h + bias)``: one compiled kernel per direction."""
    return xla.bias_gelu_with(_gelu_forward, _gelu_backward, h, bias)


def bias_gelu_matmul(h: tf.Tensor, bias: tf.Tensor, kernel: tf.Tensor) -> tf.Tensor:
    """``gelu(h + bias) @ kernel``; the gradient kernel recomputes GELU's output from
    ``h`` (kept anyway) in the pass that computes its gradient."""
    return xla.bias_gelu_matmul_with(_gelu_forward, _gelu_backward, h, bias, kernel)


# === dropout ===


def compiled_draw(drop) -> tuple:
    """A :func:`~keras_electra.kernels.xla.kernel_dropout` as the compiled ops take it
    (placeholders for None)."""
    if drop is None:
        return tf.zeros([2], tf.uint32), tf.constant(0, tf.uint32), tf.constant(1.0)
    return drop


def dropout(x: tf.Tensor, draw) -> tf.Tensor:
    """``x`` dropped by ``draw``, the draws hashed inside the kernel both ways."""
    ops = _ops(x.dtype)
    if ops is None:
        return xla.dropout(x, draw)
    key = compiled_draw(xla.kernel_dropout(draw))

    @tf.custom_gradient
    def run(x):
        return ops.electra_dropout(x, *key), lambda upstream: ops.electra_dropout(upstream, *key)

    return run(x)


# === dropout + residual + LayerNorm ===


def _tables(gamma, beta):
    return tf.cast(gamma, tf.float32), tf.cast(beta, tf.float32)


def add_layer_norm(x, residual, norm, dropout=None, bias=None):
    """``LayerNorm(dropout(x + bias) + residual)``: one compiled kernel per direction,
    keeping what the XLA one keeps (:func:`keras_electra.kernels.xla.add_layer_norm`)."""
    ops = _ops(x.dtype, residual.dtype)
    if ops is None:
        return xla.add_layer_norm(x, residual, norm, dropout, bias)

    def forward(x, residual, gamma, beta, bias, epsilon, drop):
        added = tf.zeros([0]) if bias is None else tf.cast(bias, tf.float32)
        return ops.electra_add_layer_norm(
            x,
            residual,
            *_tables(gamma, beta),
            *compiled_draw(drop),
            added,
            epsilon=epsilon,
            dropout=drop is not None,
        )

    def backward(y, upstream, gamma, beta, inv_std, drop, with_bias):
        return ops.electra_add_layer_norm_grad(
            y,
            upstream,
            *_tables(gamma, beta),
            *compiled_draw(drop),
            inv_std,
            dropout=drop is not None,
            with_bias=with_bias,
        )

    gamma, beta, epsilon = norm.gamma, norm.beta, norm.epsilon
    return xla.add_layer_norm_with(
        forward, backward, x, residual, gamma, beta, epsilon, dropout, bias
    )


# === the attention: the query/key/value split, softmax + dropout + values ===


def split_heads(qkv: tf.Tensor, bias: tf.Tensor, heads: int) -> tuple:
    """One kernel where TensorFlow's bias add, transpose and unstack make three passes;
    its backward kernel writes the projection's gradient and sums the bias's in float32
    in one pass."""
    ops = _ops(qkv.dtype)
    if ops is None:
        return xla.split_heads(qkv, bias, heads)

    @tf.custom_gradient
    def run(qkv, bias):
        q, k, v = ops.electra_split_heads(
            qkv, tf.reshape(tf.cast(bias, tf.float32), [-1]), heads=heads
        )

        def grad(*upstream):
            parts = [tf.zeros_like(q) if g is None else g for g in upstream]
            d_qkv, d_bias = ops.electra_merge_heads(*parts)
            return d_qkv, tf.reshape(tf.cast(d_bias, bias.dtype), tf.shape(bias))

        return (q, k, v), grad

    with tf.name_scope("split_heads"):
        return run(qkv, bias)


def attention_values(scores, mask, values, dropout=None, scale=1.0):
    """The masked softmax, dropout and product by the values, one compiled kernel per
    direction (and one for the backward pass's dropout), keeping what the XLA ones keep
    (:func:`keras_electra.kernels.xla.attention_values`)."""
    ops = _ops(scores.dtype)
    if ops is None:
        return xla.attention_values(scores, mask, values, dropout, scale)

    def forward(scores, keep, drop, scale):
        probs, dropped = ops.electra_attention_probs(
            scores, keep, *compiled_draw(drop), scale=scale, dropout=drop is not None
        )
        return probs, probs if drop is None else dropped

    def redrop(probs, drop):
        return ops.electra_dropout(probs, *compiled_draw(drop))

    def backward(probs, d_dropped, drop, scale):
        return ops.electra_attention_probs_grad(
            probs, d_dropped, *compiled_draw(drop), scale=scale, dropout=drop is not None
        )

    return xla.attention_values_with(
        forward, redrop, backward, scores, mask, values, dropout, scale
    )


# === the masked-LM loss and its sampler ===


def inverse_cdf(probs: tf.Tensor, uniform: tf.Tensor, *, block: int = 128) -> tf.Tensor:
    """The reference's two-level search as one kernel: one pass per row, one per block
    (float32 probabilities; others take the reference's)."""
    ops = _ops(probs.dtype, uniform.dtype)
    if ops is None or probs.dtype != tf.float32:
        return reference.inverse_cdf(probs, uniform, block=block)
    rows = tf.reshape(probs, [-1, tf.shape(probs)[-1]])
    sampled = ops.electra_inverse_cdf(rows, tf.reshape(uniform, [-1]), block=block)
    return tf.reshape(sampled, tf.shape(probs)[:-1])


def sparse_cross_entropy(logits, labels, *, probabilities=False, uniform=None) -> tuple:
    """One kernel reads each row of logits once for the loss, the argmax and the sample,
    and one writes the gradient, recomputing the probabilities from the logits and the
    rows' log-sum-exp: no float32 ``[..., V]`` tensor is written or kept (ELECTRA-Small's
    generator: 71 MB). With ``probabilities`` (which asks for that tensor), the ``xla``
    loss, sampled by :func:`inverse_cdf`."""
    ops = None if probabilities else _ops(logits.dtype)
    if ops is None:
        return xla.cross_entropy_with(inverse_cdf, logits, labels, probabilities, uniform)

    @tf.custom_gradient
    def on_rows(logits):
        draws = tf.zeros([0]) if uniform is None else tf.reshape(uniform, [-1])
        loss, best, log_sum_exp, sampled = ops.electra_softmax_xent(
            logits, flat_labels, tf.cast(draws, tf.float32)
        )

        def grad(upstream, *_):  # the argmax and the sample pass none
            return ops.electra_softmax_xent_grad(logits, log_sum_exp, flat_labels, upstream)

        return (loss, best, sampled), grad

    with tf.name_scope("cross_entropy"):
        flat_labels = tf.reshape(tf.cast(labels, tf.int32), [-1])
        loss, best, sampled = on_rows(shared.rows(logits))
        lead = tf.shape(labels)
        outputs = (tf.reshape(loss, lead), tf.reshape(best, lead))
        return outputs if uniform is None else (*outputs, tf.reshape(sampled, lead))


# === AdamW's update ===


def adam_w(variable, m, v, gradient, scalars: dict, scale=None, decay=None) -> None:
    """A float32 variable's whole update as one kernel: the gradient times clipping's
    factor, the decay and Adam's step in one pass over the variable (other dtypes: the
    reference's ``ResourceApplyAdam``)."""
    dtype = tf.as_dtype(variable.dtype)
    ops = _ops(dtype) if dtype == tf.float32 else None
    if ops is None:
        return reference.adam_w(variable, m, v, gradient, scalars, scale, decay)
    ops.electra_apply_adam_w(
        var=variable.handle,  # a mirrored variable's: this device's copy
        m=m.handle,
        v=v.handle,
        grad=tf.cast(gradient, dtype),
        scale=tf.constant(1.0) if scale is None else tf.cast(scale, tf.float32),
        decay=tf.constant(0.0) if decay is None else decay,
        **scalars,
    )
    return None


KERNELS = Kernels.of(
    "native",
    globals(),
    bias_add=shared.bias_add,  # TensorFlow's ops, as on xla: no kernel of its own
    dense=xla.dense,
    fuses_attention=xla.fuses_attention,
)
