"""Output heads of the two towers."""

from __future__ import annotations

import keras
import tensorflow as tf
from keras import ops

from keras_electra.internals import stored_value
from keras_electra.kernels.shared import bias_add
from keras_electra.layers.dense import Dense
from keras_electra.layers.embedding import truncated_normal
from keras_electra.layers.serialized import Serialized


@keras.saving.register_keras_serializable(package="keras_electra")
class GeneratorHead(Serialized, keras.layers.Layer):
    """Masked-LM head: dense(embedding size, GELU) -> LayerNorm -> tied embeddings + bias.

    Computed only at the masked positions. The output projection is the shared word
    table (``token_embedding``), so the head owns only the dense layer, the LayerNorm and
    the output bias (and an ``output_kernel`` without a ``token_embedding``). Logits are
    float32 unless asked for in the compute dtype. The weights are laid out as in
    keras-hub's ``MaskedLMHead`` (``_intermediate_dense``, ``_intermediate_layer_norm``,
    ``_bias``), so checkpoints written with it restore here.

    Args:
        token_embedding: the shared word-embedding layer (a built
            ``keras.layers.Embedding``); not serialized.
        layer_norm_epsilon: LayerNorm epsilon.
        initializer_range: stddev of the truncated-normal initializer.
        vocabulary_size: the number of outputs when there is no ``token_embedding``.

    Examples:
        >>> import numpy as np, keras
        >>> emb = keras.layers.Embedding(50, 8)
        >>> emb.build((None,))
        >>> head = GeneratorHead(emb)
        >>> tuple(head(np.zeros((2, 6, 4), "float32"), np.zeros((2, 3), "int32")).shape)
        (2, 3, 50)
    """

    CONFIG = ("vocabulary_size", "layer_norm_epsilon", "initializer_range")

    def __init__(
        self,
        token_embedding=None,
        layer_norm_epsilon: float = 1e-12,
        initializer_range: float = 0.02,
        vocabulary_size: int | None = None,
        **kwargs,
    ):
        for fixed in ("intermediate_activation", "kernel_initializer", "activation"):
            kwargs.pop(fixed, None)  # configs written by the keras-hub-based head
        super().__init__(**kwargs, autocast=False)
        if token_embedding is None and vocabulary_size is None:
            raise ValueError("GeneratorHead needs a token_embedding or a vocabulary_size.")
        if token_embedding is not None:
            if vocabulary_size not in (None, token_embedding.input_dim):
                raise ValueError(
                    f"GeneratorHead's vocabulary_size {vocabulary_size} differs from its "
                    f"token_embedding's {token_embedding.input_dim} rows."
                )
            vocabulary_size = token_embedding.input_dim
        self.token_embedding = token_embedding
        self.keep(locals())
        self.kernel_initializer = truncated_normal(initializer_range)

    def build(self, inputs_shape, mask_positions_shape=None):
        embedding = self.token_embedding
        width = inputs_shape[-1] if embedding is None else embedding.output_dim
        self._intermediate_dense = Dense(
            width,
            activation="gelu",
            kernel_initializer=self.kernel_initializer,
            dtype=self.dtype_policy,
            name="intermediate_dense",
        )
        self._intermediate_layer_norm = keras.layers.LayerNormalization(
            epsilon=self.layer_norm_epsilon, dtype=self.dtype_policy, name="intermediate_layer_norm"
        )
        self._intermediate_dense.build((inputs_shape[0], None, inputs_shape[-1]))
        self._intermediate_layer_norm.build((inputs_shape[0], None, width))
        if self.token_embedding is None:
            self._kernel = self.add_weight(
                name="output_kernel",
                shape=(width, self.vocabulary_size),
                initializer=self.kernel_initializer,
                dtype=self.dtype,
            )
        self._bias = self.add_weight(
            name="output_bias", shape=(self.vocabulary_size,), initializer="zeros", dtype=self.dtype
        )
        self.built = True

    def call(self, inputs, mask_positions, float32_logits=True):
        """Logits ``[B, P, V]`` at ``mask_positions``: float32, or with
        ``float32_logits=False`` in the compute dtype (for a consumer that computes in
        float32 itself, saving a float32 copy of a ``[B, P, V]`` tensor and its gradient)."""
        x = ops.take_along_axis(inputs, ops.expand_dims(mask_positions, -1), axis=1)
        x = self._intermediate_layer_norm(self._intermediate_dense(x))
        if self.token_embedding is None or self.compute_dtype == "float16":
            # Its own kernel, or float16 (whose range is not float32's): the product of the
            # float32 weights (not autocast) in float32, rounded, as keras-hub's head takes it.
            kernel = (
                stored_value(self._kernel)
                if self.token_embedding is None
                else ops.transpose(stored_value(self.token_embedding.embeddings))
            )
            logits = ops.cast(ops.matmul(x, kernel), self.compute_dtype)
        else:
            logits = self._tied_logits(x)
        logits = bias_add(logits, ops.cast(self._bias, self.compute_dtype))
        return ops.cast(logits, "float32") if float32_logits else logits

    def _tied_logits(self, x):
        """``x @ embeddings^T`` in the compute dtype, the table cast once, as keras-hub's
        ``MaskedLMHead`` (``ReversibleEmbedding(reverse=True)``) takes it; the transposed
        table is never written out."""
        table = ops.cast(self.token_embedding.embeddings, self.compute_dtype)
        rows = tf.reshape(x, [-1, tf.shape(x)[-1]])
        logits = tf.matmul(rows, table, transpose_b=True)
        return tf.reshape(logits, tf.concat([tf.shape(x)[:-1], tf.shape(table)[:1]], 0))

    def compute_output_shape(self, inputs_shape, mask_positions_shape=None):
        # Without positions (Keras' summary of the built layer): a logit row per input row.
        rows = inputs_shape[:-1] if mask_positions_shape is None else mask_positions_shape
        return tuple(rows) + (self.vocabulary_size,)


