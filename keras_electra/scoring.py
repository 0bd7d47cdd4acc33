"""Score texts: any export's answers, in process or from a TF Serving server, and a
pretraining run's replaced-token probabilities.

``score_with_saved_model`` and ``score_with_server`` read every export ``keras-electra
export`` writes through :mod:`keras_electra.serving.export_reader` and return
:class:`Scores`, the answers with the texts they answer. Any number of texts of any length
goes in bounded chunks (:mod:`keras_electra.limits`).

Examples:
    >>> scores = score_with_saved_model("saved_models/sst2", ["a fine film"])  # doctest: +SKIP
    >>> scores.kind, scores[0].label  # doctest: +SKIP
    ('classify', 'pos')
    >>> print(format_answers(scores))  # doctest: +SKIP
    a fine film -> pos(0.93) neg(0.07)
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import tensorflow as tf

from keras_electra.data.tokenizer import ElectraTokenizer
from keras_electra.encoding import encode_texts
from keras_electra.errors import ConfigError, ElectraError, InputDataError
from keras_electra.limits import MAX_BATCH_SIZE, batch_slices, cap_text, check_length, has_text
from keras_electra.run_directory import RunDirectory
from keras_electra.serving.errors import ServingError
from keras_electra.serving.export_reader import (
    Answer,
    Classification,
    ExportReader,
    Regression,
    SentenceScore,
    Tagging,
    TokenScores,
    export_reader,
    saved_model_signatures,
)

Texts = Sequence[str | bytes] | Mapping[str, Sequence[str | bytes]]
"""Texts in the export's input order (consecutive pairs for a two-input export), or its
inputs by name (``{"question": [...], "context": [...]}``)."""


def utf8_texts(texts: Sequence[str | bytes], name: str | None = None) -> list[bytes]:
    """The texts as UTF-8 bytes, each cut to the export's length (``limits.cap_text``);
    ``name`` is the input they feed, for the errors.

    Raises:
        InputDataError: an empty (or all-whitespace) text, which has no tokens to score,
            as ``predict`` refuses it; a ``str`` that is not valid Unicode text (a
            command-line argument in another encoding arrives with its bytes escaped as
            lone surrogates).

    Examples:
        >>> utf8_texts(["café", b"raw"])
        [b'caf\xc3\xa9', b'raw']
    """
    _check_a_list(texts)
    out = []
    for number, text in enumerate(texts, 1):
        where = f"Text {number}" if name is None else f"The {name} of example {number}"
        if not has_text(text):
            raise InputDataError(f"{where} is empty; pass text to score, or leave it out.")
        if isinstance(text, bytes):
            out.append(cap_text(text))
            continue
        try:
            out.append(cap_text(text).encode("utf-8"))
        except UnicodeEncodeError as error:
            raise InputDataError(
                f"{where} is not valid UTF-8 (at character {error.start + 1}); pass "
                "text in UTF-8 (set a UTF-8 locale, or convert it with iconv)."
            ) from None
    return out


def _check_a_list(texts) -> None:
    if isinstance(texts, str | bytes):  # else scored as texts of one character each
        raise InputDataError(
            f"Pass a list of texts, not one text ({texts[:40]!r}); wrap it: [text]."
        )


def _token_values(model, tokenizer, texts, max_length, transform=None) -> list[TokenScores]:
    """Each text's ``(token, value)`` pairs without ``[CLS]``/``[SEP]``: the model's outputs
    (through ``transform``), :data:`~keras_electra.limits.MAX_BATCH_SIZE` texts per call."""
    max_length = max_length or model.config.max_position_embeddings
    check_length(max_length, model.config.max_position_embeddings)
    if tokenizer.vocab_size != model.config.vocab_size:  # else ids past the model's table
        raise ConfigError(
            f"The tokenizer has {tokenizer.vocab_size:,} tokens and the model "
            f"{model.config.vocab_size:,}; pass the tokenizer load_run returned with the model."
        )
    encoded = utf8_texts(texts)
    rows = []
    for part in batch_slices(len(encoded), MAX_BATCH_SIZE):
        inputs = encode_texts(
            tokenizer, tf.constant(encoded[part], tf.string), max_length=max_length
        )
        outputs = model(inputs, training=False)
        values = (outputs if transform is None else transform(outputs)).numpy()
        tokens = tokenizer.detokenize_ids(inputs["token_ids"]).numpy()
        lengths = inputs["padding_mask"].numpy().sum(axis=1)
        for row, value, n in zip(tokens, values, lengths, strict=True):
            pairs = zip(row[1 : n - 1], value[1 : n - 1], strict=True)
            rows.append([(t.decode("utf-8", "replace"), float(v)) for t, v in pairs])
    return rows


def score_texts(
    model, tokenizer: ElectraTokenizer, texts: Sequence[str], max_length: int | None = None
) -> list[TokenScores]:
    """Probability that each token of each text was replaced, from an ``ElectraPretrainer``
    (objective ``electra``): ``(token, probability)`` pairs per text, without
    ``[CLS]``/``[SEP]``; ``max_length`` defaults to the model's position table size."""
    _check_objective(model, "electra", "score_sentences")
    return _token_values(model, tokenizer, texts, max_length, tf.sigmoid)


