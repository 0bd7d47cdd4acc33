"""One ELECTRA tower: projection from the embedding size, then transformer layers."""

from __future__ import annotations

import keras
import numpy as np
import tensorflow as tf
from keras.src.backend import AutocastScope

from keras_electra.layers.dense import bias_add, use_fast_dense_in
from keras_electra.layers.dropout import Dropout, use_fast_dropout
from keras_electra.layers.embedding import truncated_normal
from keras_electra.layers.fused import (
    add_layer_norm,
    attention_values,
    bias_gelu,
    bias_gelu_matmul,
    fuses_attention_softmax,
    masked_softmax,
    split_heads,
    training_kernels,
)

_GELU = keras.activations.get("gelu")
# Keras' attention scores and output for [B, T, N, D] projections.
_EQUATIONS = ("aecd,abcd->acbe", "acbe,aecd->abcd")


def _plain_dense(layer) -> bool:
    """A ``Dense`` computing ``x @ kernel (+ bias)`` and nothing more."""
    return (
        type(layer) is keras.layers.Dense
        and layer.activation in (None, keras.activations.linear)
        and getattr(layer, "quantization_mode", None) is None
        and layer.lora_rank is None
    )


def _self_attention_mask(padding_mask, attention_mask):
    """The attention's ``[batch, 1 or length, length]`` int32 mask: the padding mask
    ``[batch, length]`` with a query axis, the element-wise minimum with an
    ``attention_mask`` ``[batch, length, length]`` when both are given, or None."""
    mask = None
    if padding_mask is not None:
        mask = keras.ops.cast(keras.ops.expand_dims(padding_mask, 1), "int32")
    if attention_mask is not None:
        attention_mask = keras.ops.cast(attention_mask, "int32")
        mask = attention_mask if mask is None else keras.ops.minimum(mask, attention_mask)
    return mask


def _clone(initializer):
    """A new instance of an initializer (a new seed when it is unseeded)."""
    if isinstance(initializer, keras.initializers.Initializer):
        return initializer.__class__.from_config(initializer.get_config())
    return initializer


