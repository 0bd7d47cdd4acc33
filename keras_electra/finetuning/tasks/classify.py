"""Sequence (or pair) classification and regression: one text or a pair per example.

Both read a table (TSV, CSV or JSON lines: :func:`~keras_electra.finetuning.readers.read_table`)
and encode it with :func:`encode_pairs`, as the exported models do in the graph.
"""

from __future__ import annotations

import re

import keras
import numpy as np
import tensorflow as tf

from keras_electra.data.tokenizer import ElectraTokenizer
from keras_electra.encoding import encode_texts
from keras_electra.errors import InputDataError
from keras_electra.finetuning import metrics
from keras_electra.finetuning.models import ElectraClassifier, ElectraRegressor
from keras_electra.finetuning.readers import read_table
from keras_electra.finetuning.tasks.base import Arrays, Task, pack

_FLOAT32_MAX = float(np.finfo(np.float32).max)

ENCODE_CHUNK = 4096


def natural_sort(labels) -> list[str]:
    """Sort labels numerically when they are all numbers, else as text.

    Examples:
        >>> natural_sort(["10", "2", "1"])
        ['1', '2', '10']
    """
    labels = sorted(set(labels))
    if all(re.fullmatch(r"-?\d+(\.\d+)?", x) for x in labels):
        return sorted(labels, key=float)
    return labels


def encode_pairs(
    tokenizer: ElectraTokenizer, texts: list[str], pairs: list[str] | None, max_length: int
) -> Arrays:
    """Encode texts (or pairs) to numpy model inputs, in chunks, exactly as exports do."""
    parts: list[dict] = []
    for start in range(0, len(texts), ENCODE_CHUNK):
        a = tf.constant(texts[start : start + ENCODE_CHUNK])
        b = None if pairs is None else tf.constant(pairs[start : start + ENCODE_CHUNK])
        parts.append(
            {k: v.numpy() for k, v in encode_texts(tokenizer, a, b, max_length=max_length).items()}
        )
    if not parts:
        return pack([], max_length, 0)
    return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}


class _SequenceTask(Task):
    """Shared by classification and regression: one text or a pair per example."""

    FROM_PYTHON = 'texts, pairs of texts (a pair model), or dicts such as {"text": "..."}'

    def example(self, value, number, settings):
        paired = settings.text_pair_column is not None
        if isinstance(value, dict):  # the model's own column names are its keys too
            named = {settings.text_column: "text", settings.text_pair_column: "text_b"}
            value = {named.get(k, k) if named.get(k, k) not in value else k: v
                     for k, v in value.items()}  # fmt: skip
            wanted = ["text", "text_b"] if paired else ["text"]
            if all(key in value for key in wanted):
                return value
            columns = [c for c in (settings.text_column, settings.text_pair_column) if c]
            raise InputDataError(
                f"Example {number} is a dict without {' and '.join(map(repr, wanted))} (or the "
                f"model's column names {', '.join(map(repr, columns))}); its keys: "
                f"{', '.join(map(repr, list(value)[:5]))}."
            )
        if isinstance(value, str) and not paired:
            return {"text": value}
        if isinstance(value, tuple | list) and len(value) == 2 and paired:
            return {"text": value[0], "text_b": value[1]}
        return super().example(value, number, settings)

    def read(self, path, settings, *, labelled=True):
        label = settings.label_column if labelled else None
        columns = (settings.text_column, settings.text_pair_column, label)
        return read_table(path, *columns, require_labels=labelled)

    def encode(self, examples, tokenizer, settings, *, labelled=True):
        y = self.targets(examples, settings) if labelled else None  # each task's own
        return self.inputs(examples, tokenizer, settings), y, None

    def inputs(self, examples, tokenizer, settings) -> Arrays:
        texts = [e["text"] for e in examples]
        pairs = [e["text_b"] for e in examples] if settings.text_pair_column is not None else None
        return encode_pairs(tokenizer, texts, pairs, settings.max_seq_length)

    def outputs(self, model, examples, tokenizer, settings, batch_size) -> np.ndarray:
        x = self.inputs(examples, tokenizer, settings)
        return np.asarray(model.predict(x, batch_size=batch_size, verbose=0))

    def export_inputs(self, examples, settings):
        inputs = {"text": [e["text"] for e in examples]}
        if settings.text_pair_column is not None:
            inputs["text_b"] = [e["text_b"] for e in examples]
        return inputs

    def export_row(self, example, answer):
        return self.row(example, **answer)

    @staticmethod
    def row(example: dict, **values) -> dict:
        """A prediction's JSON line: the example's text (and pair) and ``values``."""
        pair = example.get("text_b")
        return {"text": example["text"], **({} if pair is None else {"text_b": pair}), **values}


