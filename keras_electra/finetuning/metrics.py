"""Evaluation metrics as GLUE, SQuAD 1.1/2.0 (an unanswerable question's gold answer is
``""``) and conlleval (BIO and BIOES chunks) define them.

Examples:
    >>> accuracy([1, 0, 1, 1], [1, 0, 0, 1])
    0.75
    >>> round(matthews_corrcoef([1, 1, 0, 0], [1, 0, 0, 0]), 4)
    0.5774
    >>> squad_f1("the Eiffel tower", ["Eiffel Tower in Paris"])
    0.6667
"""

from __future__ import annotations

import collections
import math
import re
import string
from collections.abc import Sequence

import numpy as np

from keras_electra.pretraining.health import average_ranks


def accuracy(labels: Sequence, predictions: Sequence) -> float:
    """Fraction of predictions equal to the labels."""
    labels, predictions = np.asarray(labels), np.asarray(predictions)
    return float((labels == predictions).mean()) if len(labels) else 0.0


def f1_score(labels: Sequence, predictions: Sequence, positive=1) -> float:
    """F1 of the ``positive`` class (GLUE's F1 for MRPC and QQP).

    Examples:
        >>> f1_score([1, 1, 0, 0], [1, 0, 1, 0])
        0.5
    """
    labels, predictions = np.asarray(labels), np.asarray(predictions)
    tp = float(((predictions == positive) & (labels == positive)).sum())
    fp = float(((predictions == positive) & (labels != positive)).sum())
    fn = float(((predictions != positive) & (labels == positive)).sum())
    return 2 * tp / (2 * tp + fp + fn) if tp else 0.0


def macro_f1(labels: Sequence, predictions: Sequence) -> float:
    """Mean of the per-class F1 over the classes present in labels or predictions.

    Examples:
        >>> macro_f1([0, 1, 2], [0, 1, 1])
        0.5556
    """
    classes = sorted(set(np.asarray(labels).tolist()) | set(np.asarray(predictions).tolist()))
    if not classes:
        return 0.0
    return round(float(np.mean([f1_score(labels, predictions, c) for c in classes])), 4)


def matthews_corrcoef(labels: Sequence, predictions: Sequence) -> float:
    """Matthews correlation (multi-class form; GLUE's CoLA metric). 0 when undefined.

    Examples:
        >>> matthews_corrcoef([1, 0, 1, 0], [1, 0, 1, 0])
        1.0
    """
    labels, predictions = np.asarray(labels), np.asarray(predictions)
    classes = sorted(set(labels.tolist()) | set(predictions.tolist()))
    index = {c: i for i, c in enumerate(classes)}
    confusion = np.zeros((len(classes), len(classes)), np.float64)
    for y, p in zip(labels.tolist(), predictions.tolist(), strict=True):
        confusion[index[y], index[p]] += 1
    t, p = confusion.sum(axis=1), confusion.sum(axis=0)
    c, s = np.trace(confusion), confusion.sum()
    denominator = math.sqrt((s * s - (p * p).sum()) * (s * s - (t * t).sum()))
    return float((c * s - (t * p).sum()) / denominator) if denominator else 0.0


def pearson(x: Sequence[float], y: Sequence[float]) -> float:
    """Pearson correlation; 0 when either side is constant.

    Examples:
        >>> pearson([1, 2, 3], [2, 4, 7])
        0.9934
    """
    x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
    x, y = x - x.mean(), y - y.mean()
    denominator = math.sqrt(float((x * x).sum() * (y * y).sum()))
    return round(float((x * y).sum() / denominator), 4) if denominator else 0.0


def spearman(x: Sequence[float], y: Sequence[float]) -> float:
    """Spearman correlation: Pearson on average ranks (ties share their mean rank).

    Examples:
        >>> spearman([1, 2, 3, 4], [1, 3, 2, 4])
        0.8
    """
    return pearson(average_ranks(x), average_ranks(y))


# === SQuAD ===

_ARTICLES = re.compile(r"\b(a|an|the)\b", re.UNICODE)
_PUNCTUATION = set(string.punctuation)


