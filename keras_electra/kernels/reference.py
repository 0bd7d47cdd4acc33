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


def add_layer_norm(x, residual, norm, dropout=None, bias=None) -> tf.Tensor:
    """A ``Dense`` layer's bias add, the ``Dropout`` layer's mask, the residual add, then
    the ``LayerNormalization`` layer ``norm`` itself, called. (Its ops written out in
    another layer's call compute the same values, but TensorFlow's graph optimizer then
    rewrites a mixed_bfloat16 step's backward pass otherwise: its gradients came out a
    rounding step apart.)"""
    if bias is not None:
        x = keras.ops.add(x, tf.cast(bias, x.dtype))
    if dropout is not None:
        x = apply_mask(x, dropout.mask(x.dtype))
    return norm(x + residual)


def bias_add(x: tf.Tensor, bias: tf.Tensor) -> tf.Tensor:
    """A ``Dense`` layer's bias add (``keras.ops.add``: ``tf.nn.bias_add``, whose
    gradient ``BiasAddGrad`` sums in ``x``'s dtype)."""
    return keras.ops.add(x, bias)


def dense(layer, inputs: tf.Tensor, contracted: int | None, keras_call) -> tf.Tensor:
    """Keras' own call of a ``Dense`` or ``EinsumDense`` layer: ``keras_call(inputs)``."""
    return keras_call(inputs)


def fuses_attention(dtype) -> bool:
    """Never: the attention keeps its reference way (three projections, the softmax
    layer's math, the dropout layer)."""
    return False


def split_heads(qkv: tf.Tensor, bias: tf.Tensor, heads: int) -> tuple:
    """The bias added and the heads transposed out: ``[batch, heads, length, dim]``
    each."""
    batch, length = tf.shape(qkv)[0], tf.shape(qkv)[1]
    dim = int(qkv.shape[-1]) // (3 * heads)
    added = tf.reshape(qkv, [batch, length, 3, heads, dim]) + tf.cast(bias, qkv.dtype)
    return tuple(tf.unstack(tf.transpose(added, [2, 0, 3, 1, 4])))


def attention_values(scores, mask, values, dropout=None, scale=1.0) -> tf.Tensor:
    """Keras' masked ``Softmax`` of ``scale * scores`` in float32 (masked positions get
    -1e9 before and 0 after), rounded to the scores' dtype, the ``Dropout`` layer's
    mask, and a matmul by ``values``."""
    logits = tf.cast(scores, tf.float32) * scale
    keep = None if mask is None else tf.broadcast_to(tf.cast(mask, tf.bool), tf.shape(scores))
    if keep is not None:
        logits = tf.where(keep, logits, -1e9)
    probs = tf.nn.softmax(logits, axis=-1)
    if keep is not None:
        probs = tf.where(keep, probs, 0.0)
    probs = tf.cast(probs, scores.dtype)
    if dropout is not None:
        probs = apply_mask(probs, dropout.mask(probs.dtype))
    return tf.matmul(probs, values)


def _below(total: tf.Tensor) -> tf.Tensor:
    """The largest float32 below ``total``."""
    return tf.math.nextafter(total, tf.zeros_like(total))


def inverse_cdf(probs: tf.Tensor, uniform: tf.Tensor, *, block: int = 128) -> tf.Tensor:
    """The first index whose cumulative probability exceeds ``uniform`` times the total,
    in two levels, so no cumulative sum runs over the whole vocabulary: cut into blocks of
    ``block`` entries (the last padded with zeros), a cumulative sum over the block totals
    finds the block and one over its entries the index, the index one cumulative sum
    would give up to float32 rounding.

    Examples:
        >>> int(inverse_cdf(tf.constant([[0.5, 0.0, 0.5]]), tf.constant([0.6]))[0])
        2
    """
    vocab = tf.shape(probs)[-1]
    lead = tf.shape(probs)[:-1]
    rows = tf.reshape(probs, [-1, vocab])
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


def sparse_cross_entropy(logits, labels, *, probabilities=False, uniform=None) -> tuple:
    """TensorFlow's loss op, argmax and softmax on the float32 logits, and
    :func:`inverse_cdf`.

    Examples:
        >>> loss, best = sparse_cross_entropy(tf.constant([[0.0, 0.0]]), tf.constant([1]))
        >>> round(float(loss[0]), 4), int(best[0])
        (0.6931, 0)
    """
    z = tf.cast(logits, tf.float32)
    labels = tf.cast(labels, tf.int32)
    loss = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=z)
    outputs = (loss, tf.argmax(z, axis=-1, output_type=tf.int32))
    probs = tf.stop_gradient(tf.nn.softmax(z))
    if probabilities:
        outputs += (probs,)
    if uniform is not None:
        outputs += (inverse_cdf(probs, uniform),)
    return outputs


def adam_w(variable, m, v, gradient, scalars: dict, scale=None, decay=None) -> None:
    """Keras' AdamW's dense update in TensorFlow's ops: the gradient times ``scale``,
    the decay's own multiply and subtract, then ``ResourceApplyAdam``."""
    if scale is not None:
        gradient = gradient * tf.cast(scale, gradient.dtype)
    if decay is not None:
        variable.assign_sub(variable * decay)
    tf.raw_ops.ResourceApplyAdam(
        var=variable.handle,
        m=m.handle,
        v=v.handle,
        grad=tf.cast(gradient, tf.as_dtype(variable.dtype)),
        **scalars,
    )


KERNELS = Kernels.of("reference", globals())
