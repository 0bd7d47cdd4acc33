"""Score sentences with a discriminator: per-token replacement probabilities, in process or
from a TF Serving server.

Any number of texts of any length: they reach the model :data:`~keras_electra.limits.
MAX_BATCH_SIZE` at a time, each cut to :data:`~keras_electra.limits.MAX_TEXT_CHARS`
characters as the export cuts it, so memory follows one chunk, not the whole call. A text
that is not valid UTF-8 (a command-line argument in another encoding) is one sentence.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import tensorflow as tf

from keras_electra.data.tokenizer import ElectraTokenizer
from keras_electra.encoding import encode_texts
from keras_electra.errors import ConfigError, ElectraError, InputDataError
from keras_electra.limits import MAX_BATCH_SIZE, batch_slices, cap_text

TokenScores = list[tuple[str, float]]


def utf8_texts(texts: Sequence[str | bytes]) -> list[bytes]:
    """The texts as UTF-8 bytes, each cut to the export's length (``limits.cap_text``).

    Raises:
        InputDataError: a ``str`` that is not valid Unicode text (a command-line argument
            in another encoding arrives with its bytes escaped as lone surrogates).

    Examples:
        >>> utf8_texts(["café", b"raw"])
        [b'caf\xc3\xa9', b'raw']
    """
    out = []
    for number, text in enumerate(texts, 1):
        if isinstance(text, bytes):
            out.append(cap_text(text))
            continue
        try:
            out.append(cap_text(text).encode("utf-8"))
        except UnicodeEncodeError as error:
            raise InputDataError(
                f"Text {number} is not valid UTF-8 (at character {error.start + 1}); pass "
                "text in UTF-8 (set a UTF-8 locale, or convert it with iconv)."
            ) from None
    return out


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
    encoded = utf8_texts(texts)
    rows = []
    for part in batch_slices(len(encoded), MAX_BATCH_SIZE):
        inputs = encode_texts(
            tokenizer, tf.constant(encoded[part], tf.string), max_length=max_length
        )
        probs = tf.sigmoid(model(inputs, training=False)).numpy()
        tokens = tokenizer.detokenize_ids(inputs["token_ids"]).numpy()
        lengths = inputs["padding_mask"].numpy().sum(axis=1)
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


def score_with_saved_model(path: str, texts: Sequence[str | bytes]) -> list[TokenScores]:
    """Score texts with an exported model, in process (``serving_default``), at most
    :data:`~keras_electra.limits.MAX_BATCH_SIZE` at a time.

    The export is code: ``tf.saved_model.load`` runs whatever ops it holds, so load only
    exports you trust (docs/serving.md, "Threat model")."""
    encoded = utf8_texts(texts)
    serve = tf.saved_model.load(latest_version_dir(path)).signatures["serving_default"]
    rows = []
    for part in batch_slices(len(encoded), MAX_BATCH_SIZE):
        outputs = serve(text=tf.constant(encoded[part], tf.string))
        rows += rows_from_outputs({k: v.numpy() for k, v in outputs.items()})
    return rows


def score_with_server(
    target: str, model_name: str, texts: Sequence[str | bytes], *, tls: bool = False, **client_args
) -> list[TokenScores]:
    """Score texts with a TF Serving server: over gRPC for ``HOST:PORT``, over its REST
    API for an ``http://`` or ``https://`` URL; the client sends them
    :data:`~keras_electra.limits.MAX_BATCH_SIZE` per request. ``tls`` asks for TLS
    (gRPC; an ``https://`` URL says it itself, an ``http://`` one refuses it);
    ``client_args`` go to the client (``timeout``; ``token``, ``headers``,
    ``root_certificates``, a client certificate; ``insecure``).

    Raises:
        ConfigError: ``tls`` with an ``http://`` URL.
        ServingError: what the client raises (one sentence).
    """
    inputs = {"text": np.array(utf8_texts(texts), object)}
    if target.startswith(("http://", "https://")):
        from keras_electra.serving.rest_client import RestClient

        if tls and target.startswith("http://"):
            raise ConfigError(
                f"--tls asks for TLS but '{target}' is a plaintext http:// URL; use its "
                "https:// URL, or leave out --tls."
            )
        return rows_from_outputs(RestClient(target, model_name, **client_args).predict(inputs))
    from keras_electra.serving.grpc_client import GrpcClient

    with GrpcClient(target, model_name, tls=tls, **client_args) as client:
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