@keras.saving.register_keras_serializable(package="keras_electra")
class DiscriminatorHead(Serialized, keras.layers.Layer):
    """Replaced-token-detection head: dense(hidden, GELU) -> dense(1).

    Returns one float32 logit per position: > 0 means "replaced".

    The output bias starts at ``output_bias``; the pretrainer sets it to the prior logit
    of the replaced fraction, ``log(p / (1 - p))`` (about -1.7 for p = 0.15). Started at
    0, the head predicts 50% everywhere, and the cheapest early loss reduction is to move
    every encoder weight until all token vectors agree on the base rate (a collapse
    measured in the first 50 steps): Adam moves the one bias only about one learning rate
    per step.

    Args:
        hidden_dim: width of the intermediate dense layer (the tower's hidden size).
        initializer_range: stddev of the truncated-normal initializer.
        output_bias: initial value of the logit's bias.

    Examples:
        >>> import numpy as np
        >>> head = DiscriminatorHead(8, output_bias=-1.7)
        >>> tuple(head(np.zeros((2, 5, 8), "float32")).shape)
        (2, 5)
    """

    CONFIG = ("hidden_dim", "initializer_range", "output_bias")

    def __init__(
        self, hidden_dim: int, initializer_range: float = 0.02, output_bias: float = 0.0, **kwargs
    ):
        super().__init__(**kwargs)
        self.keep(locals())
        self.output_bias = float(output_bias)
        self.dense = Dense(
            hidden_dim,
            activation="gelu",
            kernel_initializer=truncated_normal(initializer_range),
            dtype=self.dtype_policy,
            name="dense",
        )
        self.logits = Dense(
            1,
            kernel_initializer=truncated_normal(initializer_range),
            bias_initializer=keras.initializers.Constant(self.output_bias),
            dtype=self.dtype_policy,
            name="logits",
        )

    def build(self, inputs_shape):
        self.dense.build(inputs_shape)
        self.logits.build(tuple(inputs_shape)[:-1] + (self.hidden_dim,))
        self.built = True

    def call(self, sequence_output):
        logits = self.logits(self.dense(sequence_output))
        return ops.cast(ops.squeeze(logits, axis=-1), "float32")

    def compute_output_shape(self, inputs_shape):
        return tuple(inputs_shape)[:-1]
