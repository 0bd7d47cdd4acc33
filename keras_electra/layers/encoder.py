"""One ELECTRA tower: projection from the embedding size, then transformer layers."""

from __future__ import annotations

import keras
import keras_hub
import numpy as np
from keras.src.backend import AutocastScope
from keras_hub.src.layers.modeling.transformer_layer_utils import (
    merge_padding_and_attention_mask,
)

from keras_electra.layers.dropout import AttentionDropout, Dropout, use_fast_dropout
from keras_electra.layers.embedding import truncated_normal
from keras_electra.layers.fused import (
    add_layer_norm,
    bias_gelu,
    fuses_attention_softmax,
    masked_softmax,
    training_kernels,
)

_GELU = keras.activations.get("gelu")


@keras.saving.register_keras_serializable(package="keras_electra")
class TransformerLayer(keras_hub.layers.TransformerEncoder):
    """keras-hub's ``TransformerEncoder`` (same weights and config), faster in training.

    In training, a post-LayerNorm layer runs its attention softmax with the dropout
    on its probabilities, its two residual dropouts + adds + LayerNorms and its
    feed-forward bias + GELU as fused kernels (:mod:`keras_electra.layers.fused`);
    the matmuls are keras-hub's. The dropouts' random bits are drawn by the same
    layers, from the same seeds, as outside the kernels. Inference and pre-LayerNorm
    layers take keras-hub's ``call`` unchanged.
    """

    def call(
        self,
        inputs,
        padding_mask=None,
        attention_mask=None,
        training=None,
        return_attention_scores=False,
    ):
        if not training or self.normalize_first or return_attention_scores:
            # return_attention_scores is passed only when asked for.
            extra = {"return_attention_scores": True} if return_attention_scores else {}
            return super().call(
                inputs,
                padding_mask=padding_mask,
                attention_mask=attention_mask,
                training=training,
                **extra,
            )
        mask = merge_padding_and_attention_mask(inputs, padding_mask, attention_mask)
        with training_kernels():  # the attention's softmax (AttentionSoftmax) reads it
            x = self._self_attention_layer(
                query=inputs, value=inputs, attention_mask=mask, training=training
            )
        x = self._add_norm(x, inputs, self._self_attention_layer_norm, self._self_attention_dropout)
        intermediate = self._feedforward_intermediate_dense
        if intermediate.activation is _GELU and intermediate.use_bias:
            h = keras.ops.matmul(x, intermediate.kernel)  # in the compute dtype
            with AutocastScope(None):  # the float32 bias; its gradient summed in float32
                h = bias_gelu(h, intermediate.bias)
        else:
            h = intermediate(x)
        y = self._feedforward_output_dense(h)
        return self._add_norm(y, x, self._feedforward_layer_norm, self._feedforward_dropout)

    @staticmethod
    def _add_norm(x, residual, norm: keras.layers.LayerNormalization, dropout):
        """``norm(dropout(x) + residual)``, the dropout inside the kernels when it can be."""
        draw = None
        if isinstance(dropout, Dropout):
            draw = dropout.draw(keras.ops.shape(x))
        if draw is None:  # a rate of 0 (the layer returns x) or a noise_shape
            x = dropout(x, training=True)
        with AutocastScope(None):  # LayerNorm's float32 scale and offset, as Keras reads them
            return add_layer_norm(x, residual, norm.gamma, norm.beta, norm.epsilon, draw)


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

    Example:
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

    def build(self, inputs_shape, padding_mask_shape=None):
        shape = tuple(inputs_shape)
        if self.projection is not None:
            self.projection.build(shape)
            shape = shape[:-1] + (self.hidden_dim,)
        for layer in self.transformer_layers:
            layer.build(shape)
            use_fast_dropout(layer)
            _float32_attention_softmax(layer)
        if self.final_layer_norm is not None:
            self.final_layer_norm.build(shape)
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

    def compute_output_shape(self, inputs_shape, padding_mask_shape=None):
        return tuple(inputs_shape)[:-1] + (self.hidden_dim,)

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
    Where :func:`~keras_electra.layers.fused.fuses_attention_softmax` (training, 16-bit
    scores), it is one XLA kernel each way
    (:func:`~keras_electra.layers.fused.masked_softmax`) that also applies ``dropout``,
    the attention's :class:`~keras_electra.layers.dropout.AttentionDropout`, which then
    passes the probabilities through; float32 scores keep TensorFlow's softmax kernel,
    which is faster than XLA's here, and the dropout layer drops.

    Args:
        dropout: the attention's dropout layer, or None.
    """

    def __init__(self, dropout: Dropout | None = None, **kwargs):
        super().__init__(axis=-1, **kwargs)
        self._convert_input_args = False  # the scores stay in the compute dtype
        # Untracked: its seed state is the attention's, which checkpoints already hold.
        object.__setattr__(self, "_attention_dropout", dropout)

    def call(self, inputs, mask=None):
        if fuses_attention_softmax(inputs.dtype):
            dropout = self._attention_dropout
            draw = dropout.draw(keras.ops.shape(inputs)) if dropout is not None else None
            return masked_softmax(inputs, mask, draw)
        probs = super().call(keras.ops.cast(inputs, "float32"), mask=mask)
        return keras.ops.cast(probs, inputs.dtype)


def _float32_attention_softmax(layer: keras.layers.Layer) -> None:
    """Give a built transformer layer's attention an :class:`AttentionSoftmax`, which
    applies the attention's :class:`~keras_electra.layers.dropout.AttentionDropout`
    where it fuses the two.

    Keras' attention calls its softmax only on its explicit-softmax path (``dropout >
    0``); without dropout it takes ``ops.dot_product_attention`` instead.
    """
    attention = getattr(layer, "_self_attention_layer", None)
    softmax = getattr(attention, "_softmax", None)
    if softmax is None or tuple(np.atleast_1d(softmax.axis)) not in ((-1,), (3,)):
        return
    # The softmax holds no state (its dropout's seed is tracked by the attention);
    # setting it untracked keeps the built layer locked.
    dropout = getattr(attention, "_dropout_layer", None)
    dropout = dropout if isinstance(dropout, AttentionDropout) else None
    object.__setattr__(attention, "_softmax", AttentionSoftmax(dropout, dtype="float32"))
