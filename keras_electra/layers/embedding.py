"""The embedding block that the generator and the discriminator share."""

from __future__ import annotations

import keras
import keras_hub


def truncated_normal(stddev: float) -> keras.initializers.Initializer:
    """A new truncated-normal initializer: call it once per weight.

    Keras 3 fixes an unseeded initializer's seed when the instance is created, so
    one instance handed to several layers would give them identical values.
    """
    return keras.initializers.TruncatedNormal(stddev=stddev)


@keras.saving.register_keras_serializable(package="keras_electra")
class ElectraEmbedding(keras.layers.Layer):
    """Word + position + token-type embeddings, then LayerNorm and dropout.

    ELECTRA ties these weights between the generator and the discriminator: one
    instance of this layer is called by both towers, so they update the same
    variables. The word-embedding matrix is also the generator's output
    projection (see :class:`GeneratorHead`).

    Args:
        vocabulary_size: number of word pieces.
        embedding_dim: width of the embeddings.
        max_sequence_length: size of the position table.
        num_segments: number of token types (segment ids).
        dropout: dropout rate after the LayerNorm.
        layer_norm_epsilon: LayerNorm epsilon.
        initializer_range: stddev of the truncated-normal initializer.

    Example:
        >>> import numpy as np
        >>> layer = ElectraEmbedding(100, 16, max_sequence_length=8)
        >>> ids = np.zeros((2, 8), "int32")
        >>> tuple(layer(ids, ids).shape)
        (2, 8, 16)
    """

    def __init__(
        self,
        vocabulary_size: int,
        embedding_dim: int,
        max_sequence_length: int = 512,
        num_segments: int = 2,
        dropout: float = 0.1,
        layer_norm_epsilon: float = 1e-12,
        initializer_range: float = 0.02,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.vocabulary_size = vocabulary_size
        self.embedding_dim = embedding_dim
        self.max_sequence_length = max_sequence_length
        self.num_segments = num_segments
        self.dropout = dropout
        self.layer_norm_epsilon = layer_norm_epsilon
        self.initializer_range = initializer_range

        # === Layers ===
        self.token_embedding = keras_hub.layers.ReversibleEmbedding(
            vocabulary_size,
            embedding_dim,
            embeddings_initializer=truncated_normal(initializer_range),
            dtype=self.dtype_policy,
            name="token_embedding",
        )
        self.position_embedding = keras_hub.layers.PositionEmbedding(
            max_sequence_length,
            initializer=truncated_normal(initializer_range),
            dtype=self.dtype_policy,
            name="position_embedding",
        )
        self.segment_embedding = keras.layers.Embedding(
            num_segments,
            embedding_dim,
            embeddings_initializer=truncated_normal(initializer_range),
            dtype=self.dtype_policy,
            name="segment_embedding",
        )
        self.layer_norm = keras.layers.LayerNormalization(
            epsilon=layer_norm_epsilon, dtype=self.dtype_policy, name="layer_norm"
        )
        self.dropout_layer = keras.layers.Dropout(dropout, dtype=self.dtype_policy, name="dropout")

    def build(self, token_ids_shape, segment_ids_shape=None):
        self.token_embedding.build(token_ids_shape)
        self.segment_embedding.build(token_ids_shape)
        shape = tuple(token_ids_shape) + (self.embedding_dim,)
        self.position_embedding.build(shape)
        self.layer_norm.build(shape)
        self.built = True

    def call(self, token_ids, segment_ids, training=None):
        x = self.token_embedding(token_ids)
        x = x + self.position_embedding(x)
        x = x + self.segment_embedding(segment_ids)
        x = self.layer_norm(x)
        return self.dropout_layer(x, training=training)

    def compute_output_shape(self, token_ids_shape, segment_ids_shape=None):
        return tuple(token_ids_shape) + (self.embedding_dim,)

    # === Config ===
    def get_config(self):
        config = super().get_config()
        config.update(
            vocabulary_size=self.vocabulary_size,
            embedding_dim=self.embedding_dim,
            max_sequence_length=self.max_sequence_length,
            num_segments=self.num_segments,
            dropout=self.dropout,
            layer_norm_epsilon=self.layer_norm_epsilon,
            initializer_range=self.initializer_range,
        )
        return config
