"""One ELECTRA tower: projection from the embedding size, then transformer layers."""

from __future__ import annotations

import keras
import tensorflow as tf

from keras_electra import kernels
from keras_electra.internals import stored_value
from keras_electra.layers.attention import SelfAttention, clone_initializer
from keras_electra.layers.dense import Dense
from keras_electra.layers.dropout import Dropout
from keras_electra.layers.embedding import truncated_normal
from keras_electra.layers.serialized import Serialized

_GELU = keras.activations.get("gelu")


def _plain_dense(layer) -> bool:
    """A ``Dense`` computing ``x @ kernel (+ bias)`` and nothing more."""
    return (
        isinstance(layer, keras.layers.Dense)
        and layer.activation in (None, keras.activations.linear)
        and getattr(layer, "quantization_mode", None) is None
        and layer.lora_rank is None
    )


# The attention patterns of a tower: full, or causal in one direction.
DIRECTIONS = (None, "left_to_right", "right_to_left")


def causal_mask(length, direction: str | None):
    """The ``[1, length, length]`` int32 mask of a causal tower (query ``i`` may attend to
    key ``j`` where it is 1): ``j <= i`` for ``"left_to_right"``, ``j >= i`` for
    ``"right_to_left"``; None for a full tower (``direction`` None).

    Examples:
        >>> causal_mask(3, "left_to_right").numpy()[0].tolist()
        [[1, 0, 0], [1, 1, 0], [1, 1, 1]]
    """
    if direction is None:
        return None
    query = tf.range(length)[:, None]
    key = tf.range(length)[None, :]
    allowed = key <= query if direction == "left_to_right" else key >= query
    return tf.cast(allowed, tf.int32)[None]


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


