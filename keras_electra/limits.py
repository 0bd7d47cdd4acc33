"""How much one request may hold: the bounds every text entry point keeps, and the split.

``score``, the clients and ``predict`` take any number of texts of any length; a model gets
at most :data:`MAX_BATCH_SIZE` of them per call (larger batches run in consecutive chunks,
their outputs joined in order), each cut to :data:`MAX_TEXT_CHARS` characters as the
export's encoder cuts it, so the result is unchanged. Plain Python and numpy: the REST
client imports this without TensorFlow.

Examples:
    >>> [len(part["text"]) for part in split_inputs({"text": ["a"] * 70}, 32)]
    [32, 32, 6]
    >>> len(cap_text("x" * (MAX_TEXT_CHARS + 5))) == MAX_TEXT_CHARS
    True
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from keras_electra.errors import ConfigError, InputDataError

MAX_BATCH_SIZE = 32
"""Most texts sent to a model at once: ``max_batch_size`` of ``serving/batching.config``
(``tests/test_serving_clients.py`` checks that the two agree)."""

MAX_TEXT_CHARS = 100_000
"""Longest text a model reads, in characters; longer texts are cut (bytes: 4 per character),
as the corpus reader cuts lines (``data.files.MAX_LINE_CHARS``)."""

TEXT_INPUTS = ("text", "text_a", "text_b", "question", "context")
"""The exports' text inputs (``serving_default``, ``score_pair``, a QA export's) and
Classify features."""


def batch_slices(total: int, size: int | None) -> list[slice]:
    """Consecutive slices of at most ``size`` rows covering ``range(total)`` in order
    (one slice when ``size`` is None or 0).

    Examples:
        >>> batch_slices(5, 2)
        [slice(0, 2, None), slice(2, 4, None), slice(4, 5, None)]
        >>> batch_slices(0, 2)
        [slice(0, 0, None)]
    """
    if not size or total <= size:
        return [slice(0, total)]
    return [slice(start, min(start + size, total)) for start in range(0, total, size)]


def cap_text(value: Any) -> Any:
    """``value`` cut as the export cuts it: a ``str`` to :data:`MAX_TEXT_CHARS` characters,
    ``bytes`` to four bytes per character (the export cuts bytes there first, then
    characters); anything else unchanged.

    Examples:
        >>> cap_text(b"abc"), cap_text(7)
        (b'abc', 7)
    """
    if isinstance(value, str):
        return value[:MAX_TEXT_CHARS]
    if isinstance(value, bytes | np.bytes_):
        return bytes(value[: 4 * MAX_TEXT_CHARS])
    return value


def cap_texts(inputs: Mapping[str, Any]) -> dict[str, Any]:
    """``inputs`` with every string of a :data:`TEXT_INPUTS` input cut by :func:`cap_text`
    (a list, tuple or 1-D array of strings, or one string); other inputs as they are. An
    empty text input becomes an empty string array (numpy would make it float64, which a
    string input refuses).

    Examples:
        >>> capped = cap_texts({"text": ["x" * (MAX_TEXT_CHARS + 1)], "n": [1]})
        >>> len(capped["text"][0]), capped["n"]
        (100000, [1])
    """
    out = dict(inputs)
    for name in TEXT_INPUTS:
        value = out.get(name)
        if isinstance(value, str | bytes):
            out[name] = cap_text(value)
        elif isinstance(value, list | tuple) or (
            isinstance(value, np.ndarray) and value.ndim == 1 and value.dtype.kind in "OSU"
        ):
            out[name] = [cap_text(item) for item in value] or np.array([], dtype=object)
    return out


def _rows(value: Any) -> int | None:
    """The leading (batch) size of an input, or None for a scalar."""
    if isinstance(value, str | bytes):
        return None
    if isinstance(value, np.ndarray):
        return value.shape[0] if value.ndim else None
    if isinstance(value, Sequence):
        return len(value)
    return None


def split_inputs(inputs: Mapping[str, Any], size: int | None) -> list[dict[str, Any]]:
    """``inputs`` as consecutive chunks of at most ``size`` rows, in order; one chunk when
    ``size`` is None or 0, the batch no larger, or the inputs of no one batch size (the
    server then says what is wrong with the request).

    Examples:
        >>> split_inputs({"a": [1, 2, 3], "b": ["x", "y", "z"]}, 2)
        [{'a': [1, 2], 'b': ['x', 'y']}, {'a': [3], 'b': ['z']}]
        >>> split_inputs({"a": [1, 2, 3], "b": 5}, 2)
        [{'a': [1, 2, 3], 'b': 5}]
    """
    sizes = {_rows(value) for value in inputs.values()}
    if len(sizes) != 1 or None in sizes:
        return [dict(inputs)]
    (total,) = sizes
    return [
        {name: value[part] for name, value in inputs.items()} for part in batch_slices(total, size)
    ]


QA_PADDING_LOGIT = -10000.0
"""A question-answering export's start and end logits past a question's windows (a
padding window's), which no answer takes; zeros would beat a real window's negative ones."""

_PADDING = {"start_logits": QA_PADDING_LOGIT, "end_logits": QA_PADDING_LOGIT}


def _fill(name: str, dtype: np.dtype) -> Any:
    if name in _PADDING:
        return _PADDING[name]
    return b"" if dtype.kind == "O" else np.zeros((), dtype)[()]


def join_outputs(parts: Sequence[Mapping[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """The outputs of consecutive chunks as one batch, concatenated along the first axis;
    where the other axes differ, shorter rows are padded as one batch would be: with
    zeros (empty strings), the QA logits with :data:`QA_PADDING_LOGIT`. A scalar output
    is the first chunk's.

    Examples:
        >>> joined = join_outputs([{"p": np.ones((2, 3))}, {"p": np.ones((1, 4))}])
        >>> joined["p"].shape, float(joined["p"][0, 3])
        ((3, 4), 0.0)
    """
    if len(parts) == 1:
        return dict(parts[0])
    joined = {}
    for name in parts[0]:
        arrays = [np.asarray(part[name]) for part in parts]
        if any(array.ndim == 0 for array in arrays):
            joined[name] = arrays[0]
            continue
        width = tuple(max(sizes) for sizes in zip(*(a.shape[1:] for a in arrays), strict=True))
        padded = []
        for array in arrays:
            if array.shape[1:] != width:
                full = np.full((array.shape[0], *width), _fill(name, array.dtype), array.dtype)
                full[tuple(slice(0, n) for n in array.shape)] = array
                array = full
            padded.append(array)
        joined[name] = np.concatenate(padded, axis=0)
    return joined


def check_length(length: int | None, positions: int) -> None:
    """Raise :class:`~keras_electra.errors.ConfigError` when sequences of ``length`` tokens
    (None: not known while tracing) are longer than a position table of ``positions``."""
    if length is not None and length > positions:
        raise ConfigError(too_long(positions, length))


def too_long(positions: int, length: int | None = None) -> str:
    """The sentence for sequences (of ``length`` tokens, where known) longer than a
    position table of ``positions``."""
    said = "Sequences are" if length is None else f"Sequences of {length} tokens are"
    return (
        f"{said} longer than the model's position table ({positions} positions); cut them "
        f"to at most {positions} tokens (max_seq_length or max_length), or use a model with "
        "a longer table."
    )


PAST_VOCABULARY = "keras_electra: token id outside the vocabulary of the model"
"""The first word of the input pipeline's assertion (:func:`vocabulary_error` reads it)."""

_OUT_OF_TABLE = (
    re.compile(r"indices\[[\d,]*\] = (-?\d+) is not in \[0, (\d+)\)"),  # an embedding lookup
    re.compile(re.escape(PAST_VOCABULARY) + r"\] \[(-?\d+)\] \[(\d+)\]"),  # the assertion
)


def vocabulary_error(message: str, vocab_size: int) -> InputDataError | None:
    """One sentence for TensorFlow's message when a token id falls outside the model's
    embedding table of ``vocab_size`` rows (the data was tokenized with a larger
    vocabulary than the model's), or None for any other message.

    Examples:
        >>> print(vocabulary_error("indices[0,1] = 607 is not in [0, 300)", 300))
        Token id 607 is outside the model's vocabulary of 300 tokens (config.vocab_size): \
the data was tokenized with a larger vocabulary; build the model with \
vocab_size=len(tokenizer.vocab), or tokenize with the model's own vocab.txt.
        >>> vocabulary_error("indices[0] = 7 is not in [0, 5)", 300) is None
        True
    """
    for pattern in _OUT_OF_TABLE:
        found = pattern.search(message)
        if found is not None and int(found.group(2)) == vocab_size:
            return InputDataError(
                f"Token id {found.group(1)} is outside the model's vocabulary of {vocab_size} "
                "tokens (config.vocab_size): the data was tokenized with a larger vocabulary; "
                "build the model with vocab_size=len(tokenizer.vocab), or tokenize with the "
                "model's own vocab.txt."
            )
    return None


def has_text(text: str | bytes) -> bool:
    """Whether ``text`` has a character the tokenizer keeps: not only whitespace, control,
    format characters or combining marks (a zero-width space, or accents alone, which the
    lower-casing tokenizer strips, gave no word piece and a sentence score of 0, the most
    plausible there is)."""
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    return any(unicodedata.category(c) not in _DROPPED for c in text)


_DROPPED = {"Cc", "Cf", "Zs", "Zl", "Zp", "Mn"}
