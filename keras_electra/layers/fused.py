"""Training kernels: the attention's masked softmax + dropout (with the product by the
values: :func:`attention_values`), one XLA kernel per direction; and the masked-LM
cross-entropy. (Bias + GELU and dropout + residual + LayerNorm are in
:mod:`keras_electra.kernels`, where the others move one by one.)

Each chain of element-wise ops is one small ``tf.function(jit_compile=True)`` forward
and one hand-written gradient: XLA fuses the element-wise work into one loop, while the
matmuls stay on TensorFlow's oneDNN kernels. A dropout inside a kernel hashes each
element's 16-bit draw from its index and the key of
:meth:`keras_electra.layers.dropout.Dropout.draw`, forward and backward: no random bits
are written to memory or kept. The math is done in float32 and returned in the input's
dtype, so under a mixed policy bias gradients are summed in float32 too. XLA's CPU loops
are slower on 3-D tensors, so the functions take ``[-1, width]`` views. Timings against
Keras' ops: benchmarks/measurements.md.

On a CPU with a C++ compiler the attention kernels run as compiled
custom ops instead (:mod:`keras_electra.layers.compiled`, ``kernels.cc``): the same
math and hashed draws, outputs within one rounding step of XLA's. The XLA kernels stay
everywhere else (no compiler, GPU or TPU, float16, ``KERAS_ELECTRA_KERNELS=xla``).

:class:`keras_electra.layers.encoder.TransformerLayer` uses them when ``training`` is
true; inference (export, scoring, evaluation) keeps Keras' ops, so neither an XLA op nor
a compiled one reaches a SavedModel.
"""

from __future__ import annotations

import contextlib
import threading
from typing import TYPE_CHECKING

import tensorflow as tf

# Modules, not names: the layers import this module while keras_electra.kernels, which
# imports the layers, may still be loading.
from keras_electra.kernels import native as _native
from keras_electra.kernels import xla as _xla
from keras_electra.layers import backend

if TYPE_CHECKING:
    from keras_electra.layers.dropout import DropoutDraw

_state = threading.local()


@contextlib.contextmanager
def training_kernels():
    """Within this context (read when a layer is traced), layers that can take these
    kernels do: :class:`keras_electra.layers.encoder.TransformerLayer` enters it for
    its attention in training, where the attention's softmax reads it."""
    before = getattr(_state, "active", False)
    _state.active = True
    try:
        yield
    finally:
        _state.active = before


def in_training_kernels() -> bool:
    """Whether the current thread is inside :func:`training_kernels`."""
    return getattr(_state, "active", False)


def _compiled_kernels(*dtypes):
    """:func:`keras_electra.layers.backend.native_ops` (a seam the tests replace)."""
    return backend.native_ops(*dtypes)


