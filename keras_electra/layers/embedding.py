"""The embedding blocks of the generator and the discriminator.

:class:`ElectraEmbedding` is one plain block (word, position and segment tables,
LayerNorm, dropout). Depending on ``ElectraConfig.embedding_sharing`` the two
towers call one instance (``all``), two instances sharing the word table
(``word``), two independent instances (``none``), or the generator's instance and
a :class:`GdesEmbedding` reading it through a stop-gradient (``gdes``).

Every block reports its *effective* weights with ``tables()``: the values a plain
:class:`ElectraEmbedding` would need to compute the same output, keyed by the
names in :data:`TABLES`. That is what fine-tuning, export and conversion copy.
"""

from __future__ import annotations

import keras
import numpy as np
import tensorflow as tf
from keras import ops

from keras_electra.layers.dropout import Dropout
from keras_electra.layers.serialized import Serialized
from keras_electra.limits import check_length, too_long

# The weights of an embedding block, by their path inside an ElectraEmbedding.
TABLES = (
    "token_embedding/embeddings",
    "position_embedding/embeddings",
    "segment_embedding/embeddings",
    "layer_norm/gamma",
    "layer_norm/beta",
)


def truncated_normal(stddev: float) -> keras.initializers.Initializer:
    """A new truncated-normal initializer, one per weight: Keras 3 fixes an unseeded
    initializer's seed at creation, so a shared instance gives layers identical values."""
    return keras.initializers.TruncatedNormal(stddev=stddev)


@keras.saving.register_keras_serializable(package="keras_electra")
class PositionEmbedding(Serialized, keras.layers.Layer):
    """A learned table of ``sequence_length`` position vectors; called on a
    ``[..., length, width]`` tensor it returns the first ``length`` rows broadcast to
    that tensor's shape (the caller adds them).

    The weight is ``position_embeddings`` (variable name ``embeddings``), the layout
    of keras-hub's ``PositionEmbedding``, so checkpoints written with it restore here.

    Examples:
        >>> import numpy as np
        >>> layer = PositionEmbedding(8, initializer="ones")
        >>> tuple(layer(np.zeros((2, 5, 3), "float32")).shape)
        (2, 5, 3)
    """

    CONFIG = ("sequence_length", "initializer")

    def __init__(self, sequence_length: int, initializer="glorot_uniform", **kwargs):
        super().__init__(**kwargs)
        self.sequence_length = int(sequence_length)
        self.initializer = keras.initializers.get(initializer)

    def build(self, inputs_shape):
        self.position_embeddings = self.add_weight(
            name="embeddings",
            shape=(self.sequence_length, inputs_shape[-1]),
            initializer=self.initializer,
        )
        self.built = True

    def call(self, inputs):
        check_length(inputs.shape[-2], self.sequence_length)
        shape = ops.shape(inputs)
        checks = []
        if inputs.shape[-2] is None:  # a function traced for any length: checked when it runs
            message = too_long(self.sequence_length)
            checks = [tf.debugging.assert_less_equal(shape[-2], self.sequence_length, message)]
        with tf.control_dependencies(checks):  # before the slice that would fail unexplained
            rows = ops.slice(self.position_embeddings, (0, 0), (shape[-2], shape[-1]))
        return ops.broadcast_to(rows, shape)

    def compute_output_shape(self, inputs_shape):
        return inputs_shape


