"""The one reader of an export's signatures: what kind of export it is, how to read its outputs.

``keras-electra export`` writes six kinds of SavedModel (:data:`KINDS`), told apart by
the inputs and outputs of their ``serving_default`` signature (docs/serving.md lists every
output). :func:`export_reader` takes the signatures as plain dicts, a server's metadata
(:meth:`~keras_electra.serving.client.ModelClient.metadata`, read by
:func:`signature_defs_to_dict`) or a loaded SavedModel's (:func:`saved_model_signatures`), and
returns an :class:`ExportReader`: the kind, its
inputs, and how its outputs read as answers and JSON fields. Plain Python and numpy.

Examples:
    >>> signatures = {"serving_default": {
    ...     "inputs": {"text": {"dtype": "DT_STRING", "shape": [-1]}},
    ...     "outputs": {"classes": {"dtype": "DT_STRING", "shape": [-1, 2]},
    ...                 "scores": {"dtype": "DT_FLOAT", "shape": [-1, 2]}}}}
    >>> reader = export_reader(signatures)
    >>> reader.kind, reader.inputs
    ('classify', ('text',))
    >>> outputs = {"classes": [[b"neg", b"pos"]], "scores": [[0.25, 0.75]]}
    >>> reader.read(outputs)
    [Classification(label='pos', scores=[('pos', 0.75), ('neg', 0.25)])]
    >>> reader.record(reader.read(outputs)[0])
    {'label': 'pos', 'scores': {'pos': 0.75, 'neg': 0.25}}
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np

from keras_electra.errors import InputDataError
from keras_electra.serving.errors import ServingError

TokenScores = list[tuple[str, float]]
"""A replaced-token export's answer: each word piece and the probability it was replaced."""

Outputs = Mapping[str, Any]
T = TypeVar("T")

SignatureDict = dict[str, Any]  # a signature as a client's metadata() gives it
DEFAULT_SIGNATURE = "serving_default"
"""The signature TF Serving runs when a request names none."""


# === Answers ===


@dataclass(frozen=True)
class SentenceScore:
    """An Electric export's answer: each word piece with its energy (how badly it fits its
    context), and the sentence's score, ``-sum`` of the energies (a pseudo-log-likelihood:
    higher means more plausible)."""

    tokens: list[tuple[str, float]]
    score: float


@dataclass(frozen=True)
class Classification:
    """A classifier's answer: the most likely label, and every label's probability, most
    likely first."""

    label: str
    scores: list[tuple[str, float]]


@dataclass(frozen=True)
class Regression:
    """A regressor's answer: the predicted value."""

    value: float


@dataclass(frozen=True)
class Tagging:
    """A tagger's answer: the text's whitespace words and each word's tag (``O`` for words
    past the model's sequence length)."""

    words: list[str]
    tags: list[str]


@dataclass(frozen=True)
class Answer:
    """A QA model's answer: the answer's text (its context words joined by one space; ``""``
    when a SQuAD 2.0 model declines), its first and last word as indexes into
    ``context.split()`` (-1 for no answer), and the span's start + end logit."""

    text: str
    start_word: int
    end_word: int
    score: float


# === Reading outputs ===


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def read_token_scores(outputs: Outputs) -> list[TokenScores]:
    """A replaced-token export's outputs as rows of ``(token, probability)``, without
    ``[CLS]`` and ``[SEP]``.

    Examples:
        >>> read_token_scores({"tokens": [[b"[CLS]", b"hi", b"[SEP]", b""]],
        ...                    "replaced_prob": [[0.0, 0.5, 0.0, 0.0]], "num_tokens": [3]})
        [[('hi', 0.5)]]
    """
    columns = (outputs["tokens"], outputs["replaced_prob"], outputs["num_tokens"])
    rows = []
    for tokens, probs, n in zip(*map(np.asarray, columns), strict=True):
        pairs = [(_text(t), float(p)) for t, p in zip(tokens[:n], probs[:n], strict=True)]
        rows.append([(t, p) for t, p in pairs if t not in ("[CLS]", "[SEP]")])
    return rows


