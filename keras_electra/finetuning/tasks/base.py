"""What every task implements (:class:`Task`), and the helpers more than one task uses."""

from __future__ import annotations

from typing import Any

import keras
import numpy as np
import tensorflow as tf

from keras_electra.data.tokenizer import ElectraTokenizer
from keras_electra.errors import InputDataError
from keras_electra.finetuning.settings import FinetuneSettings

Arrays = dict[str, np.ndarray]


class Task:
    """Base class; subclasses implement one task."""

    name = ""

    def read(self, path, settings: FinetuneSettings, *, labelled: bool = True) -> list:
        raise NotImplementedError

    # What :meth:`example` takes besides :meth:`read`'s examples, for its error.
    FROM_PYTHON = ""

    def example(self, value, number: int, settings: FinetuneSettings):
        """``value`` as one of :meth:`read`'s unlabelled examples (it may be one already),
        or one sentence naming what the task takes."""
        raise InputDataError(
            f"Example {number} is a {type(value).__name__}; a {self.name} model takes "
            f"{self.FROM_PYTHON}, or the examples {self.name}'s read(path, settings, "
            "labelled=False) returns."
        )

    def set_labels(self, examples: list, settings: FinetuneSettings) -> None:
        """Fix the label list from the training examples (no-op for regression)."""

    def encode(
        self,
        examples: list,
        tokenizer: ElectraTokenizer,
        settings: FinetuneSettings,
        *,
        labelled: bool = True,
    ) -> tuple[Arrays, Any, Any]:
        """Return ``(inputs, targets, extra)``: model inputs, fit targets, decoding info."""
        raise NotImplementedError

    def encoding_note(self, examples: list, y: Any, extra: Any) -> str:
        """One sentence on the training targets :meth:`encode` could not keep (QA: answers
        that lie whole in no window), or ``""``; ``y`` and ``extra`` are its results."""
        return ""

    def build_model(self, backbone, settings: FinetuneSettings) -> keras.Model:
        raise NotImplementedError

    def loss(self, settings: FinetuneSettings):
        raise NotImplementedError

    def evaluate(self, model, examples, tokenizer, settings, batch_size: int = 64) -> dict:
        """The task's metrics on labelled ``examples`` (:meth:`scores`), and their number."""
        scores = self.scores(model, examples, tokenizer, settings, batch_size)
        return {**scores, "num_examples": len(examples)}

    def scores(self, model, examples, tokenizer, settings, batch_size: int) -> dict:
        raise NotImplementedError

    def predict(self, model, examples, tokenizer, settings, batch_size: int = 64) -> list[dict]:
        raise NotImplementedError

    def export_inputs(self, examples: list, settings: FinetuneSettings) -> dict[str, list[str]]:
        """The examples as the task's export takes them: its ``serving_default`` inputs by
        name (``keras-electra predict`` on an export)."""
        raise NotImplementedError

    def export_row(self, example, answer: dict) -> dict:
        """A prediction's JSON line from the export's answer (its JSON fields:
        :meth:`keras_electra.serving.export_reader.ExportReader.record`), with the fields
        :meth:`predict` writes."""
        raise NotImplementedError


def pack(rows: list[list[int]], length: int, pad_id: int, segments: list | None = None) -> Arrays:
    """Int32 model inputs ``[len(rows), length]`` from each row's token ids (and
    ``segments``' segment ids; default 0), padded with ``pad_id``."""
    x = {k: np.zeros((len(rows), length), np.int32) for k in ("segment_ids", "padding_mask")}
    x = {"token_ids": np.full((len(rows), length), pad_id, np.int32), **x}
    for r, ids in enumerate(rows):
        x["token_ids"][r, : len(ids)] = ids
        x["padding_mask"][r, : len(ids)] = 1
        if segments is not None:
            x["segment_ids"][r, : len(ids)] = segments[r]
    return x


def piece_ids(tokenizer: ElectraTokenizer, words: tf.Tensor) -> tf.RaggedTensor:
    """Word-piece ids of each word (in the graph); a word that yields none becomes ``[UNK]``.

    Args:
        tokenizer: the model's tokenizer.
        words: string tensor ``[W]``, one word each.

    Returns:
        An int32 ``tf.RaggedTensor`` ``[W, None]`` with at least one piece per row.

    Examples:
        >>> vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "un", "##able"]
        >>> t = ElectraTokenizer(vocab)
        >>> piece_ids(t, tf.constant(["unable", "\\u0301"])).to_list()
        [[5, 6], [1]]
    """
    pieces = tokenizer.tokenize(words)
    empty = tf.cast(tf.equal(pieces.row_lengths(), 0), tf.int64)
    unknown = tf.RaggedTensor.from_row_lengths(
        tf.fill([tf.reduce_sum(empty)], tf.constant(tokenizer.unk_id, tf.int32)), empty
    )
    return tf.concat([pieces, unknown], axis=1)


def word_pieces(tokenizer: ElectraTokenizer, words: list[str]) -> list[list[int]]:
    """:func:`piece_ids` of a list of words, as lists."""
    return piece_ids(tokenizer, tf.constant(words)).to_list() if words else []