def inverse_cdf(probs: tf.Tensor, uniform: tf.Tensor, *, block: int = 128) -> tf.Tensor:
    """The first index whose cumulative probability exceeds ``uniform`` times the total.

    Two levels, so no cumulative sum runs over the whole vocabulary: cut into blocks of
    ``block`` entries (the last padded with zeros), a cumulative sum over the block totals
    finds the block and one over its entries the index, the index one cumulative sum
    would give up to float32 rounding (on the ``native`` backend, one kernel).
    :func:`keras_electra.pretraining.masking.sample_tokens` draws with it.

    Args:
        probs: ``[..., V]`` non-negative weights (need not sum to exactly 1).
        uniform: ``[...]`` draws in [0, 1).
        block: entries per block.

    Returns:
        ``[...]`` int32 indices in ``[0, V)``.
    """
    vocab = tf.shape(probs)[-1]
    lead = tf.shape(probs)[:-1]
    rows = tf.reshape(probs, [-1, vocab])
    compiled = _compiled_kernels(probs.dtype, uniform.dtype)
    if compiled is not None and probs.dtype == tf.float32:  # one pass per row, one per block
        return tf.reshape(
            compiled.electra_inverse_cdf(rows, tf.reshape(uniform, [-1]), block=block), lead
        )
    num_blocks = (vocab + block - 1) // block
    rows = tf.pad(rows, [[0, 0], [0, num_blocks * block - vocab]])
    blocks = tf.reshape(rows, [-1, num_blocks, block])
    totals = tf.reduce_sum(blocks, axis=-1)  # [N, num_blocks]
    block_cdf = tf.math.cumsum(totals, axis=-1)
    # Scale by the total (float32 rounding leaves it a little off 1). A target kept
    # below each total can never land past the last entry with probability > 0.
    target = tf.reshape(uniform, [-1, 1]) * block_cdf[:, -1:]
    target = tf.minimum(target, _below(block_cdf[:, -1:]))
    which = tf.searchsorted(block_cdf, target, side="right", out_type=tf.int32)  # [N, 1]
    # Non-finite weights (a diverged step, which the on-NaN guard then skips) would
    # search past the end; keep every index in range so the step reaches that guard.
    which = tf.minimum(which, num_blocks - 1)
    # What is left of the target after the blocks before the chosen one.
    before = tf.gather(block_cdf, which, batch_dims=1) - tf.gather(totals, which, batch_dims=1)
    inner_cdf = tf.math.cumsum(tf.gather(blocks, which[:, 0], batch_dims=1), axis=-1)
    rest = tf.minimum(tf.maximum(target - before, 0.0), _below(inner_cdf[:, -1:]))
    inner = tf.searchsorted(inner_cdf, rest, side="right", out_type=tf.int32)
    return tf.reshape(tf.minimum(which * block + inner, vocab - 1), lead)


def _below(total: tf.Tensor) -> tf.Tensor:
    """The largest float32 below ``total``."""
    return tf.math.nextafter(total, tf.zeros_like(total))


_MASKED = -1e9  # Keras' Softmax puts this at masked positions (float32 here)


def _score_rows(scores, keep):
    """Scores and their mask (``[B, 1, T, S]``) as ``[rows, S]``: inside a kernel, the
    mask's broadcast happens in the loop, never written out at the scores' size."""
    keep = tf.broadcast_to(keep, tf.shape(scores))
    return _xla.rows(scores), _xla.rows(keep)


def _masked_probs(scores, keep, scale):
    z = tf.where(keep, tf.cast(scores, tf.float32) * scale, _MASKED)
    return tf.where(keep, tf.nn.softmax(z, axis=-1), 0.0)


def _softmax_gradient(probs, upstream, scale):
    """The scores' gradient of ``softmax(scale * scores)`` from the float32 probabilities
    and theirs."""
    return scale * probs * (upstream - tf.reduce_sum(upstream * probs, axis=-1, keepdims=True))


def _keep(mask: tf.Tensor | None, rank: int) -> tf.Tensor:
    """A boolean mask of ``rank`` dimensions (leading ones added), all True for None."""
    if mask is None:
        return tf.ones([1] * rank, tf.bool)
    keep = tf.cast(mask, tf.bool)
    while len(keep.shape) < rank:
        keep = keep[None]
    return keep


def fuses_attention_softmax(dtype) -> bool:
    """Whether an attention softmax (+ dropout) on ``dtype`` scores runs as
    :func:`attention_values`: in :func:`training_kernels`, for 16-bit scores (fwd + bwd on
    [32, 4, 128, 128]: 3.0 ms fused against 4.2 in bfloat16, but 6.2 against TensorFlow's
    3.8 in float32, 2-core EPYC)."""
    return in_training_kernels() and tf.as_dtype(dtype) != tf.float32 and backend.fast_training()


@tf.function(jit_compile=True, reduce_retracing=True)
def _probs_forward(scores, keep, drop, scale):
    rows, keep = _score_rows(scores, keep)
    probs = tf.cast(_masked_probs(rows, keep, scale), scores.dtype)
    if drop is None:
        return probs
    # The dropout acts on the rounded probabilities, as its recompute will.
    return probs, tf.cast(_xla.dropped(tf.cast(probs, tf.float32), drop), scores.dtype)