def score_sentences(
    model, tokenizer: ElectraTokenizer, texts: Sequence[str], max_length: int | None = None
) -> list[tuple[TokenScores, float]]:
    """Each token's energy and each text's sentence score (``-sum`` of the energies; higher:
    more plausible), from an Electric pretrainer's discriminator, as its export answers."""
    _check_objective(model, "electric", "score_texts")
    rows = _token_values(model, tokenizer, texts, max_length)
    return [(pairs, -float(sum(e for _, e in pairs))) for pairs in rows]


def _check_objective(model, objective: str, other: str) -> None:
    """One sentence when ``model`` was not pretrained with ``objective`` (``other`` scores
    the other detector; an MLM model has none)."""
    trained = getattr(model, "objective", None)
    if trained == objective:
        return
    fix = (
        f"use {other} for a model pretrained with {trained}"
        if trained in ("electra", "electric")
        else "an MLM model has no detector to score with; pretrain with electra or electric"
    )
    raise ConfigError(f"The model was pretrained with objective {trained}, not {objective}; {fix}.")


def find_export(path: str | Path) -> str | None:
    """``path`` itself if it holds a SavedModel, else its highest numeric version folder
    that does, else None."""
    base = Path(path)
    if (base / "saved_model.pb").is_file():
        return str(base)
    found = base.glob("*") if base.is_dir() else ()
    versions = sorted(
        int(p.name) for p in found if p.name.isdigit() and (p / "saved_model.pb").is_file()
    )
    return str(base / str(versions[-1])) if versions else None


def latest_version_dir(path: str | Path) -> str:
    """:func:`find_export`'s folder; an error if there is none.

    Raises:
        ElectraError: no SavedModel at ``path``.
    """
    found = find_export(path)
    if found is None and RunDirectory(path).has_config():
        raise ElectraError(
            f"'{path}' is a training run, not an export; export it first with `keras-electra "
            f"export --run {path} --output saved_models/NAME` and pass saved_models/NAME."
        )
    if found is None:
        raise ElectraError(
            f"No SavedModel at '{path}' (expected saved_model.pb or numeric version folders); "
            "create one with `keras-electra export`."
        )
    return found