@keras.saving.register_keras_serializable(package="keras_electra")
class TransformerLayer(keras.layers.Layer):
    """One transformer layer: self-attention and a feed-forward block, each with a
    residual dropout + add and a LayerNorm after it (post-LayerNorm, BERT's and
    ELECTRA's) or before it (``normalize_first``).

    The weights are laid out as in keras-hub's ``TransformerEncoder``
    (``_self_attention_layer``, a Keras ``MultiHeadAttention``;
    ``_self_attention_layer_norm``; ``_feedforward_intermediate_dense``,
    ``_feedforward_output_dense``, ``_feedforward_layer_norm``) and built in its
    order, so checkpoints written with it restore here and a seed gives the same
    initial values.

    In training, a post-LayerNorm layer runs its attention softmax with the dropout
    on its probabilities (:func:`_fused_attention`), its two residual dropouts + adds
    + LayerNorms and its feed-forward bias + GELU as fused kernels
    (:mod:`keras_electra.layers.fused`). The dropouts' random bits are drawn by the
    same layers, from the same seeds, as outside the kernels. Inference and
    pre-LayerNorm layers take the plain path (:meth:`_plain_call`).

    Args:
        intermediate_dim: feed-forward width.
        num_heads: attention heads; the width must be a multiple of it.
        dropout: the rate of the three dropouts.
        activation: the feed-forward activation.
        layer_norm_epsilon: LayerNorm epsilon.
        kernel_initializer: the matmuls' initializer (cloned per weight).
        bias_initializer: the biases' initializer.
        normalize_first: pre-LayerNorm instead of post-LayerNorm.

    Examples:
        >>> import numpy as np
        >>> layer = TransformerLayer(intermediate_dim=16, num_heads=2)
        >>> tuple(layer(np.zeros((2, 5, 8), "float32")).shape)
        (2, 5, 8)
    """

    def __init__(
        self,
        intermediate_dim: int,
        num_heads: int,
        dropout: float = 0.0,
        activation="relu",
        layer_norm_epsilon: float = 1e-5,
        kernel_initializer="glorot_uniform",
        bias_initializer="zeros",
        normalize_first: bool = False,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.intermediate_dim = intermediate_dim
        self.num_heads = num_heads
        self.dropout = dropout
        self.activation = keras.activations.get(activation)
        self.layer_norm_epsilon = layer_norm_epsilon
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.bias_initializer = keras.initializers.get(bias_initializer)
        self.normalize_first = normalize_first
        self.supports_masking = True

    def build(self, inputs_shape):
        width = inputs_shape[-1]
        if width < self.num_heads:
            raise ValueError(
                f"A transformer layer {width} wide cannot have {self.num_heads} heads."
            )
        dtype = self.dtype_policy
        self._self_attention_layer = keras.layers.MultiHeadAttention(
            num_heads=self.num_heads,
            key_dim=width // self.num_heads,
            dropout=self.dropout,
            kernel_initializer=_clone(self.kernel_initializer),
            bias_initializer=_clone(self.bias_initializer),
            dtype=dtype,
            name="self_attention_layer",
        )
        self._self_attention_layer.build(query_shape=inputs_shape, value_shape=inputs_shape)
        self._self_attention_layer_norm = keras.layers.LayerNormalization(
            epsilon=self.layer_norm_epsilon, dtype=dtype, name="self_attention_layer_norm"
        )
        self._self_attention_layer_norm.build(inputs_shape)
        self._self_attention_dropout = keras.layers.Dropout(
            self.dropout, dtype=dtype, name="self_attention_dropout"
        )
        self._feedforward_layer_norm = keras.layers.LayerNormalization(
            epsilon=self.layer_norm_epsilon, dtype=dtype, name="feedforward_layer_norm"
        )
        self._feedforward_layer_norm.build(inputs_shape)
        self._feedforward_intermediate_dense = keras.layers.Dense(
            self.intermediate_dim,
            activation=self.activation,
            kernel_initializer=_clone(self.kernel_initializer),
            bias_initializer=_clone(self.bias_initializer),
            dtype=dtype,
            name="feedforward_intermediate_dense",
        )
        self._feedforward_intermediate_dense.build(inputs_shape)
        self._feedforward_output_dense = keras.layers.Dense(
            width,
            kernel_initializer=_clone(self.kernel_initializer),
            bias_initializer=_clone(self.bias_initializer),
            dtype=dtype,
            name="feedforward_output_dense",
        )
        self._feedforward_output_dense.build(tuple(inputs_shape[:-1]) + (self.intermediate_dim,))
        self._feedforward_dropout = keras.layers.Dropout(
            self.dropout, dtype=dtype, name="feedforward_dropout"
        )
        self.built = True

    def call(
        self,
        inputs,
        padding_mask=None,
        attention_mask=None,
        training=None,
        return_attention_scores=False,
    ):
        mask = _self_attention_mask(padding_mask, attention_mask)
        if not training or self.normalize_first or return_attention_scores:
            return self._plain_call(inputs, mask, training, return_attention_scores)
        with training_kernels():  # the attention's _compute_attention reads it
            projected = _projected_attention(self._self_attention_layer, inputs, mask)
            if projected is None:
                x = self._self_attention_layer(
                    query=inputs, value=inputs, attention_mask=mask, training=training
                )
                bias = None
            else:
                x, bias = projected
        x = self._add_norm(
            x, inputs, self._self_attention_layer_norm, self._self_attention_dropout, bias
        )
        intermediate = self._feedforward_intermediate_dense
        output = self._feedforward_output_dense
        if intermediate.activation is _GELU and intermediate.use_bias:
            h = keras.ops.matmul(x, intermediate.kernel)  # in the compute dtype
            if _plain_dense(output):
                kernel = tf.identity(output.kernel)  # autocast: the compute dtype
                with AutocastScope(None):  # the float32 bias; its gradient summed in float32
                    y = bias_gelu_matmul(h, intermediate.bias, kernel)
                bias = output.bias if output.use_bias else None
                return self._add_norm(
                    y, x, self._feedforward_layer_norm, self._feedforward_dropout, bias
                )
            with AutocastScope(None):  # the float32 bias; its gradient summed in float32
                h = bias_gelu(h, intermediate.bias)
        else:
            h = intermediate(x)
        y = output(h)
        return self._add_norm(y, x, self._feedforward_layer_norm, self._feedforward_dropout)

    def _plain_call(self, inputs, mask, training, return_attention_scores=False):
        """Each sub-layer called as it is: attention, dropout, residual add and
        LayerNorm (before the block with ``normalize_first``, after it otherwise), then
        the same around the feed-forward block."""
        x = self._self_attention_layer_norm(inputs) if self.normalize_first else inputs
        extra = {"return_attention_scores": True} if return_attention_scores else {}
        x = self._self_attention_layer(
            query=x, value=x, attention_mask=mask, training=training, **extra
        )
        if return_attention_scores:
            x, scores = x
        x = self._self_attention_dropout(x, training=training) + inputs
        if not self.normalize_first:
            x = self._self_attention_layer_norm(x)
        residual = x
        if self.normalize_first:
            x = self._feedforward_layer_norm(x)
        x = self._feedforward_output_dense(self._feedforward_intermediate_dense(x))
        x = self._feedforward_dropout(x, training=training) + residual
        if not self.normalize_first:
            x = self._feedforward_layer_norm(x)
        return (x, scores) if return_attention_scores else x

    def compute_output_shape(self, inputs_shape):
        return inputs_shape

    def get_config(self):
        config = super().get_config()
        config.update(
            intermediate_dim=self.intermediate_dim,
            num_heads=self.num_heads,
            dropout=self.dropout,
            activation=keras.activations.serialize(self.activation),
            layer_norm_epsilon=self.layer_norm_epsilon,
            kernel_initializer=keras.initializers.serialize(self.kernel_initializer),
            bias_initializer=keras.initializers.serialize(self.bias_initializer),
            normalize_first=self.normalize_first,
        )
        return config

    @staticmethod
    def _add_norm(x, residual, norm: keras.layers.LayerNormalization, dropout, bias=None):
        """``norm(dropout(x + bias) + residual)``, the bias and the dropout inside the
        kernels when they can be (``bias``: a sub-layer's output bias variable, or None)."""
        draw = None
        if isinstance(dropout, Dropout):
            draw = dropout.draw(keras.ops.shape(x))
        if draw is None:  # a rate of 0 (the layer returns x) or a noise_shape
            if bias is not None:
                x, bias = bias_add(x, tf.identity(bias)), None  # autocast: x's dtype
            x = dropout(x, training=True)
        with AutocastScope(None):  # LayerNorm's float32 scale and offset, as Keras reads them
            return add_layer_norm(x, residual, norm.gamma, norm.beta, norm.epsilon, draw, bias)


@keras.saving.register_keras_serializable(package="keras_electra")
class ElectraEncoder(keras.layers.Layer):
    """A stack of transformer layers with exact (erf) GELU.

    Post-LayerNorm (BERT's and ELECTRA's) by default; with ``normalize_first`` each
    layer normalizes its inputs instead (pre-LayerNorm) and a final LayerNorm
    follows the last layer.

    When ``embedding_dim != hidden_dim`` a dense layer first projects the shared
    embeddings to this tower's width (``embeddings_project`` in the original code).

    Args:
        embedding_dim: width of the incoming embeddings.
        hidden_dim: width of this tower.
        num_layers: number of transformer layers.
        num_heads: attention heads per layer.
        intermediate_dim: feed-forward width.
        dropout: dropout on attention probabilities, attention outputs and
            feed-forward outputs (one rate, as in BERT and ELECTRA).
        layer_norm_epsilon: LayerNorm epsilon.
        initializer_range: stddev of the truncated-normal initializer.
        normalize_first: pre-LayerNorm layers plus a final LayerNorm.

    Examples:
        >>> import numpy as np
        >>> enc = ElectraEncoder(16, 32, num_layers=1, num_heads=2, intermediate_dim=64)
        >>> x = np.zeros((2, 8, 16), "float32")
        >>> tuple(enc(x, np.ones((2, 8), "bool")).shape)
        (2, 8, 32)
    """

    def __init__(
        self,
        embedding_dim: int,
        hidden_dim: int,
        num_layers: int,
        num_heads: int,
        intermediate_dim: int,
        dropout: float = 0.1,
        layer_norm_epsilon: float = 1e-12,
        initializer_range: float = 0.02,
        normalize_first: bool = False,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.normalize_first = normalize_first
        self.embedding_dim = embedding_dim
        self.hidden_dim = hidden_dim
        self.num_layers = num_layers
        self.num_heads = num_heads
        self.intermediate_dim = intermediate_dim
        self.dropout = dropout
        self.layer_norm_epsilon = layer_norm_epsilon
        self.initializer_range = initializer_range

        # === Layers ===
        self.projection = None
        if embedding_dim != hidden_dim:
            self.projection = keras.layers.Dense(
                hidden_dim,
                kernel_initializer=truncated_normal(initializer_range),
                dtype=self.dtype_policy,
                name="projection",
            )
        self.transformer_layers = [
            TransformerLayer(
                intermediate_dim=intermediate_dim,
                num_heads=num_heads,
                dropout=dropout,
                activation="gelu",  # keras.activations.gelu: exact (erf) by default
                layer_norm_epsilon=layer_norm_epsilon,
                kernel_initializer=truncated_normal(initializer_range),
                normalize_first=normalize_first,
                dtype=self.dtype_policy,
                name=f"transformer_layer_{i}",
            )
            for i in range(num_layers)
        ]
        self.final_layer_norm = None
        if normalize_first:
            self.final_layer_norm = keras.layers.LayerNormalization(
                epsilon=layer_norm_epsilon, dtype=self.dtype_policy, name="final_layer_norm"
            )

    def build(self, embeddings_shape, padding_mask_shape=None):
        # The arguments are named after call's, as Keras' first-call build requires.
        shape = tuple(embeddings_shape)
        if self.projection is not None:
            self.projection.build(shape)
            shape = shape[:-1] + (self.hidden_dim,)
        for layer in self.transformer_layers:
            layer.build(shape)
            use_fast_dropout(layer)
            _float32_attention_softmax(layer)
            _fused_attention(layer)
        if self.final_layer_norm is not None:
            self.final_layer_norm.build(shape)
        use_fast_dense_in(self)
        self.built = True

    def call(self, embeddings, padding_mask, training=None):
        x = embeddings
        if self.projection is not None:
            x = self.projection(x)
        for layer in self.transformer_layers:
            x = layer(x, padding_mask=padding_mask, training=training)
        if self.final_layer_norm is not None:
            x = self.final_layer_norm(x)
        return x

    def compute_output_shape(self, embeddings_shape, padding_mask_shape=None):
        return tuple(embeddings_shape)[:-1] + (self.hidden_dim,)

    # === Config ===
    def get_config(self):
        config = super().get_config()
        config.update(
            embedding_dim=self.embedding_dim,
            hidden_dim=self.hidden_dim,
            num_layers=self.num_layers,
            num_heads=self.num_heads,
            intermediate_dim=self.intermediate_dim,
            dropout=self.dropout,
            layer_norm_epsilon=self.layer_norm_epsilon,
            initializer_range=self.initializer_range,
            normalize_first=self.normalize_first,
        )
        return config


class AttentionSoftmax(keras.layers.Softmax):
    """The attention's masked softmax, computed in float32 (its policy), returned in the
    scores' dtype.

    Under a mixed policy Keras' ``MultiHeadAttention`` computes its softmax in the
    compute dtype (bfloat16 keeps 8 mantissa bits); this one computes it in float32
    and rounds only the probabilities, which the following dropout would round anyway.
    In training with 16-bit scores the attention takes :func:`_fused_attention`
    instead, which never calls this layer.
    """

    def __init__(self, **kwargs):
        super().__init__(axis=-1, **kwargs)
        self._convert_input_args = False  # the scores stay in the compute dtype

    def call(self, inputs, mask=None):
        probs = super().call(keras.ops.cast(inputs, "float32"), mask=mask)
        return keras.ops.cast(probs, inputs.dtype)


def _float32_attention_softmax(layer: keras.layers.Layer) -> None:
    """Give a built transformer layer's attention an :class:`AttentionSoftmax`.

    Keras' attention calls its softmax only on its explicit-softmax path (``dropout >
    0``); without dropout it takes ``ops.dot_product_attention`` instead.
    """
    attention = getattr(layer, "_self_attention_layer", None)
    softmax = getattr(attention, "_softmax", None)
    if softmax is None or tuple(np.atleast_1d(softmax.axis)) not in ((-1,), (3,)):
        return
    # The softmax holds no state; setting it untracked keeps the built layer locked.
    object.__setattr__(attention, "_softmax", AttentionSoftmax(dtype="float32"))


def _fused_attention(layer: keras.layers.Layer) -> None:
    """Give a built transformer layer's attention a training path with fewer passes.

    Where :func:`~keras_electra.layers.fused.fuses_attention_softmax` (training, in
    :func:`~keras_electra.layers.fused.training_kernels`, 16-bit scores), the
    attention's ``_compute_attention`` (Keras' documented override point) becomes
    :func:`_attend`: the ``1 / sqrt(key_dim)`` scale, the masked softmax and the
    dropout on the probabilities are one kernel each way, and with the product by the
    values one custom gradient that keeps only the probabilities
    (:func:`~keras_electra.layers.fused.attention_values`), the dropout's bits drawn by
    the attention's own dropout layer from its seed; one head multiplies
    ``[batch, length, dim]`` tensors without the transposes einsum makes. Elsewhere
    (inference, float32, returned scores, a causal mask, a dropout with a
    ``noise_shape``) it is Keras' own.
    """
    attention = getattr(layer, "_self_attention_layer", None)
    if attention is None or not hasattr(attention, "_compute_attention"):
        return
    keras_compute = attention._compute_attention

    def compute_attention(
        query,
        key,
        value,
        attention_mask=None,
        training=None,
        return_attention_scores=False,
        **kwargs,
    ):
        fusable, dropout = _attention_dropout(
            attention, query.dtype, return_attention_scores, **kwargs
        )
        if training and fusable and len(query.shape) == 4:
            return _attend(attention, query, key, value, attention_mask, dropout)
        return keras_compute(
            query, key, value, attention_mask, training, return_attention_scores, **kwargs
        )

    # Untracked, as the softmax: the attention's weights and config are unchanged.
    object.__setattr__(attention, "_compute_attention", compute_attention)


def _attention_dropout(attention, dtype, return_attention_scores=False, **kwargs):
    """Whether ``attention`` can take the fused kernels (see :func:`_fused_attention`),
    and its dropout layer (None for a rate of 0): ``(fusable, dropout)``."""
    dropout = attention._dropout_layer if attention._dropout > 0 else None
    fusable = (
        fuses_attention_softmax(dtype)
        and not return_attention_scores
        and not kwargs.get("use_causal_mask")
        and (dropout is None or (isinstance(dropout, Dropout) and dropout.drawable))
    )
    return fusable, dropout


def _plain_projection(layer, equation: str) -> bool:
    """An ``EinsumDense`` with this equation, a bias over its output axes, unquantized."""
    return (
        type(layer) is keras.layers.EinsumDense
        and layer.equation == equation
        and layer.bias is not None
        and tuple(layer.bias.shape) == tuple(layer.kernel.shape[-len(layer.bias.shape) :])
        and getattr(layer, "quantization_mode", None) is None
        and getattr(layer, "lora_rank", None) is None
    )


def _projected_attention(attention, x, mask):
    """Self-attention of ``x`` (``[batch, length, width]``) in training, with the query,
    key and value projections as one matmul and the output projection's bias left out.

    Keras' attention multiplies ``x`` by three ``[width, heads, dim]`` kernels; here
    they are concatenated (a ``[width, 3 * heads * dim]`` copy per step, small) and
    ``x`` is multiplied once, then the bias added and the heads split out (one compiled
    kernel, :func:`~keras_electra.layers.fused.split_heads`, where the compiled kernels
    run; else one bias add and one transpose to ``[3, batch, heads, length, dim]``) and,
    in the backward pass, one matmul for ``x``'s gradient where three were added up, one
    for the kernels' and one bias sum. The softmax and the
    product by the values are :func:`_attend`'s kernels. The output projection's bias
    is returned for the LayerNorm kernel that follows to add
    (:func:`~keras_electra.layers.fused.add_layer_norm`), with its gradient.

    Returns ``(output without the bias, the bias variable)``, or None where the
    attention is not Keras' with plain projections and fused kernels (the caller
    calls the attention as it is).
    """
    fusable, dropout = _attention_dropout(attention, x.dtype)
    parts = (attention._query_dense, attention._key_dense, attention._value_dense)
    output = attention._output_dense
    if not (
        fusable
        and type(attention) is keras.layers.MultiHeadAttention
        and len(x.shape) == 3
        and getattr(x, "_keras_mask", None) is None  # Keras' attention would add it
        and all(_plain_projection(p, "abc,cde->abde") for p in parts)
        and _plain_projection(output, "abcd,cde->abe")
        and len({tuple(p.kernel.shape) for p in parts}) == 1
        and (attention._dot_product_equation, attention._combine_equation) == _EQUATIONS
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
        # The compiled kernel: the bias add and the split into heads in one pass.
        split = split_heads(tf.reshape(qkv, [batch, length, 3 * heads * dim]), bias, heads)
        if split is None:
            # The reshape stands between the matmul and the bias (see dense._two_d_call).
            qkv = bias_add(tf.reshape(qkv, [batch, length, 3, heads, dim]), bias)
    if heads == 1:  # each projection [B, T, D]: no transposes
        if split is None:
            q, k, v = tf.unstack(tf.squeeze(qkv, 3), axis=2)  # from [B, T, 3, 1, D]
        else:
            q, k, v = (tf.reshape(t, [batch, length, dim]) for t in split)
        context = _context(attention, q, k, v, mask, dropout)
    else:
        # Each [B, N, T, D].
        q, k, v = split or tf.unstack(tf.transpose(qkv, [2, 0, 3, 1, 4]))
        context = _context(attention, q, k, v, mask, dropout)
        context = tf.transpose(context, [0, 2, 1, 3])  # [B, T, N, D]
    with tf.name_scope("attention_output"):
        out = tf.matmul(
            tf.reshape(context, [-1, heads * dim]),
            tf.reshape(tf.identity(output.kernel), [heads * dim, -1]),
        )
    return tf.reshape(out, [batch, length, -1]), output.bias


def _context(attention, q, k, v, mask, dropout: Dropout | None):
    """The attention's output for queries, keys and values ``[B, N, T, D]`` (or, one
    head, ``[B, T, D]``): the scores as query by key^T, then the scale, mask, softmax,
    dropout and the product by the values as one custom gradient
    (:func:`~keras_electra.layers.fused.attention_values`)."""
    if mask is not None:
        mask = keras.ops.cast(mask, "bool")
    scores = tf.matmul(q, k, transpose_b=True)  # [B, N, T, S] or [B, T, S]
    draw = dropout.draw(tf.shape(scores)) if dropout is not None else None
    scale = attention._inverse_sqrt_key_dim
    return attention_values(scores, _over_heads(mask, scores), v, draw, scale)


def _over_heads(mask, scores):
    """An attention mask with an axis added for the heads, as Keras' ``_masked_softmax``
    expands it, until it has the scores' rank (None stays None)."""
    while mask is not None and len(mask.shape) < len(scores.shape):
        mask = tf.expand_dims(mask, -3)
    return mask


def _attend(attention, query, key, value, mask, dropout: Dropout | None):
    """Keras' explicit-softmax attention on ``[batch, length, heads, dim]`` projections,
    the scale, mask and dropout inside the fused softmax; returns the output and the
    (dropped) probabilities, or None for them where the probabilities and the product
    with the values are one custom gradient (:func:`~keras_electra.layers.fused.attention_values`,
    which keeps less for the backward pass; the caller asked for no scores)."""
    one_head = query.shape[2] == 1  # [B, T, 1, D] holds [B, T, D]: no transposes
    if one_head:
        q, k, v = (tf.squeeze(t, 2) for t in (query, key, value))
        return tf.expand_dims(_context(attention, q, k, v, mask, dropout), 2), None
    if (attention._dot_product_equation, attention._combine_equation) == _EQUATIONS:
        # Keras' einsum multiplies key by query and transposes the [B, N, S, T] product;
        # query by key^T is the scores as they are, one pass over them less each way.
        q, k, v = (tf.transpose(t, [0, 2, 1, 3]) for t in (query, key, value))  # [B, N, ., D]
        context = _context(attention, q, k, v, mask, dropout)
        return tf.transpose(context, [0, 2, 1, 3]), None  # [B, T, N, D]
    scale = attention._inverse_sqrt_key_dim
    if mask is not None:
        mask = keras.ops.cast(mask, "bool")
    draw_for = dropout.draw if dropout is not None else lambda shape: None
    scores = keras.ops.einsum(attention._dot_product_equation, key, query)  # [B, N, T, S]
    mask = _over_heads(mask, scores)
    probs = masked_softmax(scores, mask, draw_for(tf.shape(scores)), scale)
    return keras.ops.einsum(attention._combine_equation, probs, value), probs