class ClassifyTask(_SequenceTask):
    """Sequence or pair classification; metrics: accuracy, F1, Matthews correlation."""

    name = "classify"

    def set_labels(self, examples, settings):
        settings.labels = natural_sort(e["label"] for e in examples)
        if bad := next((label for label in settings.labels if not label.isprintable()), None):
            raise InputDataError(
                f"{examples[0]['file']}: the label {bad!r} holds a line break or another "
                "control character, which labels.txt (a label a line) and score's output "
                "cannot keep; fix the label."
            )
        if len(settings.labels) < 2:
            first = examples[0]
            raise InputDataError(
                f"{first['file']}: every training row has the label '{settings.labels[0]}'; "
                "classification needs at least two labels."
            )

    def encoding_note(self, examples, y, extra) -> str:
        """Labels that read as a score: numbers, most of them told apart (an STS column
        trained as one class per value)."""
        labels = {e["label"] for e in examples}
        if len(labels) < 10 or len(labels) < len(examples) / 2:
            return ""
        try:
            for label in labels:
                float(label)
        except ValueError:
            return ""
        return (
            f"the {len(labels):,} labels of {len(examples):,} training examples are all "
            "numbers, most of them different, so each value trains as a class of its own; "
            "for a score to predict, fine-tune with --task regress."
        )

    def targets(self, examples, settings) -> np.ndarray:
        index = {label: i for i, label in enumerate(settings.labels)}
        ids = []
        for e in examples:
            if e["label"] not in index:
                shown = ", ".join(settings.labels[:10])
                raise InputDataError(
                    f"{e['file']}:{e['line']}: label '{e['label']}' does not occur in the training "
                    f"data (labels: {shown}); fix the label or add training examples with it."
                )
            ids.append(index[e["label"]])
        return np.asarray(ids, np.int32)

    def build_model(self, backbone, settings):
        return ElectraClassifier(
            backbone, len(settings.labels), dropout=settings.dropout, pooling=settings.pooling
        )

    def loss(self, settings):
        return keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    def scores(self, model, examples, tokenizer, settings, batch_size):
        y = self.targets(examples, settings)
        predicted = self.outputs(model, examples, tokenizer, settings, batch_size).argmax(-1)
        scores = {
            "accuracy": round(metrics.accuracy(y, predicted), 4),
            "mcc": round(metrics.matthews_corrcoef(y, predicted), 4),
        }
        if len(settings.labels) == 2:
            scores["f1"] = round(metrics.f1_score(y, predicted, positive=1), 4)
        else:
            scores["macro_f1"] = metrics.macro_f1(y, predicted)
        return scores

    def predict(self, model, examples, tokenizer, settings, batch_size=64):
        logits = self.outputs(model, examples, tokenizer, settings, batch_size)
        rows, labels = [], settings.labels
        for e, p in zip(examples, tf.nn.softmax(logits).numpy(), strict=True):
            # Most likely first (ties in label order), as the export's answers and `score`.
            order = np.argsort(-p, kind="stable")
            scores = {labels[i]: round(float(p[i]), 6) for i in order}
            rows.append(self.row(e, label=labels[int(order[0])], scores=scores))
        return rows


class RegressTask(_SequenceTask):
    """Sequence or pair regression (STS-B style); metrics: Pearson, Spearman, MSE."""

    name = "regress"

    def targets(self, examples, settings) -> np.ndarray:
        values = []
        for e in examples:
            try:
                value = float(e["label"])
            except ValueError:
                raise InputDataError(
                    f"{e['file']}:{e['line']}: label '{e['label']}' is not a number; regression "
                    "needs numeric labels."
                ) from None
            # float() reads 'nan' and 'inf' (and 1e39 is inf in float32): the loss and
            # every metric would be NaN without a word.
            if not abs(value) <= _FLOAT32_MAX:
                raise InputDataError(
                    f"{e['file']}:{e['line']}: label '{e['label']}' is not a finite number; "
                    "regression needs finite numeric labels."
                )
            values.append(value)
        return np.asarray(values, np.float32)[:, None]

    def build_model(self, backbone, settings):
        return ElectraRegressor(backbone, dropout=settings.dropout, pooling=settings.pooling)

    def loss(self, settings):
        return keras.losses.MeanSquaredError()

    def scores(self, model, examples, tokenizer, settings, batch_size):
        y = self.targets(examples, settings)[:, 0]
        predicted = self.outputs(model, examples, tokenizer, settings, batch_size)[:, 0]
        return {
            "pearson": metrics.pearson(y, predicted),
            "spearman": metrics.spearman(y, predicted),
            "mse": round(float(np.mean((y - predicted) ** 2)), 6),
        }

    def predict(self, model, examples, tokenizer, settings, batch_size=64):
        values = self.outputs(model, examples, tokenizer, settings, batch_size)[:, 0]
        return [
            self.row(e, score=round(float(v), 6)) for e, v in zip(examples, values, strict=True)
        ]