@dataclass(frozen=True)
class Scores(Sequence):
    """An export's answers, one per example, with the inputs they answer.

    A sequence of the answers (``scores[0]``, ``len(scores)``); ``kind`` says which they
    are (:mod:`keras_electra.serving.export_reader`).

    Attributes:
        reader: the export's reader (kind, inputs, JSON fields).
        inputs: each input's texts, as sent (UTF-8, cut to the export's length).
        answers: one answer per example.
        truncated: per example, whether its text was cut at the export's length (its
            answer covers the first ``L`` tokens only); None for an export whose outputs
            do not say (:meth:`ExportReader.cut
            <keras_electra.serving.export_reader.ExportReader.cut>`).
    """

    reader: ExportReader
    inputs: dict[str, list[bytes]]
    answers: list
    truncated: list[bool] | None = None

    @property
    def kind(self) -> str:
        """``replaced_token``, ``sentence_score``, ``classify``, ``regress``, ``tag`` or
        ``qa``."""
        return self.reader.kind

    def __getitem__(self, index: int | slice) -> Any:
        return self.answers[index]

    def __len__(self) -> int:
        return len(self.answers)

    def __iter__(self) -> Iterator:
        return iter(self.answers)

    def texts(self, name: str) -> list[str]:
        """One input's texts, decoded."""
        return [text.decode("utf-8", "replace") for text in self.inputs[name]]

    def records(self) -> list[dict[str, Any]]:
        """One JSON object per example: its inputs by name, then the answer's fields
        (``score --json``), then ``"truncated": true`` if its text was cut."""
        columns = [self.texts(name) for name in self.reader.inputs]
        cut = self.truncated or [False] * len(self.answers)
        return [
            {
                **dict(zip(self.reader.inputs, row, strict=True)),
                **self.reader.record(answer),
                **({"truncated": True} if was_cut else {}),
            }
            for *row, answer, was_cut in zip(*columns, self.answers, cut, strict=True)
        ]

    def truncation_note(self) -> str | None:
        """One sentence saying how many texts were cut at the export's length and where
        (``score`` prints it on stderr), or None when none was (or the export cannot say).

        Examples:
            >>> scores = score_with_saved_model("saved_models/electra", texts)  # doctest: +SKIP
            >>> scores.truncation_note()  # doctest: +SKIP
            "1 of 2 texts was cut at the export's length of 128 tokens: its scores cover ..."
        """
        return truncation_note(sum(self.truncated or ()), len(self), self.kind, self.reader.length)


def truncation_note(count: int, total: int, kind: str, length: int | None) -> str | None:
    """:meth:`Scores.truncation_note` for ``count`` of ``total`` texts cut, of an export
    of ``kind`` and ``length`` tokens (``score --input`` adds up its chunks' counts)."""
    if not count:
        return None
    texts = f"{count} of {total} texts" if total > 1 else "The text"
    was, its = ("was", "its") if count == 1 else ("were", "their")
    rows = f'{its} --json {"row says" if count == 1 else "rows say"} "truncated": true'
    if kind == "tag":
        return (
            f"{texts} {was} longer than the export's length: {its} words past it are "
            f"tagged O without being scored ({rows})."
        )
    if kind == "qa":
        contexts = f"{count} of {total} contexts" if total > 1 else "The context"
        return (
            f"{contexts} {was} longer than the windows the export reads: {its} answers come "
            f"from {its} beginning ({rows}); `predict` on the fine-tuned directory reads "
            "all of it."
        )
    return (
        f"{texts} {was} cut at the export's length of {length} tokens: {its} scores cover "
        f"the first {length - 2} word pieces only ({rows})."
    )


def _inputs(reader: ExportReader, texts: Texts) -> dict[str, list[bytes]]:
    """``texts`` laid out as the export's inputs, as UTF-8 cut to the export's length."""
    if isinstance(texts, Mapping):
        inputs = reader.check_inputs(texts)
    else:
        _check_a_list(texts)
        inputs = reader.feeds(texts)
    named = len(inputs) > 1
    return {name: utf8_texts(values, name if named else None) for name, values in inputs.items()}


def score_with_saved_model(
    path: str | Path, texts: Texts, *, batch_size: int = MAX_BATCH_SIZE
) -> Scores:
    """An export's answers to ``texts``, in process, ``batch_size`` examples at a time.

    The export is code: load only exports you trust (docs/serving.md, "Threat model").

    Args:
        path: ``saved_models/NAME`` (its highest version) or a version folder.
        texts: the texts in the export's input order (pairs for a pair classifier or
            regressor, ``question`` then ``context`` for QA), or the inputs by name.
        batch_size: examples per call of the model.

    Raises:
        ElectraError: no SavedModel at ``path``.
        ServingError: an export of no kind keras-electra reads (one sentence naming its
            signatures).
        InputDataError: texts that do not fit the export's inputs, or are not UTF-8.

    Examples:
        >>> scores = score_with_saved_model("saved_models/electra", ["Long live"])  # doctest: +SKIP
        >>> scores.kind, scores[0][:2]  # doctest: +SKIP
        ('replaced_token', [('long', 0.02), ('live', 0.05)])
    """
    return LoadedExport(path).score(texts, batch_size=batch_size)


