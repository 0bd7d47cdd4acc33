"""Score sentences in process with a discriminator: per-token replacement probabilities."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import tensorflow as tf

from keras_electra.data.tokenizer import ElectraTokenizer
from keras_electra.encoding import encode_texts

TokenScores = list[tuple[str, float]]


def score_texts(
    model, tokenizer: ElectraTokenizer, texts: Sequence[str], max_length: int | None = None
) -> list[TokenScores]:
    """Probability that each token of each text was replaced, from the discriminator.

    Args:
        model: an ``ElectraPretrainer`` (objective ``electra``).
        tokenizer: its tokenizer.
        texts: sentences to score.
        max_length: sequence length (default: the model's position table size).

    Returns:
        For each text, ``(token, probability)`` pairs without ``[CLS]``/``[SEP]``.
    """
    max_length = max_length or model.config.max_position_embeddings
    inputs = encode_texts(tokenizer, tf.constant(list(texts)), max_length=max_length)
    probs = tf.sigmoid(model(inputs, training=False)).numpy()
    tokens = tokenizer.detokenize_ids(inputs["token_ids"]).numpy()
    lengths = inputs["padding_mask"].numpy().sum(axis=1)
    return [
        [(t.decode("utf-8", "replace"), float(p)) for t, p in zip(row[1:n - 1], prob[1:n - 1])]
        for row, prob, n in zip(tokens, probs, lengths)
    ]


def format_scores(scores: list[TokenScores], color: bool = False, threshold: float = 0.5) -> str:
    """Render scores as text: ``token(0.93)``; on a terminal, likely replacements in red."""
    lines = []
    for row in scores:
        parts = []
        for token, p in row:
            text = f"{token}({p:.2f})"
            if color and p >= threshold:
                text = f"\x1b[1;31m{text}\x1b[0m"
            elif color and p >= threshold / 2:
                text = f"\x1b[33m{text}\x1b[0m"
            parts.append(text)
        lines.append(" ".join(parts))
    return "\n".join(lines)


def mean_replaced_prob(scores: TokenScores) -> float:
    return float(np.mean([p for _, p in scores])) if scores else 0.0