@tf.function(jit_compile=True, reduce_retracing=True)
def _probs_backward(probs, upstream, drop, scale):
    p = tf.cast(_xla.rows(probs), tf.float32)
    dp = _xla.dropped(tf.cast(tf.reshape(upstream, tf.shape(p)), tf.float32), drop)
    return tf.cast(_softmax_gradient(p, dp, scale), probs.dtype)


def split_heads(qkv: tf.Tensor, bias: tf.Tensor, heads: int) -> tuple | None:
    """The attention's query, key and value, ``[batch, heads, length, dim]`` each, from
    one projection ``qkv`` (``[batch, length, 3 * heads * dim]``, the three side by side)
    plus its ``bias`` (``[3, heads, dim]``), as one compiled kernel where TensorFlow's bias
    add, transpose and unstack make three passes; its backward kernel writes the
    projection's gradient and sums the bias's in float32 in one pass. None where the
    compiled kernels are not used (the caller then uses TensorFlow's ops).

    Examples:
        >>> out = split_heads(tf.reshape(tf.range(6.0), [1, 1, 6]), tf.zeros([3, 2, 1]), 2)
        >>> None if out is None else [t.numpy().ravel().tolist() for t in out]
        [[0.0, 1.0], [2.0, 3.0], [4.0, 5.0]]
    """
    compiled = _compiled_kernels(qkv.dtype)
    if compiled is None:
        return None

    @tf.custom_gradient
    def run(qkv, bias):
        q, k, v = compiled.electra_split_heads(
            qkv, tf.reshape(tf.cast(bias, tf.float32), [-1]), heads=heads
        )

        def grad(*upstream):
            parts = [tf.zeros_like(q) if g is None else g for g in upstream]
            d_qkv, d_bias = compiled.electra_merge_heads(*parts)
            return d_qkv, tf.reshape(tf.cast(d_bias, bias.dtype), tf.shape(bias))

        return (q, k, v), grad

    with tf.name_scope("split_heads"):
        return run(qkv, bias)