class LoadedExport:
    """An export loaded once, to answer many calls (:func:`score_with_saved_model` loads
    one per call): ``path`` is ``saved_models/NAME`` (its highest version) or a version
    folder; ``reader`` says its kind.

    Raises:
        ElectraError: no SavedModel at ``path``.
        ServingError: an export of no kind keras-electra reads.
    """

    def __init__(self, path: str | Path):
        self.directory = latest_version_dir(path)
        self._loaded = tf.saved_model.load(self.directory)
        where = f"The export at '{self.directory}'"
        self.reader = export_reader(saved_model_signatures(self._loaded), where)

    def score(self, texts: Texts, *, batch_size: int = MAX_BATCH_SIZE) -> Scores:
        """The export's answers to ``texts``, ``batch_size`` examples per call (as
        :func:`score_with_saved_model` takes them)."""
        if not isinstance(batch_size, int) or batch_size < 1:
            raise ConfigError(f"batch_size must be 1 or more, not {batch_size!r}.")
        reader = self.reader
        inputs = _inputs(reader, texts)
        serve = self._loaded.signatures[reader.signature]
        total = len(next(iter(inputs.values())))
        answers: list = []
        cut: list[bool] | None = []
        for part in batch_slices(total, batch_size) if total else ():
            feeds = {name: tf.constant(v[part], tf.string) for name, v in inputs.items()}
            arrays = {name: value.numpy() for name, value in serve(**feeds).items()}
            answers += reader.read(arrays)
            rows = reader.cut(arrays)
            cut = None if cut is None or rows is None else cut + rows
        return Scores(reader, inputs, answers, cut)


def scorer(
    model: str | Path | None = None,
    *,
    server: str | None = None,
    model_name: str = "electra",
    **client_args,
) -> Callable[[list[str]], Scores]:
    """One function from texts to an export's :class:`Scores`, in process (``model``: its
    ``saved_models/NAME`` or a version folder, loaded once, at the first call) or served
    (``server``, ``model_name`` and the client's arguments as :func:`score_with_server`
    takes them): what ``score --input`` and :class:`~keras_electra.rerank.ElectricScorer`
    call a chunk at a time.

    Raises:
        ConfigError: both ``model`` and ``server``, or neither.
    """
    if (model is None) == (server is None):
        raise ConfigError("Pass an export (model) or a server, not both or neither.")
    if server is not None:
        return lambda texts: score_with_server(server, model_name, texts, **client_args)
    loaded: list[LoadedExport] = []

    def score(texts: list[str]) -> Scores:
        if not loaded:
            loaded.append(LoadedExport(model))
        return loaded[0].score(texts)

    return score


CHUNK = 1024
"""Examples ``score --input`` and ``rerank`` read per call of the export or the server (the
progress bar's step, and how often ``score --input`` writes its output)."""


