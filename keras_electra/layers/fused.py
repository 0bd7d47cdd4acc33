"""The masked-LM cross-entropy with its sampler, and the inverse-CDF sampler: the last
training operations not yet in :mod:`keras_electra.kernels`.
"""

from __future__ import annotations

import tensorflow as tf

from keras_electra.kernels.xla import rows as _rows
from keras_electra.layers import backend


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
            loss, best, *probs = rows(_rows(logits))
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
        loss, best, sampled = rows(_rows(logits))
        lead = tf.shape(labels)
        outputs = (tf.reshape(loss, lead), tf.reshape(best, lead))
        return outputs if uniform is None else (*outputs, tf.reshape(sampled, lead))