@keras.saving.register_keras_serializable(package="keras_electra")
class TransformerLayer(Serialized, keras.layers.Layer):
    """One transformer layer: self-attention and a feed-forward block, each with a
    residual dropout + add and a LayerNorm after it (post-LayerNorm, BERT's and
    ELECTRA's) or before it (``normalize_first``).

    The weights are laid out as in keras-hub's ``TransformerEncoder``
    (``_self_attention_layer``, a :class:`~keras_electra.layers.attention.SelfAttention`
    with the weights of Keras' ``MultiHeadAttention``; ``_self_attention_layer_norm``;
    ``_feedforward_intermediate_dense``, ``_feedforward_output_dense``,
    ``_feedforward_layer_norm``) and built in its order, so checkpoints written with it
    restore here and a seed gives the same initial values.

    One path, its operations those of the kernel table (:mod:`keras_electra.kernels`):
    the process's backend in training, the ``reference`` one (Keras' layers' ops, bit
    for bit) in inference. Each block ends with the table's ``add_layer_norm`` (the
    sub-layer's output bias and dropout inside it); the attention takes its fused way
    where the table fuses it
    (:meth:`~keras_electra.layers.attention.SelfAttention.fused_output`), and the
    feed-forward's bias + GELU + matmul is ``bias_gelu_matmul``; the dropouts' bits are
    drawn by the same layers from the same seeds as outside the kernels. Where no kernel
    takes a block's end (pre-LayerNorm, ``normalize_first``: a plain residual add; or
    returned attention scores), the sub-layers are called as they are.

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

    CONFIG = (
        "intermediate_dim",
        "num_heads",
        "dropout",
        "activation",
        "layer_norm_epsilon",
        "kernel_initializer",
        "bias_initializer",
        "normalize_first",
    )

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
        self.keep(locals())
        self.supports_masking = True

    def build(self, inputs_shape):
        width, heads = inputs_shape[-1], self.num_heads
        if width < heads:
            raise ValueError(f"A transformer layer {width} wide cannot have {heads} heads.")
        dtype, epsilon, rate = self.dtype_policy, self.layer_norm_epsilon, self.dropout

        def init():  # new initializers per sub-layer: each unseeded clone draws its seed
            kernel = clone_initializer(self.kernel_initializer)
            bias = clone_initializer(self.bias_initializer)
            return {"kernel_initializer": kernel, "bias_initializer": bias, "dtype": dtype}

        self._self_attention_layer = SelfAttention(
            heads, width // heads, rate, **init(), name="self_attention_layer"
        )
        self._self_attention_layer.build(inputs_shape)
        self._self_attention_layer_norm = keras.layers.LayerNormalization(
            epsilon=epsilon, dtype=dtype, name="self_attention_layer_norm"
        )
        self._self_attention_layer_norm.build(inputs_shape)
        self._self_attention_dropout = Dropout(rate, dtype=dtype, name="self_attention_dropout")
        self._feedforward_layer_norm = keras.layers.LayerNormalization(
            epsilon=epsilon, dtype=dtype, name="feedforward_layer_norm"
        )
        self._feedforward_layer_norm.build(inputs_shape)
        self._feedforward_intermediate_dense = Dense(
            self.intermediate_dim, self.activation, **init(), name="feedforward_intermediate_dense"
        )
        self._feedforward_intermediate_dense.build(inputs_shape)
        self._feedforward_output_dense = Dense(width, **init(), name="feedforward_output_dense")
        self._feedforward_output_dense.build(tuple(inputs_shape[:-1]) + (self.intermediate_dim,))
        self._feedforward_dropout = Dropout(rate, dtype=dtype, name="feedforward_dropout")
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
        # None: the sub-layers called as they are, where no kernel takes a block's end (a
        # pre-LayerNorm block ends in a plain add; returned scores are the attention's).
        plain = self.normalize_first or return_attention_scores
        table = None if plain else kernels.table(training)
        x = self._self_attention_layer_norm(inputs) if self.normalize_first else inputs
        x, bias, scores = self._attention(table, x, mask, training, return_attention_scores)
        norm, dropout = self._self_attention_layer_norm, self._self_attention_dropout
        x = self._end_block(table, x, inputs, norm, dropout, bias, training)
        residual = x
        if self.normalize_first:
            x = self._feedforward_layer_norm(x)
        y, bias = self._feedforward(table, x)
        norm, dropout = self._feedforward_layer_norm, self._feedforward_dropout
        x = self._end_block(table, y, residual, norm, dropout, bias, training)
        return (x, scores) if return_attention_scores else x

    def _attention(self, table, x, mask, training, return_attention_scores):
        """``(output, its projection's bias still to add or None, the scores or None)``:
        the fused way where the table fuses it, else the attention's call."""
        attention = self._self_attention_layer
        fused = None if table is None else attention.fused_output(x, mask, table)
        if fused is not None:
            return (*fused, None)
        extra = {"return_attention_scores": True} if return_attention_scores else {}
        out = attention(query=x, value=x, attention_mask=mask, training=training, **extra)
        return (out[0], None, out[1]) if return_attention_scores else (out, None, None)

    def _feedforward(self, table, x):
        """``(output, its bias still to add or None)``: exact GELU with a bias as the
        table's ``bias_gelu_matmul`` (its output bias left to the block's end) or
        ``bias_gelu``, else (no table, another activation, a quantized layer) the two
        layers' calls."""
        intermediate = self._feedforward_intermediate_dense
        output = self._feedforward_output_dense
        fusable = intermediate.activation is _GELU and intermediate.use_bias
        if table is None or not fusable or getattr(intermediate, "quantization_mode", None):
            return output(intermediate(x)), None
        h = keras.ops.matmul(x, intermediate.kernel)  # in the compute dtype
        gelu_bias = stored_value(intermediate.bias)  # float32: its gradient summed in float32
        if not _plain_dense(output):
            return output(table.bias_gelu(h, gelu_bias)), None
        kernel = tf.identity(output.kernel)  # autocast: the compute dtype
        y = table.bias_gelu_matmul(h, gelu_bias, kernel)
        return y, output.bias if output.use_bias else None

    def _end_block(self, table, x, residual, norm, dropout, bias, training):
        """``norm(dropout(x + bias) + residual)``, the bias (a variable, or None) and the
        dropout inside the table's ``add_layer_norm`` where they can be; without a table,
        the dropout layer, the add and (post-LayerNorm) the LayerNorm layer."""
        if table is None:
            x = dropout(x, training=training) + residual
            return x if self.normalize_first else norm(x)
        draw = dropout.draw(keras.ops.shape(x)) if training else None
        if draw is None:  # inference, a rate of 0 (the layer returns x) or a noise_shape
            if bias is not None:
                x, bias = table.bias_add(x, tf.identity(bias)), None  # autocast: x's dtype
            x = dropout(x, training=training)
        # float32, as LayerNorm's scale and offset are (Keras does not autocast them)
        bias = None if bias is None else stored_value(bias)
        return table.add_layer_norm(x, residual, norm, draw, bias)

    def compute_output_shape(self, inputs_shape):
        return inputs_shape


@keras.saving.register_keras_serializable(package="keras_electra")
class ElectraEncoder(Serialized, keras.layers.Layer):
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
        direction: ``None`` (each position attends to every real position), or a causal
            tower: ``"left_to_right"`` (position ``t`` attends to positions ``<= t``) or
            ``"right_to_left"`` (to positions ``>= t``), as the two towers of Electric's
            cloze generator.

    Examples:
        >>> import numpy as np
        >>> enc = ElectraEncoder(16, 32, num_layers=1, num_heads=2, intermediate_dim=64)
        >>> x = np.zeros((2, 8, 16), "float32")
        >>> tuple(enc(x, np.ones((2, 8), "bool")).shape)
        (2, 8, 32)
    """

    CONFIG = (
        "embedding_dim",
        "hidden_dim",
        "num_layers",
        "num_heads",
        "intermediate_dim",
        "dropout",
        "layer_norm_epsilon",
        "initializer_range",
        "normalize_first",
        "direction",
    )

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
        direction: str | None = None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        if direction not in DIRECTIONS:
            raise ValueError(f"direction must be one of {DIRECTIONS}, got {direction!r}.")
        self.keep(locals())

        # === Layers ===
        self.projection = None
        if embedding_dim != hidden_dim:
            self.projection = Dense(
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
        if self.final_layer_norm is not None:
            self.final_layer_norm.build(shape)
        self.built = True

    def call(self, embeddings, padding_mask, training=None):
        x = embeddings
        if self.projection is not None:
            x = self.projection(x)
        causal = causal_mask(keras.ops.shape(x)[1], self.direction)
        for layer in self.transformer_layers:
            x = layer(x, padding_mask=padding_mask, attention_mask=causal, training=training)
        if self.final_layer_norm is not None:
            x = self.final_layer_norm(x)
        return x

    def compute_output_shape(self, embeddings_shape, padding_mask_shape=None):
        return tuple(embeddings_shape)[:-1] + (self.hidden_dim,)