def read_examples(path: str | Path) -> tuple[list[str], int]:
    """The texts of a file of examples, one example per line (``-``: standard input), and
    how many texts each example has: 1, or 2 with a tab between them (an export of pairs:
    text then text_b; QA: question then context). The texts come in the flat order
    :func:`score_with_saved_model` takes them; blank lines are skipped (a corpus's breaks
    between documents). Every line is checked before any is scored.

    Raises:
        InputDataError: a missing file, a line that is not UTF-8, holds only characters
            the tokenizer drops, has an empty text beside a tab, more tabs than an example
            has or another number of texts than the first example (one sentence naming the
            line), or a file with no examples.

    Examples:
        >>> import tempfile
        >>> path = tempfile.mkstemp()[1]
        >>> _ = open(path, "w").write("a fine film\\tit was good\\nawful\\tbad\\n")
        >>> read_examples(path)
        (['a fine film', 'it was good', 'awful', 'bad'], 2)
    """
    name = "standard input" if str(path) == "-" else f"'{path}'"
    try:
        data = sys.stdin.buffer.read() if str(path) == "-" else Path(path).read_bytes()
    except FileNotFoundError:
        raise InputDataError(
            f"Input file {name} does not exist; pass a file of texts, one per line, or - "
            "for standard input."
        ) from None
    except IsADirectoryError:
        raise InputDataError(
            f"Input file {name} is a directory; pass a file of texts, one per line."
        ) from None
    lines = data.removeprefix(b"\xef\xbb\xbf").split(b"\n")  # a BOM is not the text's
    if lines and not lines[-1]:
        lines.pop()  # the last line's newline
    texts: list[str] = []
    width = None
    for number, raw in enumerate(lines, 1):
        where = f"Line {number} of {name}"
        try:
            line = raw.removesuffix(b"\r").decode("utf-8")
        except UnicodeDecodeError as error:
            raise InputDataError(
                f"{where} is not UTF-8 (at byte {error.start + 1}); convert the file to "
                "UTF-8 (iconv -f ENCODING -t UTF-8)."
            ) from None
        if not line.strip():
            continue  # a corpus's break between documents
        fields = line.split("\t")
        if len(fields) > 1 and not all(map(has_text, fields)):
            raise InputDataError(
                f"{where} has an empty text beside a tab; write both texts of the example, "
                "or remove the tab."
            )
        if not has_text(line):  # a zero-width space, say: no word piece to score
            raise InputDataError(
                f"{where} holds only characters the tokenizer drops (invisible ones or "
                "accents alone); write its text or remove the line."
            )
        if len(fields) > 2:
            raise InputDataError(
                f"{where} has {len(fields)} tab-separated texts; an example has one, or two "
                "for an export of pairs (a tab between them)."
            )
        width = width or len(fields)
        if len(fields) != width:
            raise InputDataError(
                f"{where} has {len(fields)} text{'s' if len(fields) > 1 else ''} where the "
                f"first example has {width}; give every line as many (a tab between an "
                "example's two texts)."
            )
        texts += fields
    if not texts:
        raise InputDataError(f"Input file {name} has no texts; write one example per line.")
    return texts, width or 1