def attention_values(
    scores: tf.Tensor,
    mask: tf.Tensor | None,
    values: tf.Tensor,
    dropout: DropoutDraw | None = None,
    scale: float = 1.0,
) -> tf.Tensor:
    """Keras' masked ``Softmax`` of ``scale * scores`` over the last axis (in float32:
    masked positions get probability 0, a row masked entirely gives zeros), a dropout
    on the probabilities, then the product by ``values``, keeping only the
    probabilities for the backward pass.

    A softmax then a matmul keep three tensors of about the scores' size: the scores
    (the softmax's backward pass recomputes it from them), the dropped probabilities (for
    the gradient of ``values``) and ``values``. Here the probabilities before the dropout,
    rounded to the scores' dtype, replace the first two: the backward pass drops them
    again with the same hashed draws (equal bit for bit: the forward pass dropped the same
    rounded values) and takes the softmax's gradient from them. On ELECTRA-Small's
    discriminator (batch 32 x 128, 4 heads, bfloat16): 4 MB less per layer at the peak.

    Args:
        scores: ``[..., T, S]`` attention scores, 16-bit or float32.
        mask: boolean, broadcastable to ``scores`` (True: attend), or None.
        values: ``[..., S, D]``, the same leading axes as ``scores``.
        dropout: the random key of a dropout on the probabilities, or None.
        scale: multiplies the scores.

    Returns:
        ``[..., T, D]`` in ``scores``' dtype.

    Examples:
        >>> out = attention_values(tf.zeros([1, 2, 2]), None, tf.constant([[[1.0], [3.0]]]))
        >>> [round(float(v), 2) for v in tf.reshape(out, [-1])]
        [2.0, 2.0]
    """

    @tf.custom_gradient
    def run(scores, keep, values):
        if compiled is not None:
            probs, dropped = compiled.electra_attention_probs(
                scores, keep, *draw, scale=scale, dropout=drop is not None
            )
            dropped = probs if drop is None else dropped
        elif drop is None:
            probs = dropped = _probs_forward(scores, keep, None, scale)
        else:
            probs, dropped = _probs_forward(scores, keep, drop, scale)
        probs = tf.reshape(probs, tf.shape(scores))
        context = tf.matmul(tf.reshape(dropped, tf.shape(scores)), values)

        def grad(upstream):
            if drop is None:
                again = probs
            else:
                # After the gradient arrives, else it runs (and stays alive) from the forward pass.
                with tf.control_dependencies([upstream]):
                    if compiled is not None:
                        again = compiled.electra_dropout(probs, *draw)
                    else:
                        again = _xla.dropout_rows(probs, drop)
            d_values = tf.matmul(again, upstream, transpose_a=True)
            d_dropped = tf.matmul(upstream, values, transpose_b=True)
            if compiled is not None:
                d_scores = compiled.electra_attention_probs_grad(
                    probs, d_dropped, *draw, scale=scale, dropout=drop is not None
                )
            else:
                d_scores = _probs_backward(probs, d_dropped, drop, scale)
            return tf.reshape(d_scores, tf.shape(scores)), None, d_values

        return context, grad

    scale = float(scale)
    with tf.name_scope("fused_attention_values"):
        drop = _xla.kernel_dropout(dropout)
        compiled = _compiled_kernels(scores.dtype)
        draw = _native.compiled_draw(drop)
        return run(scores, _keep(mask, len(scores.shape)), values)


