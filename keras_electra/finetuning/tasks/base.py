"""What every task implements (:class:`Task`), and the helpers more than one task uses."""

from __future__ import annotations

from typing import Any

import keras
import numpy as np
import tensorflow as tf

from keras_electra.data.tokenizer import ElectraTokenizer
from keras_electra.finetuning.settings import FinetuneSettings

Arrays = dict[str, np.ndarray]


class Task:
    """Base class; subclasses implement one task."""

    name = ""

    def read(self, path, settings: FinetuneSettings, *, labelled: bool = True) -> list:
        raise NotImplementedError

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

    def build_model(self, backbone, settings: FinetuneSettings) -> keras.Model:
        raise NotImplementedError

    def loss(self, settings: FinetuneSettings):
        raise NotImplementedError

    def evaluate(self, model, examples, tokenizer, settings, batch_size: int = 64) -> dict:
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


def word_pieces(tokenizer: ElectraTokenizer, words: list[str]) -> list[list[int]]:
    """Word-piece ids of each word (tokenized on its own); a word that yields none becomes
    ``[UNK]``."""
    if not words:
        return []
    pieces = tokenizer.tokenize(tf.constant(words)).to_list()
    return [p or [tokenizer.unk_id] for p in pieces]