def read_sentence_scores(outputs: Outputs) -> list[SentenceScore]:
    """An Electric export's outputs as answers: ``(token, energy)`` without ``[CLS]`` and
    ``[SEP]``, and the sentence score.

    Examples:
        >>> read_sentence_scores({"tokens": [[b"[CLS]", b"hi", b"[SEP]", b""]],
        ...                       "energy": [[0.0, 1.5, 0.0, 0.0]], "num_tokens": [3],
        ...                       "sentence_score": [-1.5]})
        [SentenceScore(tokens=[('hi', 1.5)], score=-1.5)]
    """
    renamed = {**outputs, "replaced_prob": outputs["energy"]}
    return [
        SentenceScore(tokens, float(score))
        for tokens, score in zip(
            read_token_scores(renamed), np.asarray(outputs["sentence_score"]), strict=True
        )
    ]


def read_classifications(outputs: Outputs) -> list[Classification]:
    """A classifier's ``classes`` and ``scores`` as answers, labels most likely first (the
    export's order among equal probabilities).

    Examples:
        >>> read_classifications({"classes": [[b"a", b"b", b"c"]], "scores": [[0.2, 0.2, 0.6]]})
        [Classification(label='c', scores=[('c', 0.6), ('a', 0.2), ('b', 0.2)])]
    """
    answers = []
    classes, scores = np.asarray(outputs["classes"]), np.asarray(outputs["scores"])
    for names, probs in zip(classes, scores, strict=True):
        ranked = [(_text(names[i]), float(probs[i])) for i in np.argsort(-probs, kind="stable")]
        answers.append(Classification(ranked[0][0], ranked))
    return answers


def read_regressions(outputs: Outputs) -> list[Regression]:
    """A regressor's ``scores`` (``[-1, 1]``) as answers.

    Examples:
        >>> read_regressions({"scores": [[2.5], [0.0]]})
        [Regression(value=2.5), Regression(value=0.0)]
    """
    scores = np.asarray(outputs["scores"])
    return [Regression(float(value)) for value in scores.reshape(len(scores), -1)[:, 0]]


def read_taggings(outputs: Outputs) -> list[Tagging]:
    """A tagger's ``words``, ``tags`` and ``num_words`` as answers.

    Examples:
        >>> read_taggings({"words": [[b"Ann", b"ran"]], "tags": [[b"B-PER", b"O"]],
        ...                "num_words": [2]})
        [Tagging(words=['Ann', 'ran'], tags=['B-PER', 'O'])]
    """
    columns = (outputs["words"], outputs["tags"], outputs["num_words"])
    return [
        Tagging([_text(w) for w in words[:n]], [_text(t) for t in tags[:n]])
        for words, tags, n in zip(*map(np.asarray, columns), strict=True)
    ]


def read_answers(outputs: Outputs) -> list[Answer]:
    """A QA model's ``answer``, ``answer_start_word``, ``answer_end_word`` and
    ``answer_score`` as answers.

    Examples:
        >>> read_answers({"answer": [b"Bob"], "answer_start_word": [2],
        ...               "answer_end_word": [2], "answer_score": [7.5]})
        [Answer(text='Bob', start_word=2, end_word=2, score=7.5)]
    """
    names = ("answer", "answer_start_word", "answer_end_word", "answer_score")
    return [
        Answer(_text(text), int(start), int(end), float(score))
        for text, start, end, score in zip(*(np.asarray(outputs[n]) for n in names), strict=True)
    ]


# === Texts cut at the export's length ===


def _cut_unknown(outputs: Outputs, length: int | None) -> None:
    """A kind whose outputs do not say whether a text was cut (a classifier's)."""
    return None


def _cut_tokens(outputs: Outputs, length: int | None) -> list[bool] | None:
    """Which rows of a token export filled all ``length`` positions (their word pieces past
    them, if any, were not read); None when the signature does not say ``length``."""
    if length is None:
        return None
    return [int(n) >= length for n in np.asarray(outputs["num_tokens"]).reshape(-1)]


