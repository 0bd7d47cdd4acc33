"""Task models: an ELECTRA backbone with a small task head, trainable with ``model.fit``.

Every model takes the backbone's input dict (int32 ``[batch, length]`` ``token_ids``,
``segment_ids``, ``padding_mask``) and returns float32 outputs (each class says which).

Examples:
    >>> import numpy as np
    >>> from keras_electra.config import ElectraConfig
    >>> from keras_electra.layers import ElectraBackbone
    >>> config = ElectraConfig.from_preset("tiny", vocab_size=100, num_layers=1)
    >>> model = ElectraClassifier(ElectraBackbone(config), num_classes=3)
    >>> ids = np.ones((2, 8), "int32")
    >>> tuple(model({"token_ids": ids, "segment_ids": 0 * ids, "padding_mask": ids}).shape)
    (2, 3)
"""

from __future__ import annotations

import keras
from keras import ops

from keras_electra.layers.backbone import ElectraBackbone
from keras_electra.layers.dense import Dense
from keras_electra.layers.embedding import truncated_normal
from keras_electra.settings import POOLINGS
from keras_electra.training.step import OneGraphTraining


def check_pooling(pooling: str) -> str:
    """``pooling`` if it is one of :data:`POOLINGS`, else a one-sentence ``ValueError``."""
    if pooling not in POOLINGS:
        raise ValueError(f"pooling must be one of {', '.join(POOLINGS)}; got {pooling!r}.")
    return pooling


def pool_sequence(sequence, padding_mask, pooling: str):
    """``[batch, hidden]`` from ``[batch, length, hidden]``: the ``[CLS]`` vector or the
    mean over the positions where ``padding_mask`` is 1.

    Examples:
        >>> import numpy as np
        >>> x = np.arange(6, dtype="float32").reshape(1, 3, 2)
        >>> np.asarray(pool_sequence(x, np.array([[1, 1, 0]]), "mean")).tolist()
        [[1.0, 2.0]]
    """
    if pooling == "cls":
        return sequence[:, 0, :]
    mask = ops.expand_dims(ops.cast(padding_mask, sequence.dtype), -1)
    total = ops.sum(sequence * mask, axis=1)
    return total / ops.maximum(ops.sum(mask, axis=1), ops.cast(1.0, sequence.dtype))


class _HeadModel(OneGraphTraining, keras.Model):
    """A backbone plus dropout and one dense layer (the task head), trained through
    :class:`~keras_electra.training.step.OneGraphTraining`."""

    def __init__(self, backbone: ElectraBackbone, units: int, dropout: float = 0.1, **kwargs):
        super().__init__(**kwargs)
        self.backbone = backbone
        self.units = units
        self.dropout = dropout
        self.head_dropout = keras.layers.Dropout(dropout, name="head_dropout")
        self.head = self._dense(units, "head")
        # Every layer is built when created (the backbone, the heads): load_weights into a
        # model just made needs no call on data first.
        self.built = True

    def _dense(self, units: int, name: str) -> Dense:
        """A dense layer on the backbone's vectors, built, initialized as the backbone."""
        initializer = truncated_normal(self.backbone.config.initializer_range)
        layer = Dense(units, kernel_initializer=initializer, name=name)
        layer.build((None, self.backbone.hidden_dim))
        return layer

    def _project(self, x, training):
        return ops.cast(self.head(self.head_dropout(x, training=training)), "float32")

    def get_config(self):
        return {
            "backbone": keras.saving.serialize_keras_object(self.backbone),
            "dropout": self.dropout,
            "name": self.name,
        }

    @classmethod
    def from_config(cls, config):
        backbone = keras.saving.deserialize_keras_object(config["backbone"])
        return cls(**{**config, "backbone": backbone})


class _PooledHeadModel(_HeadModel):
    """The head on the ``[CLS]`` vector (``pooling="cls"``, the paper's GLUE head) or on
    the mean of the unpadded token vectors (``"mean"``: steadier on small models and data)."""

    def __init__(self, backbone, units: int, dropout: float, pooling: str, **kwargs):
        super().__init__(backbone, units, dropout, **kwargs)
        self.pooling = check_pooling(pooling)

    def call(self, inputs, training=None):
        sequence = self.backbone(inputs, training=training)
        pooled = pool_sequence(sequence, inputs["padding_mask"], self.pooling)
        return self._project(pooled, training)

    def get_config(self):
        return {**super().get_config(), "pooling": self.pooling}


