"""Output heads of the two towers."""

from __future__ import annotations

import keras
import keras_hub
import tensorflow as tf
from keras import ops

from keras_electra.layers.dense import bias_add, use_fast_dense_in
from keras_electra.layers.embedding import truncated_normal


@keras.saving.register_keras_serializable(package="keras_electra")
class GeneratorHead(keras_hub.layers.MaskedLMHead):
    """Masked-LM head: dense(embedding size, GELU) -> LayerNorm -> tied embeddings + bias.

    Computed only at the masked positions. The output projection is the shared
    word-embedding matrix (``token_embedding``), so the head owns only the dense
    layer, the LayerNorm and the output bias. Logits are returned in float32 unless
    asked for in the compute dtype.

    Args:
        token_embedding: the shared ``ReversibleEmbedding``.
        layer_norm_epsilon: LayerNorm epsilon.
        initializer_range: stddev of the truncated-normal initializer.

    Example:
        >>> import numpy as np, keras_hub
        >>> emb = keras_hub.layers.ReversibleEmbedding(50, 8)
        >>> emb.build((None,))
        >>> head = GeneratorHead(emb)
        >>> tuple(head(np.zeros((2, 6, 4), "float32"), np.zeros((2, 3), "int32")).shape)
        (2, 3, 50)
    """

    def __init__(
        self,
        token_embedding=None,
        layer_norm_epsilon: float = 1e-12,
        initializer_range: float = 0.02,
        vocabulary_size: int | None = None,
        **kwargs,
    ):
        for fixed in ("intermediate_activation", "kernel_initializer", "activation"):
            kwargs.pop(fixed, None)
        super().__init__(
            vocabulary_size=vocabulary_size,
            token_embedding=token_embedding,
            intermediate_activation="gelu",
            layer_norm_epsilon=layer_norm_epsilon,
            kernel_initializer=truncated_normal(initializer_range),
            **kwargs,
        )
        self.initializer_range = initializer_range

    def build(self, inputs_shape, mask_positions_shape=None):
        super().build(inputs_shape, mask_positions_shape)
        use_fast_dense_in(self)

    def call(self, inputs, mask_positions, float32_logits=True):
        """Logits ``[B, P, V]`` at ``mask_positions``: float32, or with
        ``float32_logits=False`` in the compute dtype (for a consumer that computes in
        float32 itself, saving a float32 copy of a ``[B, P, V]`` tensor and its gradient)."""
        # float16's range is not float32's: its logits keep keras-hub's float32 product.
        if self.token_embedding is None or self.compute_dtype == "float16":
            logits = super().call(inputs, mask_positions)
        else:
            x = ops.take_along_axis(inputs, ops.expand_dims(mask_positions, -1), axis=1)
            x = self._intermediate_layer_norm(self._intermediate_dense(x))
            logits = bias_add(self._tied_logits(x), ops.cast(self._bias, self.compute_dtype))
        return ops.cast(logits, "float32") if float32_logits else logits

    def _tied_logits(self, x):
        """``x @ embeddings^T`` in the compute dtype.

        keras-hub's ``MaskedLMHead`` reads the shared table in float32 (an
        ``Embedding``'s variable is not autocast), so under a mixed policy its
        projection is a float32 matmul with a float32 ``[positions, vocabulary]``
        output (and gradient) that the head then rounds to the compute dtype. Here the
        table is cast once and the product taken in the compute dtype; the transposed
        table is never written out.
        """
        table = ops.cast(self.token_embedding.embeddings, self.compute_dtype)
        rows = tf.reshape(x, [-1, tf.shape(x)[-1]])
        logits = tf.matmul(rows, table, transpose_b=True)
        return tf.reshape(logits, tf.concat([tf.shape(x)[:-1], tf.shape(table)[:1]], 0))

    def get_config(self):
        config = super().get_config()
        config["initializer_range"] = self.initializer_range
        return config


@keras.saving.register_keras_serializable(package="keras_electra")
class DiscriminatorHead(keras.layers.Layer):
    """Replaced-token-detection head: dense(hidden, GELU) -> dense(1).

    Returns one float32 logit per position: > 0 means "replaced".

    The output bias starts at ``output_bias``; the pretrainer sets it to the
    prior logit of the replaced fraction, ``log(p / (1 - p))`` (about -1.7 for
    p = 0.15). Started at 0, the head predicts 50% everywhere, and the cheapest
    early loss reduction is to move every encoder weight until all token vectors
    agree on the base rate (a collapse measured in the first 50 steps), because
    Adam moves the one bias only about one learning rate per step.

    Args:
        hidden_dim: width of the intermediate dense layer (the tower's hidden size).
        initializer_range: stddev of the truncated-normal initializer.
        output_bias: initial value of the logit's bias.

    Example:
        >>> import numpy as np
        >>> head = DiscriminatorHead(8, output_bias=-1.7)
        >>> tuple(head(np.zeros((2, 5, 8), "float32")).shape)
        (2, 5)
    """

    def __init__(
        self,
        hidden_dim: int,
        initializer_range: float = 0.02,
        output_bias: float = 0.0,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.hidden_dim = hidden_dim
        self.initializer_range = initializer_range
        self.output_bias = float(output_bias)
        self.dense = keras.layers.Dense(
            hidden_dim,
            activation="gelu",
            kernel_initializer=truncated_normal(initializer_range),
            dtype=self.dtype_policy,
            name="dense",
        )
        self.logits = keras.layers.Dense(
            1,
            kernel_initializer=truncated_normal(initializer_range),
            bias_initializer=keras.initializers.Constant(self.output_bias),
            dtype=self.dtype_policy,
            name="logits",
        )

    def build(self, inputs_shape):
        self.dense.build(inputs_shape)
        self.logits.build(tuple(inputs_shape)[:-1] + (self.hidden_dim,))
        use_fast_dense_in(self)
        self.built = True

    def call(self, sequence_output):
        logits = self.logits(self.dense(sequence_output))
        return ops.cast(ops.squeeze(logits, axis=-1), "float32")

    def compute_output_shape(self, inputs_shape):
        return tuple(inputs_shape)[:-1]

    def get_config(self):
        config = super().get_config()
        config.update(
            hidden_dim=self.hidden_dim,
            initializer_range=self.initializer_range,
            output_bias=self.output_bias,
        )
        return config