def _cut_words(outputs: Outputs, length: int | None) -> list[bool] | None:
    """Which rows of a tagger had words past its length (``word_mask`` 0: tagged ``O``
    unscored); None without ``word_mask``."""
    if "word_mask" not in outputs:
        return None
    counts = np.asarray(outputs["num_words"]).reshape(-1)
    mask = np.asarray(outputs["word_mask"]).reshape(len(counts), -1)
    return [int(kept) < int(n) for kept, n in zip(mask.sum(axis=1), counts, strict=True)]


def _cut_contexts(outputs: Outputs, length: int | None) -> list[bool] | None:
    """Which questions' contexts went past the windows a QA export reads (its answer
    comes from their beginning); None for an export without ``context_cut``."""
    if "context_cut" not in outputs:
        return None
    return [bool(c) for c in np.asarray(outputs["context_cut"]).reshape(-1)]


# === Answers as JSON fields ===


def _round(value: float) -> float:
    return round(float(value), 6)


def _token_record(answer: TokenScores) -> dict[str, Any]:
    return {"tokens": [t for t, _ in answer], "replaced_prob": [_round(p) for _, p in answer]}


def _sentence_record(answer: SentenceScore) -> dict[str, Any]:
    return {
        "tokens": [t for t, _ in answer.tokens],
        "energy": [_round(e) for _, e in answer.tokens],
        "sentence_score": _round(answer.score),
    }


def _classification_record(answer: Classification) -> dict[str, Any]:
    return {"label": answer.label, "scores": {label: _round(p) for label, p in answer.scores}}


def _regression_record(answer: Regression) -> dict[str, Any]:
    return {"score": _round(answer.value)}


def _tagging_record(answer: Tagging) -> dict[str, Any]:
    return {"words": answer.words, "tags": answer.tags}


def _answer_record(answer: Answer) -> dict[str, Any]:
    return {
        "answer": answer.text,
        "start_word": answer.start_word,
        "end_word": answer.end_word,
        "score": _round(answer.score),
    }


# === The kinds ===


@dataclass(frozen=True)
class Kind:
    """One kind of export: the input layouts and outputs that identify it, how its outputs
    read as answers and how an answer reads as JSON fields."""

    name: str
    title: str
    layouts: tuple[tuple[str, ...], ...]
    outputs: tuple[str, ...]
    read: Callable[[Outputs], list]
    record: Callable[[Any], dict[str, Any]]
    cut: Callable[[Outputs, int | None], list[bool] | None] = _cut_unknown


KINDS = (
    Kind(
        "replaced_token",
        "replaced-token",
        (("text",),),
        ("tokens", "replaced_prob", "num_tokens"),
        read_token_scores,
        _token_record,
        _cut_tokens,
    ),
    Kind(
        "sentence_score",
        "sentence-score",
        (("text",),),
        ("tokens", "energy", "sentence_score", "num_tokens"),
        read_sentence_scores,
        _sentence_record,
        _cut_tokens,
    ),
    Kind(
        "classify",
        "classifier",
        (("text",), ("text", "text_b")),
        ("classes", "scores"),
        read_classifications,
        _classification_record,
    ),
    # After classify: a regressor's serving_default has `scores` without `classes`.
    Kind(
        "regress",
        "regressor",
        (("text",), ("text", "text_b")),
        ("scores",),
        read_regressions,
        _regression_record,
    ),
    Kind(
        "tag",
        "tagger",
        (("text",),),
        ("words", "tags", "num_words"),
        read_taggings,
        _tagging_record,
        _cut_words,
    ),
    Kind(
        "qa",
        "QA",
        (("question", "context"),),
        ("answer", "answer_start_word", "answer_end_word", "answer_score"),
        read_answers,
        _answer_record,
        _cut_contexts,
    ),
)
"""Every kind, in the order :func:`export_reader` tries them."""