@keras.saving.register_keras_serializable(package="keras_electra")
class ElectraEmbedding(Serialized, keras.layers.Layer):
    """Word + position + token-type embeddings, then LayerNorm and dropout.

    ELECTRA ties these weights between the towers: both call one instance, so they
    update the same variables, and the word table is also the generator's output
    projection (see :class:`GeneratorHead`). With ``embedding_sharing="word"`` the
    discriminator's own instance is built around the generator's ``token_embedding``.

    Args:
        vocabulary_size: number of word pieces.
        embedding_dim: width of the embeddings.
        max_sequence_length: size of the position table.
        num_segments: number of token types (segment ids).
        dropout: dropout rate after the LayerNorm.
        layer_norm_epsilon: LayerNorm epsilon.
        initializer_range: stddev of the truncated-normal initializer.
        token_embedding: an existing (built) word-embedding layer to use instead
            of a new one; not serialized.

    Examples:
        >>> import numpy as np
        >>> layer = ElectraEmbedding(100, 16, max_sequence_length=8)
        >>> ids = np.zeros((2, 8), "int32")
        >>> tuple(layer(ids, ids).shape)
        (2, 8, 16)
    """

    CONFIG = (
        "vocabulary_size",
        "embedding_dim",
        "max_sequence_length",
        "num_segments",
        "dropout",
        "layer_norm_epsilon",
        "initializer_range",
    )

    def __init__(
        self,
        vocabulary_size: int,
        embedding_dim: int,
        max_sequence_length: int = 512,
        num_segments: int = 2,
        dropout: float = 0.1,
        layer_norm_epsilon: float = 1e-12,
        initializer_range: float = 0.02,
        token_embedding: keras.layers.Embedding | None = None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.keep(locals())

        # === Layers ===
        self.token_embedding = token_embedding or keras.layers.Embedding(
            vocabulary_size,
            embedding_dim,
            embeddings_initializer=truncated_normal(initializer_range),
            dtype=self.dtype_policy,
            name="token_embedding",
        )
        self.position_embedding = PositionEmbedding(
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
        self.dropout_layer = Dropout(dropout, dtype=self.dtype_policy, name="dropout")

    @classmethod
    def for_model(cls, config, token_embedding=None, **kwargs) -> ElectraEmbedding:
        """The block an ``ElectraConfig`` describes (sizes, dropout, epsilon, initializer);
        ``token_embedding`` and ``kwargs`` (``dtype``, ``name``) go to the constructor."""
        return cls(
            vocabulary_size=config.vocab_size,
            embedding_dim=config.embedding_size,
            max_sequence_length=config.max_position_embeddings,
            num_segments=config.type_vocab_size,
            dropout=config.dropout,
            layer_norm_epsilon=config.layer_norm_epsilon,
            initializer_range=config.initializer_range,
            token_embedding=token_embedding,
            **kwargs,
        )

    def build(self, token_ids_shape, segment_ids_shape=None):
        if not self.token_embedding.built:  # a shared word table is built already
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

    # === Weights by name ===
    def table_variables(self) -> dict:
        """The block's variables keyed by the names in :data:`TABLES`."""
        variables = (
            self.token_embedding.embeddings,
            self.position_embedding.position_embeddings,
            self.segment_embedding.embeddings,
            self.layer_norm.gamma,
            self.layer_norm.beta,
        )
        return dict(zip(TABLES, variables, strict=True))

    def tables(self) -> dict[str, np.ndarray]:
        """The block's weights as arrays, keyed by the names in :data:`TABLES`."""
        return {name: np.asarray(v.numpy()) for name, v in self.table_variables().items()}

    def assign_tables(self, tables: dict[str, np.ndarray]) -> None:
        """Set every weight of the block from arrays keyed as :meth:`tables` returns them."""
        for name, variable in self.table_variables().items():
            variable.assign(tables[name])


class GdesEmbedding(keras.layers.Layer):
    """The discriminator's embeddings under gradient-disentangled sharing (GDES).

    DeBERTaV3 (He et al., 2021): the discriminator reads the generator's word, position
    and segment tables through a stop-gradient plus its own delta tables, ``E_D =
    stop_gradient(E_G) + delta``, so its loss trains only the deltas (and its own
    LayerNorm) while the shared tables follow the generator's loss alone. The deltas
    start at zero: at initialization the discriminator reads exactly the shared tables.
    The sums are taken in float32 before the cast to the compute dtype, so the output
    equals a plain :class:`ElectraEmbedding`'s holding the folded tables ``shared +
    delta`` (:meth:`tables`), bit for bit.

    Args:
        shared: the generator's (built) :class:`ElectraEmbedding`; not serialized.
        dropout: dropout rate after the LayerNorm.
        layer_norm_epsilon: LayerNorm epsilon.
    """

    def __init__(
        self, shared: ElectraEmbedding, dropout: float = 0.1, layer_norm_epsilon=1e-12, **kwargs
    ):
        super().__init__(**kwargs)
        # Variables are read in float32 (the deltas are added before any cast).
        self.autocast = False
        self.shared = shared
        for size in ("vocabulary_size", "embedding_dim", "max_sequence_length", "num_segments"):
            setattr(self, size, getattr(shared, size))
        self.dropout = dropout
        self.layer_norm_epsilon = layer_norm_epsilon
        self.layer_norm = keras.layers.LayerNormalization(
            epsilon=layer_norm_epsilon, dtype=self.dtype_policy, name="layer_norm"
        )
        self.dropout_layer = Dropout(dropout, dtype=self.dtype_policy, name="dropout")

    def build(self, token_ids_shape, segment_ids_shape=None):
        dim = self.embedding_dim
        for name, rows in (
            ("word_delta", self.vocabulary_size),
            ("position_delta", self.max_sequence_length),
            ("segment_delta", self.num_segments),
        ):
            setattr(self, name, self.add_weight(shape=(rows, dim), initializer="zeros", name=name))
        self.layer_norm.build(tuple(token_ids_shape) + (dim,))
        self.built = True

    def call(self, token_ids, segment_ids, training=None):
        shared = self.shared.table_variables()
        dtype = self.compute_dtype
        word = ops.take(ops.stop_gradient(shared[TABLES[0]]), token_ids, axis=0)
        word = word + ops.take(self.word_delta, token_ids, axis=0)
        check_length(token_ids.shape[-1], self.max_sequence_length)
        length = ops.shape(token_ids)[-1]
        size = (length, self.embedding_dim)
        position = ops.slice(ops.stop_gradient(shared[TABLES[1]]), (0, 0), size)
        position = position + ops.slice(self.position_delta, (0, 0), size)
        segment = ops.stop_gradient(shared[TABLES[2]]) + self.segment_delta
        x = ops.cast(word, dtype)
        x = x + ops.broadcast_to(ops.cast(position, dtype), ops.shape(x))
        x = x + ops.cast(ops.take(segment, segment_ids, axis=0), dtype)
        x = self.layer_norm(x)
        return self.dropout_layer(x, training=training)

    def compute_output_shape(self, token_ids_shape, segment_ids_shape=None):
        return tuple(token_ids_shape) + (self.embedding_dim,)

    def tables(self) -> dict[str, np.ndarray]:
        """The effective tables, ``shared + delta``, and this block's own LayerNorm."""
        shared = self.shared.tables()
        deltas = (self.word_delta, self.position_delta, self.segment_delta)
        out = {
            name: shared[name] + np.asarray(d.numpy())
            for name, d in zip(TABLES[:3], deltas, strict=True)
        }
        out["layer_norm/gamma"] = np.asarray(self.layer_norm.gamma.numpy())
        out["layer_norm/beta"] = np.asarray(self.layer_norm.beta.numpy())
        return out
