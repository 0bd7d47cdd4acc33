"""Score sentences in process with a discriminator: per-token replacement probabilities."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import tensorflow as tf

from keras_electra.data.tokenizer import ElectraTokenizer
from keras_electra.encoding import encode_texts
from keras_electra.errors import ElectraError

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
    rows = []
    for row, prob, n in zip(tokens, probs, lengths, strict=True):
        pairs = zip(row[1 : n - 1], prob[1 : n - 1], strict=True)  # without [CLS] and [SEP]
        rows.append([(t.decode("utf-8", "replace"), float(p)) for t, p in pairs])
    return rows


def rows_from_outputs(outputs: dict) -> list[TokenScores]:
    """Turn ``serving_default`` outputs (``tokens``, ``replaced_prob``, ``num_tokens``) into rows.

    ``[CLS]`` and ``[SEP]`` are dropped, as in :func:`score_texts`.
    """
    columns = (outputs["tokens"], outputs["replaced_prob"], outputs["num_tokens"])
    rows = []
    for tokens, probs, n in zip(*map(np.asarray, columns), strict=True):
        pairs = [
            (t.decode("utf-8", "replace") if isinstance(t, bytes) else str(t), float(p))
            for t, p in zip(tokens[:n], probs[:n], strict=True)
        ]
        rows.append([(t, p) for t, p in pairs if t not in ("[CLS]", "[SEP]")])
    return rows


def latest_version_dir(path: str) -> str:
    """``path`` itself if it holds a SavedModel, else its highest numeric version folder."""
    base = Path(path)
    if (base / "saved_model.pb").is_file():
        return str(base)
    found = base.glob("*") if base.is_dir() else ()
    versions = sorted(
        int(p.name) for p in found if p.name.isdigit() and (p / "saved_model.pb").is_file()
    )
    if not versions:
        raise ElectraError(
            f"No SavedModel at '{path}' (expected saved_model.pb or numeric version folders); "
            "create one with `keras-electra export`."
        )
    return str(base / str(versions[-1]))


def score_with_saved_model(path: str, texts: Sequence[str]) -> list[TokenScores]:
    """Score texts with an exported model, in process (``serving_default``)."""
    loaded = tf.saved_model.load(latest_version_dir(path))
    outputs = loaded.signatures["serving_default"](text=tf.constant(list(texts), tf.string))
    return rows_from_outputs({k: v.numpy() for k, v in outputs.items()})


def score_with_server(
    target: str, model_name: str, texts: Sequence[str], **client_args
) -> list[TokenScores]:
    """Score texts with a TF Serving server: over gRPC for ``HOST:PORT``, over its REST
    API for an ``http://`` or ``https://`` URL. ``client_args`` go to the client
    (``timeout``; ``token``, ``headers``, ``root_certificates``, a client certificate;
    ``tls`` for gRPC)."""
    inputs = {"text": np.array([t.encode("utf-8") for t in texts], object)}
    if target.startswith(("http://", "https://")):
        from keras_electra.serving.rest_client import RestClient

        client_args.pop("tls", None)  # the URL's scheme says it
        return rows_from_outputs(RestClient(target, model_name, **client_args).predict(inputs))
    from keras_electra.serving.grpc_client import GrpcClient

    with GrpcClient(target, model_name, **client_args) as client:
        return rows_from_outputs(client.predict(inputs))


def format_scores(scores: list[TokenScores], color: bool = False, threshold: float = 0.5) -> str:
    """Render scores as text: ``token(0.93)``; on a terminal, likely replacements in red."""

    def show(token: str, p: float) -> str:
        text = f"{token}({p:.2f})"
        if color and p >= threshold:
            return f"\x1b[1;31m{text}\x1b[0m"
        if color and p >= threshold / 2:
            return f"\x1b[33m{text}\x1b[0m"
        return text

    return "\n".join(" ".join(show(token, p) for token, p in row) for row in scores)