@dataclass(frozen=True)
class ExportReader:
    """How to call one export and read what it answers (from :func:`export_reader`): its
    :class:`Kind` (``spec``), the signature's text ``inputs`` in the order texts are laid
    out, the ``signature`` to run, and its fixed sequence ``length`` in tokens (``L``, when
    its outputs' shape says it: a replaced-token or Electric export's)."""

    spec: Kind
    inputs: tuple[str, ...]
    signature: str = DEFAULT_SIGNATURE
    length: int | None = None

    @property
    def kind(self) -> str:
        """``replaced_token``, ``sentence_score``, ``classify``, ``regress``, ``tag`` or
        ``qa``."""
        return self.spec.name

    @property
    def title(self) -> str:
        """The kind in words (``classifier``), for messages."""
        return self.spec.title

    def feeds(self, texts: Sequence[T]) -> dict[str, list[T]]:
        """``texts`` as the export's inputs: one text each for a one-input export, else
        consecutive pairs (``text``, ``text_b``; ``question``, ``context``; an odd number is
        an ``InputDataError``).

        Examples:
            >>> qa = ExportReader(KINDS[-1], ("question", "context"))
            >>> qa.feeds(["Who ran?", "Ann ran.", "Why?", "No idea."])
            {'question': ['Who ran?', 'Why?'], 'context': ['Ann ran.', 'No idea.']}
        """
        width = len(self.inputs)
        if len(texts) % width:
            raise InputDataError(
                f"This {self.title} export reads texts in pairs ({', '.join(self.inputs)}) and "
                f"got {len(texts)}; pass {' then '.join(self.inputs)} for each example."
            )
        return {name: list(texts[i::width]) for i, name in enumerate(self.inputs)}

    def check_inputs(self, inputs: Mapping[str, Sequence[T]]) -> dict[str, list[T]]:
        """``inputs`` by name, checked against the export's: the same names, the same length
        (else an ``InputDataError``)."""
        if set(inputs) != set(self.inputs) or len({len(v) for v in inputs.values()}) > 1:
            given = ", ".join(f"{name} ({len(v)})" for name, v in inputs.items())
            raise InputDataError(
                f"This {self.title} export takes the inputs {', '.join(self.inputs)}, each as "
                f"long as the others, not {given or 'none'}; pass those inputs."
            )
        return {name: list(inputs[name]) for name in self.inputs}

    def read(self, outputs: Outputs) -> list:
        """The signature's outputs (numpy arrays or lists, strings as ``bytes`` or ``str``)
        as one answer per row."""
        return self.spec.read(outputs)

    def cut(self, outputs: Outputs) -> list[bool] | None:
        """Per row, whether its text was cut at the export's length (a token export: it
        filled all ``L`` positions; a tagger: words past them were tagged ``O`` unscored),
        from the outputs alone; None for a kind whose outputs do not say (a classifier's,
        a regressor's, a QA model's)."""
        return self.spec.cut(outputs, self.length)

    def record(self, answer: Any) -> dict[str, Any]:
        """One answer as JSON fields (floats to 6 decimals), as ``score --json`` and
        ``predict`` write them."""
        return self.spec.record(answer)


def _describe(signatures: Mapping[str, SignatureDict]) -> str:
    shown = [
        f"{name}({', '.join(sig.get('inputs', {}))} -> {', '.join(sig.get('outputs', {}))})"
        for name, sig in sorted(signatures.items())
    ]
    return "the signatures " + ", ".join(shown) if shown else "no signatures"