def sparse_cross_entropy(
    logits: tf.Tensor,
    labels: tf.Tensor,
    *,
    probabilities: bool = False,
    uniform: tf.Tensor | None = None,
    block: int = 128,
) -> tuple[tf.Tensor, ...]:
    """Softmax cross-entropy against integer labels, the most likely class and, with
    ``uniform``, one draw per position from the same softmax: the masked-LM loss and
    the temperature-1 sampler of the pretraining step.

    ``tf.nn.sparse_softmax_cross_entropy_with_logits`` with ``tf.argmax`` beside it, from
    one softmax whose float32 probabilities the backward pass reuses: the loss is the
    log-sum-exp minus the label's logit, the gradient ``(p - onehot(label)) * upstream``
    in the logits' dtype (16-bit logits need no float32 gradient copy).

    Its three backends (:mod:`keras_electra.layers.backend`), side by side below:

    - ``reference``: TensorFlow's loss op and softmax, and :func:`inverse_cdf`.
    - ``xla``: oneDNN's softmax and the loss ``z[best] - z[label] - log(p[best])``
      (``p[best]`` is at least ``1 / V``, so its logarithm is as exact as the
      log-sum-exp), then :func:`inverse_cdf`. On ELECTRA-Small's generator output
      (``[608, 30522]``, bfloat16, fwd + bwd, 2-core Xeon with AMX) that took 66 ms,
      against 105 ms for the same math as XLA kernels and 116 ms for TensorFlow's loss
      op with a float32 cast and an argmax.
    - ``native``: one kernel reads each row of logits once for the loss, the argmax and
      the sample, and one writes the gradient, recomputing the probabilities from the
      logits and the rows' log-sum-exp: no float32 ``[..., V]`` tensor is written or
      kept (ELECTRA-Small's generator: 71 MB). With ``probabilities``, the ``xla`` path.

    Args:
        logits: ``[..., V]``, float32 or 16-bit.
        labels: ``[...]`` int32 class ids in ``[0, V)``.
        probabilities: also return the softmax.
        uniform: ``[...]`` float32 draws in [0, 1): also return one inverse-CDF sample
            per position (:func:`inverse_cdf`; no gradient).
        block: the sampler's search block.

    Returns:
        ``(loss, argmax)``: float32 ``[...]`` per-position losses and int32 ``[...]``
        ids of the largest logits; then, with ``probabilities``, ``probs``, the float32
        ``[..., V]`` softmax (no gradient flows through it); then, with ``uniform``, the
        int32 ``[...]`` samples.

    Examples:
        >>> loss, best = sparse_cross_entropy(tf.constant([[0.0, 0.0]]), tf.constant([1]))
        >>> round(float(loss[0]), 4), int(best[0])
        (0.6931, 0)
    """

    @tf.custom_gradient
    def rows(logits):
        z = tf.cast(logits, tf.float32)
        probs = tf.nn.softmax(z, axis=-1)
        best = tf.argmax(z, axis=-1, output_type=tf.int32)

        def at(values, index):
            return tf.gather(values, index[:, None], batch_dims=1)[:, 0]

        loss = at(z, best) - at(z, flat_labels) - tf.math.log(at(probs, best))

        def grad(upstream, *_):  # the argmax (and the probabilities) pass none
            # Only after the loss's gathers: nothing else waits for them, and a graph's
            # executor can leave them queued (the float32 logits and probabilities alive)
            # until the whole generator's backward pass is done.
            with tf.control_dependencies([loss]):
                probs_now = tf.identity(probs)
            where = tf.stack([tf.range(tf.shape(flat_labels)[0]), flat_labels], axis=1)
            dz = tf.tensor_scatter_nd_sub(probs_now * upstream[:, None], where, upstream)
            return tf.cast(dz, logits.dtype)

        return ((loss, best, probs) if wanted else (loss, best)), grad

    compiled = None if probabilities else _compiled_kernels(logits.dtype)
    if not backend.fast_training():  # the reference: TensorFlow's loss op and softmax
        z = tf.cast(logits, tf.float32)
        labels = tf.cast(labels, tf.int32)
        loss = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=z)
        outputs = (loss, tf.argmax(z, axis=-1, output_type=tf.int32))
        probs = tf.stop_gradient(tf.nn.softmax(z))
    elif compiled is not None:
        return _compiled_cross_entropy(compiled, logits, labels, uniform, block)
    else:
        with tf.name_scope("cross_entropy"):
            flat_labels = tf.reshape(tf.cast(labels, tf.int32), [-1])
            wanted = probabilities or uniform is not None
            loss, best, *probs = rows(_xla.rows(logits))
            lead = tf.shape(labels)
            outputs = (tf.reshape(loss, lead), tf.reshape(best, lead))
            probs = tf.reshape(tf.stop_gradient(probs[0]), tf.shape(logits)) if wanted else None
    if probabilities:
        outputs += (probs,)
    if uniform is not None:
        outputs += (inverse_cdf(probs, uniform, block=block),)
    return outputs


def _compiled_cross_entropy(compiled, logits, labels, uniform, block: int):
    """:func:`sparse_cross_entropy` without ``probabilities`` on the native ops ``compiled``."""

    @tf.custom_gradient
    def rows(logits):
        draws = tf.zeros([0]) if uniform is None else tf.reshape(uniform, [-1])
        loss, best, log_sum_exp, sampled = compiled.electra_softmax_xent(
            logits, flat_labels, tf.cast(draws, tf.float32), block=block
        )

        def grad(upstream, *_):  # the argmax and the sample pass none
            return compiled.electra_softmax_xent_grad(logits, log_sum_exp, flat_labels, upstream)

        return (loss, best, sampled), grad

    with tf.name_scope("cross_entropy"):
        flat_labels = tf.reshape(tf.cast(labels, tf.int32), [-1])
        loss, best, sampled = rows(_xla.rows(logits))
        lead = tf.shape(labels)
        outputs = (tf.reshape(loss, lead), tf.reshape(best, lead))
        return outputs if uniform is None else (*outputs, tf.reshape(sampled, lead))