def score_in_chunks(
    score: Callable[[list[str]], Scores], texts: list[str], width: int, where: str
) -> Iterator[Scores]:
    """``score``'s answers to ``texts`` (``width`` texts per example, as
    :func:`read_examples` gives them), :data:`CHUNK` examples at a time; the first chunk's
    answers say whether the export takes examples of ``width`` texts (``where`` names the
    input in the error).

    Raises:
        InputDataError: an export of pairs given one text per line, or the other way round.
    """
    # With one text per line the first chunk holds an even number of texts, so that an
    # export of pairs reads it and the check below, not the pairing, names the mismatch.
    first = CHUNK * width if width > 1 or len(texts) < 2 else min(CHUNK, len(texts) // 2 * 2)
    bounds = [0, *range(first, len(texts), CHUNK * width), len(texts)]
    for start, stop in zip(bounds, bounds[1:], strict=False):
        scores = score(texts[start:stop])
        wanted = scores.reader.inputs
        if len(wanted) != width:
            given = "one text" if width == 1 else f"{width} tab-separated texts"
            fix = (
                "write both on each line, a tab between them"
                if len(wanted) > 1
                else "write one text per line"
            )
            raise InputDataError(
                f"{where} has {given} per line, but the export takes {' and '.join(wanted)}; {fix}."
            )
        yield scores


def score_with_server(
    target: str, model_name: str, texts: Texts, *, tls: bool = False, **client_args
) -> Scores:
    """A served export's answers to ``texts``: over gRPC for ``HOST:PORT``, over its REST
    API for an ``http://`` or ``https://`` URL.

    The model's metadata says its kind (as :func:`score_with_saved_model` reads an export's
    signatures); the client sends the texts :data:`~keras_electra.limits.MAX_BATCH_SIZE`
    per request. ``tls`` asks for TLS (gRPC; an ``https://`` URL says it itself, an
    ``http://`` one refuses it); ``client_args`` go to the client (``timeout``; ``token``,
    ``headers``, ``root_certificates``, a client certificate; ``insecure``).

    Raises:
        ConfigError: ``tls`` with an ``http://`` URL.
        ServingError: what the client raises, or a model of no kind keras-electra reads
            (one sentence).
        InputDataError: texts that do not fit the model's inputs, or are not UTF-8.

    Examples:
        >>> scores = score_with_server("localhost:8500", "sst2", ["fine"])  # doctest: +SKIP
        >>> scores[0].scores  # doctest: +SKIP
        [('pos', 0.93), ('neg', 0.07)]
    """
    if target.startswith(("http://", "https://")):
        from keras_electra.serving.rest_client import RestClient

        if tls and target.startswith("http://"):
            raise ConfigError(
                f"--tls asks for TLS but '{target}' is a plaintext http:// URL; use its "
                "https:// URL, or leave out --tls."
            )
        client: Any = nullcontext(RestClient(target, model_name, **client_args))
    else:
        from keras_electra.serving.grpc_client import GrpcClient

        client = GrpcClient(target, model_name, tls=tls, **client_args)
    with client as served:
        source = f"Model '{model_name}' at {target}"
        try:
            metadata = served.metadata()
        except ServingError as err:
            label = client_args.get("version_label")
            if label is not None and "version label" in str(err).lower():
                fix = (
                    f"the server has no version label '{label}' for '{model_name}': pass a "
                    "label its models.config gives the model (version_labels), or leave "
                    "--version-label out for its latest version"
                )
            elif err.code != "NOT_FOUND":
                raise
            elif (version := client_args.get("version")) is not None:
                fix = (
                    f"the server has no version {version} of '{model_name}' loaded: pass a "
                    "version it serves with --model-version, or leave it out for its latest"
                )
            else:
                fix = (
                    f"the server serves no model named '{model_name}': pass the name it "
                    "serves the model under with --model-name (the MODEL_NAME of `docker "
                    "run`, a `name` in models.config)"
                )
            raise ServingError(
                f"{err}; {fix}.",
                code=err.code,
                http_status=err.http_status,
                details=err.details,
            ) from None
        reader = export_reader(metadata["signatures"], source)
        inputs = _inputs(reader, texts)
        feeds = {name: np.array(values, object) for name, values in inputs.items()}
        outputs = served.predict(feeds, reader.signature)
        return Scores(reader, inputs, reader.read(outputs), reader.cut(outputs))


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


def _show_classification(texts: list[str], answer: Classification) -> str:
    shown = " ".join(f"{label}({p:.2f})" for label, p in answer.scores)
    return f"{' | '.join(texts)} -> {shown}"


def _show_regression(texts: list[str], answer: Regression) -> str:
    return f"{' | '.join(texts)} -> {answer.value:.4f}"


def _show_tagging(texts: list[str], answer: Tagging) -> str:
    return " ".join(f"{word}/{tag}" for word, tag in zip(answer.words, answer.tags, strict=True))


def _show_answer(texts: list[str], answer: Answer) -> str:
    if answer.start_word < 0:
        return f"{texts[0]} -> no answer (the best span's score {answer.score:.2f})"
    span = f"context words {answer.start_word}-{answer.end_word}"
    return f'{texts[0]} -> "{answer.text}" ({span}, score {answer.score:.2f})'


def _show_sentence(texts: list[str], answer: SentenceScore) -> str:
    energies = " ".join(f"{token}({energy:.2f})" for token, energy in answer.tokens)
    return f"{texts[0]} -> sentence_score {answer.score:.3f}: {energies}"


_SHOW = {
    "sentence_score": _show_sentence,
    "classify": _show_classification,
    "regress": _show_regression,
    "tag": _show_tagging,
    "qa": _show_answer,
}


def format_answers(scores: Scores, color: bool = False) -> str:
    """Render an export's answers as text, one line per example: replaced-token scores as
    :func:`format_scores` does; an Electric export's as ``TEXT -> sentence_score s:
    token(energy) ...``; ``TEXT -> label(p) ...`` most likely first (a pair as
    ``TEXT | TEXT_B``); ``TEXT -> value``; ``word/TAG ...``; ``QUESTION -> "answer"
    (context words i-j, score s)``.

    Examples:
        >>> scores = score_with_saved_model("saved_models/ner", ["Ann ran"])  # doctest: +SKIP
        >>> print(format_answers(scores))  # doctest: +SKIP
        Ann/B-PER ran/O
    """
    if scores.kind == "replaced_token":
        return format_scores(list(scores), color=color)
    show = _SHOW[scores.kind]
    columns = [scores.texts(name) for name in scores.reader.inputs]
    rows = zip(*columns, scores.answers, strict=True)
    return "\n".join(show(list(texts), answer) for *texts, answer in rows)