def export_reader(
    signatures: Mapping[str, SignatureDict], source: str = "The model"
) -> ExportReader:
    """The reader for an export, from its ``signatures`` as a client's ``metadata()`` or
    :func:`saved_model_signatures` gives them; else a :class:`ServingError` naming ``source``
    (``"The export at 'saved_models/x/1'"``) and the signatures it has.

    Examples:
        >>> export_reader({"serving_default": {"inputs": {"x": {}}, "outputs": {"y": {}}}})
        Traceback (most recent call last):
        ...
        keras_electra.serving.errors.ServingError: The model has the signatures
        serving_default(x -> y), none of which keras-electra reads (...); call it with
        GrpcClient or RestClient's predict() instead.
    """
    signature = signatures.get(DEFAULT_SIGNATURE, {})
    inputs, outputs = set(signature.get("inputs", {})), set(signature.get("outputs", {}))
    shape = (signature.get("outputs", {}).get("tokens") or {}).get("shape") or []
    length = shape[1] if len(shape) == 2 and shape[1] > 0 else None  # [-1, L]
    for kind in KINDS:
        layout = next((names for names in kind.layouts if set(names) == inputs), None)
        if layout is not None and set(kind.outputs) <= outputs:
            return ExportReader(kind, layout, length=length)
    raise ServingError(
        f"{source} has {_describe(signatures)}, none of which keras-electra reads (the "
        "replaced-token, sentence-score, classifier, regressor, tagger and QA exports of "
        "`keras-electra export`); call it with GrpcClient or RestClient's predict() instead."
    )


# === Signatures as plain dicts ===


def _tensors(signature: Mapping[str, Any], spec: Callable[[Any], dict]) -> SignatureDict:
    parts = ("inputs", "outputs")
    return {
        part: {k: spec(v) for k, v in sorted(signature.get(part, {}).items())} for part in parts
    }


def signature_defs_to_dict(signature_defs: Mapping[str, Any]) -> dict[str, SignatureDict]:
    """A ``SignatureDefMap``'s ``signature_def`` map in protobuf JSON form (snake_case or
    camelCase keys) as plain dicts, internal signatures (``__...``) left out.

    Examples:
        >>> text = {"dtype": "DT_STRING", "tensor_shape": {"dim": [{"size": "-1"}]}}
        >>> signature_defs_to_dict({"serving_default": {"methodName": "tensorflow/serving/predict",
        ...                                             "inputs": {"text": text}}})
        {'serving_default': {'method_name': 'tensorflow/serving/predict',
        'inputs': {'text': {'dtype': 'DT_STRING', 'shape': [-1]}}, 'outputs': {}}}
    """

    def spec(info: Mapping[str, Any]) -> dict[str, Any]:
        shape = info.get("tensor_shape", info.get("tensorShape", {})) or {}
        unknown_rank = shape.get("unknown_rank", shape.get("unknownRank", False))
        dims = None if unknown_rank else [int(dim.get("size", 0)) for dim in shape.get("dim", [])]
        return {"dtype": info.get("dtype", "DT_INVALID"), "shape": dims}

    return {
        name: {
            "method_name": sig.get("method_name", sig.get("methodName", "")),
            **_tensors(sig, spec),
        }
        for name, sig in sorted(signature_defs.items())
        if not name.startswith("__")
    }


def saved_model_signatures(loaded: Any) -> dict[str, SignatureDict]:
    """A loaded SavedModel's signatures (``tf.saved_model.load(path)``) as a client's
    ``metadata()`` gives a server's, without ``method_name``.

    Examples:
        >>> loaded = tf.saved_model.load("saved_models/sst2/1")  # doctest: +SKIP
        >>> saved_model_signatures(loaded)["serving_default"]["outputs"]["scores"]  # doctest: +SKIP
        {'dtype': 'DT_FLOAT', 'shape': [-1, 2]}
    """
    from tensorflow.core.framework import types_pb2  # loaded is TensorFlow's already

    def spec(tensor: Any) -> dict[str, Any]:
        dims = None if tensor.shape.rank is None else tensor.shape.as_list()
        return {
            "dtype": types_pb2.DataType.Name(tensor.dtype.as_datatype_enum),
            "shape": None if dims is None else [-1 if d is None else d for d in dims],
        }

    result = {}
    for name, function in sorted(loaded.signatures.items()):
        inputs = function.structured_input_signature[1]
        result[name] = _tensors({"inputs": inputs, "outputs": function.structured_outputs}, spec)
    return result
