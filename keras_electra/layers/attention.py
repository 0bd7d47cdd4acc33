"""Multi-head attention written here, with the weights of Keras' ``MultiHeadAttention``.

:class:`SelfAttention` keeps ``MultiHeadAttention``'s sub-layers, variable names, shapes
and build order, so keras-hub-written checkpoints restore into it and a seed gives the
same initial values (``tests/test_layer_layout.py``; ARCHITECTURE.md, "Known debts").
Two ways through it:

- the **reference** way (its call: inference, float32 training, returned scores, the
  ``reference`` kernels): each step of the math an op of its own;
- the **fused** way (:meth:`SelfAttention.fused_output`, which a post-LayerNorm
  :class:`~keras_electra.layers.encoder.TransformerLayer` takes in training where its
  kernel table fuses the attention: 16-bit scores on ``xla`` and ``native``): the three
  projections as one matmul, the table's ``split_heads``, and the scale, mask, softmax,
  dropout and product by the values as its ``attention_values``.

Both split the heads to ``[batch, heads, length, dim]`` and then call
:meth:`SelfAttention.positions` on the queries and keys: the one seam where a position
scheme (rotary, for one) goes, for both ways at once.
"""

from __future__ import annotations

import math

import keras
import tensorflow as tf

from keras_electra.layers.dense import EinsumDense
from keras_electra.layers.dropout import Dropout
from keras_electra.layers.serialized import Serialized

# Keras' projection equations for [batch, length, width] inputs.
_IN = "abc,cde->abde"
_OUT = "abcd,cde->abe"


def clone_initializer(initializer):
    """A new instance of an initializer (a new seed when it is unseeded), as Keras'
    ``MultiHeadAttention`` clones one for each sub-layer."""
    if isinstance(initializer, keras.initializers.Initializer):
        return initializer.__class__.from_config(initializer.get_config())
    return initializer


def _heads_first(mask, rank: int):
    """A ``[batch, 1 or length, length]`` attention mask as bool with an axis for the
    heads (None stays None), broadcastable to scores of ``rank``."""
    if mask is None:
        return None
    mask = tf.cast(mask, tf.bool)
    while len(mask.shape) < rank:
        mask = tf.expand_dims(mask, -3)
    return mask


def float32_softmax(scores: tf.Tensor, mask) -> tf.Tensor:
    """Keras' masked ``Softmax`` over the last axis, computed in float32 and returned in
    ``scores``' dtype: masked positions get -1e9 before and 0 after (a row masked
    entirely gives zeros). Under a mixed policy the probabilities are rounded once,
    where the compute-dtype softmax of ``MultiHeadAttention`` keeps 8 mantissa bits
    (bfloat16) throughout."""
    logits = tf.cast(scores, tf.float32)
    keep = _heads_first(mask, len(scores.shape))
    if keep is not None:
        logits = tf.where(keep, logits, -1e9)
    probs = tf.nn.softmax(logits, axis=-1)
    if keep is not None:
        probs = tf.where(keep, probs, 0.0)
    return tf.cast(probs, scores.dtype)


def _plain(projection: keras.layers.EinsumDense) -> bool:
    """A projection computing ``x @ kernel + bias`` and nothing more."""
    return (
        projection.bias is not None
        and getattr(projection, "quantization_mode", None) is None
        and getattr(projection, "lora_rank", None) is None
    )