def normalize_answer(text: str) -> str:
    """SQuAD's normalization: lower-case, no punctuation, no articles, single spaces.

    Examples:
        >>> normalize_answer("The  Eiffel-Tower!")
        'eiffeltower'
    """
    text = "".join(ch for ch in text.lower() if ch not in _PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", text).split())


def squad_exact(prediction: str, golds: Sequence[str]) -> float:
    """1.0 if the normalized prediction equals a normalized gold answer.

    Examples:
        >>> squad_exact("the Eiffel Tower", ["Eiffel Tower"])
        1.0
    """
    golds = list(golds) or [""]
    return float(any(normalize_answer(prediction) == normalize_answer(g) for g in golds))


def _token_f1(prediction: str, gold: str) -> float:
    pred, ref = normalize_answer(prediction).split(), normalize_answer(gold).split()
    if not pred or not ref:  # no-answer: F1 is 1 only when both are empty
        return float(pred == ref)
    common = collections.Counter(pred) & collections.Counter(ref)
    overlap = sum(common.values())
    if not overlap:
        return 0.0
    precision, recall = overlap / len(pred), overlap / len(ref)
    return 2 * precision * recall / (precision + recall)


def squad_f1(prediction: str, golds: Sequence[str]) -> float:
    """Best token-overlap F1 over the gold answers (rounded to 4 places).

    Examples:
        >>> squad_f1("", [""])
        1.0
    """
    golds = list(golds) or [""]
    return round(max(_token_f1(prediction, g) for g in golds), 4)


def squad_scores(predictions: dict[str, str], golds: dict[str, Sequence[str]]) -> dict[str, float]:
    """``exact_match`` and ``f1`` in percent over all questions, as the official script.

    Examples:
        >>> squad_scores({"q1": "Paris", "q2": ""}, {"q1": ["paris"], "q2": ["Rome"]})
        {'exact_match': 50.0, 'f1': 50.0}
    """
    if not golds:
        return {"exact_match": 0.0, "f1": 0.0}
    exact = [squad_exact(predictions.get(q, ""), g) for q, g in golds.items()]
    f1 = [squad_f1(predictions.get(q, ""), g) for q, g in golds.items()]
    return {
        "exact_match": round(100 * float(np.mean(exact)), 4),
        "f1": round(100 * float(np.mean(f1)), 4),
    }


# === Chunks (conlleval) ===


def extract_chunks(tags: Sequence[str]) -> list[tuple[str, int, int]]:
    """Chunks ``(type, start, end_inclusive)`` from BIO or BIOES tags, conlleval's way.

    An ``I-``/``E-`` tag that does not continue a chunk of its type starts one.

    Examples:
        >>> extract_chunks(["B-PER", "I-PER", "O", "I-LOC", "S-ORG"])
        [('PER', 0, 1), ('LOC', 3, 3), ('ORG', 4, 4)]
    """
    chunks, start, current = [], None, ""
    prev, prev_type = "O", ""
    for i, full in enumerate([*tags, "O"]):
        tag, kind = ("O", "") if full == "O" or "-" not in full else full.split("-", 1)
        # conlleval: the previous tag's chunk ends before this tag, then one starts at it.
        continued = tag not in ("B", "S", "O") and kind == prev_type
        if start is not None and (prev in ("E", "S") or (prev in ("B", "I") and not continued)):
            chunks.append((current, start, i - 1))
            start = None
        continues = prev not in ("O", "E", "S") and kind == prev_type
        if tag in ("B", "S") or (tag in ("I", "E") and not continues):
            start, current = i, kind
        prev, prev_type = tag, kind
    return chunks


def chunk_scores(
    gold_sequences: Sequence[Sequence[str]], predicted_sequences: Sequence[Sequence[str]]
) -> dict[str, float]:
    """Micro precision, recall and F1 of chunks, plus token accuracy, all in percent (as
    conlleval prints them).

    Examples:
        >>> chunk_scores([["B-PER", "I-PER", "O"]], [["B-PER", "O", "O"]])["f1"]
        0.0
    """
    correct = found_gold = found_pred = tokens = tokens_correct = 0
    for gold, pred in zip(gold_sequences, predicted_sequences, strict=True):
        g, p = set(extract_chunks(gold)), set(extract_chunks(pred))
        correct += len(g & p)
        found_gold += len(g)
        found_pred += len(p)
        tokens += len(gold)
        tokens_correct += sum(a == b for a, b in zip(gold, pred, strict=True))
    precision = 100.0 * correct / found_pred if found_pred else 0.0
    recall = 100.0 * correct / found_gold if found_gold else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {
        "precision": round(precision, 4),
        "recall": round(recall, 4),
        "f1": round(f1, 4),
        "token_accuracy": round(100.0 * tokens_correct / tokens, 4) if tokens else 0.0,
    }