@keras.saving.register_keras_serializable(package="keras_electra")
class ElectraClassifier(_PooledHeadModel):
    """Sequence (or pair) classification: logits ``[batch, num_classes]``."""

    def __init__(
        self,
        backbone: ElectraBackbone,
        num_classes: int,
        dropout: float = 0.1,
        pooling: str = "cls",
        **kwargs,
    ):
        kwargs.setdefault("name", "electra_classifier")
        super().__init__(backbone, num_classes, dropout, pooling, **kwargs)
        self.num_classes = num_classes

    def get_config(self):
        return {**super().get_config(), "num_classes": self.num_classes}


@keras.saving.register_keras_serializable(package="keras_electra")
class ElectraRegressor(_PooledHeadModel):
    """Sequence (or pair) regression, e.g. STS-B (train with MSE): ``[batch, 1]``."""

    def __init__(
        self, backbone: ElectraBackbone, dropout: float = 0.1, pooling: str = "cls", **kwargs
    ):
        kwargs.setdefault("name", "electra_regressor")
        super().__init__(backbone, 1, dropout, pooling, **kwargs)


@keras.saving.register_keras_serializable(package="keras_electra")
class ElectraTagger(_HeadModel):
    """Token tagging: logits ``[batch, length, num_tags]``; train with
    :class:`MaskedSparseCrossentropy` (label ``-1`` off each word's first piece)."""

    def __init__(self, backbone: ElectraBackbone, num_tags: int, dropout: float = 0.1, **kwargs):
        kwargs.setdefault("name", "electra_tagger")
        super().__init__(backbone, num_tags, dropout, **kwargs)
        self.num_tags = num_tags

    def call(self, inputs, training=None):
        return self._project(self.backbone(inputs, training=training), training)

    def get_config(self):
        return {**super().get_config(), "num_tags": self.num_tags}


@keras.saving.register_keras_serializable(package="keras_electra")
class ElectraSpanExtractor(_HeadModel):
    """Extractive QA: a dict of ``start_logits``, ``end_logits`` (``[batch, length]``)
    and, with ``answerable=True`` (SQuAD 2.0), ``answerable`` (``[batch]``, a logit on the
    ``[CLS]`` vector; > 0: the window holds the answer).

    An answer starts and ends in the window (the second segment) or at ``[CLS]`` (none
    there): the logits are -10000 at the question, its ``[SEP]`` and padding, as
    google-research/electra masks them, so the softmax spends nothing on them."""

    def __init__(
        self, backbone: ElectraBackbone, answerable: bool = False, dropout: float = 0.1, **kwargs
    ):
        kwargs.setdefault("name", "electra_span_extractor")
        super().__init__(backbone, 2, dropout, **kwargs)
        self.answerable = answerable
        self.answerable_head = self._dense(1, "answerable_head") if answerable else None

    def call(self, inputs, training=None):
        sequence = self.backbone(inputs, training=training)
        logits = self._project(sequence, training)
        allowed = ops.cast(inputs["padding_mask"], "float32") * ops.cast(
            inputs["segment_ids"], "float32"
        )
        first = ops.cast(ops.arange(ops.shape(allowed)[1]) == 0, "float32")  # [CLS]
        outside = (1.0 - ops.maximum(allowed, first)) * -10000.0
        outputs = {"start_logits": logits[..., 0] + outside, "end_logits": logits[..., 1] + outside}
        if self.answerable_head is not None:
            cls = self.head_dropout(sequence[:, 0, :], training=training)
            outputs["answerable"] = ops.cast(self.answerable_head(cls), "float32")[:, 0]
        return outputs

    def get_config(self):
        return {**super().get_config(), "answerable": self.answerable}


@keras.saving.register_keras_serializable(package="keras_electra")
class MaskedSparseCrossentropy(keras.losses.Loss):
    """Softmax cross-entropy averaged over positions whose label is ``>= 0``.

    Examples:
        >>> import numpy as np
        >>> loss = MaskedSparseCrossentropy()
        >>> float(loss(np.array([[0, -1]]), np.zeros((1, 2, 2), "float32")))  # ln 2
        0.6931471824645996
    """

    def __init__(self, name: str = "masked_sparse_crossentropy", **kwargs):
        super().__init__(name=name, **kwargs)

    def call(self, y_true, y_pred):
        y_true = ops.cast(y_true, "int32")
        weights = ops.cast(y_true >= 0, "float32")
        per_token = keras.losses.sparse_categorical_crossentropy(
            ops.maximum(y_true, 0), y_pred, from_logits=True
        )
        return ops.sum(per_token * weights) / ops.maximum(ops.sum(weights), 1.0)