@keras.saving.register_keras_serializable(package="keras_electra")
class SelfAttention(Serialized, keras.layers.Layer):
    """Multi-head dot-product attention of ``query`` over ``value`` (itself by default).

    Args:
        num_heads: attention heads.
        key_dim: the width of each head.
        dropout: the dropout rate on the attention probabilities.
        kernel_initializer: the projections' kernel initializer (cloned per projection).
        bias_initializer: the projections' bias initializer (cloned per projection).
        seed: the dropout's seed.

    Call arguments:
        query: ``[batch, length, width]``.
        value: ``[batch, source length, width]``, or None for ``query`` (self-attention).
        attention_mask: ``[batch, length or 1, source length]``, True or 1 where a query
            attends a position, or None.
        training: dropout on.
        return_attention_scores: also return the probabilities ``[batch, heads,
            length, source length]`` (before the dropout).

    Examples:
        >>> import numpy as np
        >>> attention = SelfAttention(num_heads=2, key_dim=4)
        >>> tuple(attention(np.zeros((3, 5, 8), "float32")).shape)
        (3, 5, 8)
    """

    CONFIG = ("num_heads", "key_dim", "dropout", "kernel_initializer", "bias_initializer", "seed")

    def __init__(
        self,
        num_heads: int,
        key_dim: int,
        dropout: float = 0.0,
        kernel_initializer="glorot_uniform",
        bias_initializer="zeros",
        seed: int | None = None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.keep(locals())
        self.scale = 1.0 / math.sqrt(float(key_dim))
        self.supports_masking = True

    def _projection(self, name: str, equation: str, output_shape, bias_axes: str, input_shape):
        """A new projection, built on ``input_shape``."""
        projection = EinsumDense(
            equation,
            output_shape=output_shape,
            bias_axes=bias_axes,
            kernel_initializer=clone_initializer(self.kernel_initializer),
            bias_initializer=clone_initializer(self.bias_initializer),
            dtype=self.dtype_policy,
            name=name,
        )
        projection.build(input_shape)
        return projection

    def build(self, query_shape, value_shape=None):
        value_shape = query_shape if value_shape is None else value_shape
        heads = (None, self.num_heads, self.key_dim)
        # MultiHeadAttention's order: each clone of a seedless initializer draws a seed.
        self._query_dense = self._projection("query", _IN, heads, "de", query_shape)
        self._key_dense = self._projection("key", _IN, heads, "de", value_shape)
        self._value_dense = self._projection("value", _IN, heads, "de", value_shape)
        self._dropout_layer = Dropout(self.dropout, dtype=self.dtype_policy, seed=self.seed)
        context = tuple(query_shape[:-1]) + (self.num_heads, self.key_dim)
        output = (None, query_shape[-1])
        self._output_dense = self._projection("attention_output", _OUT, output, "e", context)
        self.built = True

    def positions(self, query: tf.Tensor, key: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        """The seam for a position scheme: queries and keys ``[batch, heads, length,
        dim]`` after the head split, before the scores, returned as they are; a subclass
        that overrides it (rotary positions, say) changes both paths."""
        return query, key

    def call(
        self, query, value=None, attention_mask=None, training=None, return_attention_scores=False
    ):
        value = query if value is None else value
        q = self._query_dense(query, training=training)  # [B, T, N, D]
        k = self._key_dense(value, training=training)
        v = self._value_dense(value, training=training)
        q, k, v = (tf.transpose(t, [0, 2, 1, 3]) for t in (q, k, v))  # [B, N, T, D]
        q, k = self.positions(q, k)
        scores = tf.matmul(q * tf.cast(self.scale, q.dtype), k, transpose_b=True)
        probs = float32_softmax(scores, attention_mask)
        dropped = self._dropout_layer(probs, training=training)
        context = tf.transpose(tf.matmul(dropped, v), [0, 2, 1, 3])  # [B, T, N, D]
        out = self._output_dense(context, training=training)
        return (out, probs) if return_attention_scores else out

    def fused_output(self, x, mask, kernels):
        """Self-attention of ``x`` ``[batch, length, width]`` in training on the fused
        way, on the kernel table ``kernels``, without the output projection's bias:
        ``(output, bias variable)``, for the kernel that follows (the layer's residual +
        LayerNorm) to add; None where the fused way does not apply (the table does not
        fuse these scores, a dropout with a ``noise_shape``, a quantized or LoRA
        projection): the caller takes :meth:`call`.

        ``x`` is multiplied once by the query, key and value kernels concatenated (a small
        ``[width, 3 * heads * dim]`` copy per step), so the backward pass has one matmul
        for ``x``'s gradient, not three; the bias add and head split are the table's
        ``split_heads``. One head multiplies ``[batch, length, dim]`` tensors without
        transposes.
        """
        dropout = self._dropout_layer if self.dropout > 0 else None
        parts = (self._query_dense, self._key_dense, self._value_dense)
        if not (
            kernels.fuses_attention(x.dtype)
            and len(x.shape) == 3
            and (dropout is None or dropout.drawable)
            and all(_plain(p) for p in (*parts, self._output_dense))
        ):
            return None
        width, heads, dim = (int(d) for d in parts[0].kernel.shape)
        batch, length = tf.shape(x)[0], tf.shape(x)[1]
        with tf.name_scope("query_key_value"):  # the scope names the matmul in a profile
            # tf.identity reads the variables autocast (the compute dtype).
            kernel = tf.concat(
                [tf.reshape(tf.identity(p.kernel), [width, heads * dim]) for p in parts], 1
            )
            bias = tf.stack([tf.identity(p.bias) for p in parts])  # [3, heads, dim]
            qkv = tf.matmul(tf.reshape(x, [-1, width]), kernel)
            qkv = tf.reshape(qkv, [batch, length, 3 * heads * dim])
            q, k, v = kernels.split_heads(qkv, bias, heads)  # each [B, N, T, D]
        q, k = self.positions(q, k)
        if heads == 1:  # each projection [B, T, D]: no transposes
            q, k, v = (tf.squeeze(t, 1) for t in (q, k, v))
            context = self._attend(kernels, q, k, v, mask, dropout)
        else:
            context = tf.transpose(self._attend(kernels, q, k, v, mask, dropout), [0, 2, 1, 3])
        with tf.name_scope("attention_output"):
            out = tf.matmul(
                tf.reshape(context, [-1, heads * dim]),
                tf.reshape(tf.identity(self._output_dense.kernel), [heads * dim, -1]),
            )
        return tf.reshape(out, [batch, length, -1]), self._output_dense.bias

    def _attend(self, kernels, q, k, v, mask, dropout: Dropout | None):
        """The context for ``[B, N, T, D]`` (or one head's ``[B, T, D]``) queries, keys
        and values: ``q k^T``, then the scale, mask, softmax, dropout and product by the
        values as the table's ``attention_values``."""
        scores = tf.matmul(q, k, transpose_b=True)  # [B, N, T, S] or [B, T, S]
        draw = dropout.draw(tf.shape(scores)) if dropout is not None else None
        keep = _heads_first(mask, len(scores.shape))
        return kernels.attention_values(scores, keep, v, draw, self.scale)

    def compute_output_shape(self, query_shape, value_shape=None):
        return tuple(query_shape)
