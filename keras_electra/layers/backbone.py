"""An ELECTRA tower as a standalone Keras model: embeddings + encoder."""

from __future__ import annotations

import keras

from keras_electra.config import ElectraConfig
from keras_electra.layers.embedding import ElectraEmbedding
from keras_electra.layers.encoder import ElectraEncoder


@keras.saving.register_keras_serializable(package="keras_electra")
class ElectraBackbone(keras.Model):
    """Embeddings followed by one transformer tower; returns the sequence output.

    In pretraining the generator and the discriminator are two backbones whose embedding
    layers share weights as ``ElectraConfig.embedding_sharing`` says (by default both
    call one :class:`ElectraEmbedding`). For fine-tuning and export the discriminator is
    used on its own: a standalone backbone always has one plain :class:`ElectraEmbedding`
    holding the discriminator's effective tables, whatever ``embedding_sharing`` says
    (see ``ElectraPretrainer.discriminator_backbone``).

    Inputs are a dict of int32 ``[batch, length]`` tensors: ``token_ids``,
    ``segment_ids`` and ``padding_mask`` (1 for real tokens, 0 for padding).

    Args:
        config: the :class:`ElectraConfig`.
        tower: ``"discriminator"`` or ``"generator"``.
        embedding: the embedding layer to call: an existing one to share, or a
            new one it builds (an :class:`ElectraEmbedding` or
            :class:`~keras_electra.layers.embedding.GdesEmbedding`); a new
            :class:`ElectraEmbedding` from ``config`` when omitted.
        direction: the attention pattern of the tower's encoder: ``None`` (full), or
            ``"left_to_right"`` / ``"right_to_left"`` (causal; the towers of Electric's
            cloze generator, :mod:`keras_electra.pretraining.objectives.electric`).

    Examples:
        >>> import numpy as np
        >>> from keras_electra.config import ElectraConfig
        >>> config = ElectraConfig.from_preset("tiny", vocab_size=100, num_layers=1)
        >>> backbone = ElectraBackbone(config)
        >>> ids = np.ones((2, 16), "int32")
        >>> inputs = {"token_ids": ids, "segment_ids": 0 * ids, "padding_mask": ids}
        >>> tuple(backbone(inputs).shape)
        (2, 16, 128)
    """

    def __init__(
        self,
        config: ElectraConfig | dict,
        tower: str = "discriminator",
        embedding: keras.layers.Layer | None = None,
        direction: str | None = None,
        **kwargs,
    ):
        # A fixed name keeps variable paths (the checkpoint keys) the same in every process.
        kwargs.setdefault("name", tower)
        super().__init__(**kwargs)
        if isinstance(config, dict):
            config = ElectraConfig.from_dict(config)
        if tower not in ("discriminator", "generator"):
            raise ValueError(f"tower must be 'discriminator' or 'generator', got {tower!r}.")
        self.config = config
        self.tower = tower
        self.direction = direction
        sizes = getattr(config, f"{tower}_config")()  # discriminator_config or generator_config
        self.hidden_dim = sizes.hidden_size

        # === Layers ===
        self.embedding = embedding or ElectraEmbedding.for_model(
            config, dtype=self.dtype_policy, name="embedding"
        )
        self.encoder = ElectraEncoder(
            embedding_dim=config.embedding_size,
            hidden_dim=sizes.hidden_size,
            num_layers=sizes.num_layers,
            num_heads=sizes.num_heads,
            intermediate_dim=sizes.intermediate_size,
            dropout=config.dropout,
            layer_norm_epsilon=config.layer_norm_epsilon,
            initializer_range=config.initializer_range,
            normalize_first=config.normalize_first,
            direction=direction,
            dtype=self.dtype_policy,
            name=f"{tower}_encoder",
        )

        self.build()

    def build(self, input_shape=None):
        if self.built:
            return
        if not self.embedding.built:  # else shared with the other tower and built
            self.embedding.build((None, None))
        self.encoder.build((None, None, self.config.embedding_size))
        self.built = True

    def call(self, inputs, training=None):
        x = self.embedding(inputs["token_ids"], inputs["segment_ids"], training=training)
        return self.encoder(x, inputs["padding_mask"], training=training)

    # === Config ===
    def get_config(self):
        config = {"config": self.config.to_dict(), "tower": self.tower, "name": self.name}
        if self.direction is not None:
            config["direction"] = self.direction
        return config
