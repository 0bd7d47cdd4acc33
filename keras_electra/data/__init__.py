"""Data layer: vocabularies, the WordPiece tokenizer, and pretraining input pipelines.

Examples:
    >>> from keras_electra.data import ElectraTokenizer, learn_vocab, pretraining_dataset
    >>> vocab = learn_vocab(["data/sample/shakespeare.txt"], vocab_size=8000)  # doctest: +SKIP
    >>> tokenizer = ElectraTokenizer(vocab)  # doctest: +SKIP
    >>> ds = pretraining_dataset(["data/sample/shakespeare.txt"], tokenizer,
    ...                          batch_size=32, max_seq_length=128)  # doctest: +SKIP
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

# The names below, each from its submodule, imported when first used: a submodule that
# needs no TensorFlow (files: the corpus paths the command checks before it loads
# TensorFlow) imports without it.
_SUBMODULE = {
    "check_corpus_has_text": "files",
    "resolve_corpus_files": "files",
    "fit_options": "pretraining",
    "pretraining_dataset": "pretraining",
    "MAX_LINE_CHARS": "pretraining",
    "corpus_stats": "pretraining",
    "line_dataset": "pretraining",
    "pack_examples": "pretraining",
    "pretraining_examples": "pretraining",
    "tokenize_lines": "pretraining",
    "is_tfrecord_input": "tfrecords",
    "resolve_tfrecord_files": "tfrecords",
    "write_pretraining_tfrecords": "tfrecords",
    "ElectraTokenizer": "tokenizer",
    "SPECIAL_TOKENS": "vocab",
    "count_words": "vocab",
    "learn_vocab": "vocab",
    "load_vocab": "vocab",
    "save_vocab": "vocab",
    "validate_vocab": "vocab",
}

if TYPE_CHECKING:  # what the names are, for readers and type checkers
    from keras_electra.data.files import check_corpus_has_text, resolve_corpus_files
    from keras_electra.data.pretraining import (
        MAX_LINE_CHARS,
        corpus_stats,
        fit_options,
        line_dataset,
        pack_examples,
        pretraining_dataset,
        pretraining_examples,
        tokenize_lines,
    )
    from keras_electra.data.tfrecords import (
        is_tfrecord_input,
        resolve_tfrecord_files,
        write_pretraining_tfrecords,
    )
    from keras_electra.data.tokenizer import ElectraTokenizer
    from keras_electra.data.vocab import (
        SPECIAL_TOKENS,
        count_words,
        learn_vocab,
        load_vocab,
        save_vocab,
        validate_vocab,
    )


def __getattr__(name: str):
    if name not in _SUBMODULE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{_SUBMODULE[name]}"), name)
    globals()[name] = value
    return value


__all__ = [
    "MAX_LINE_CHARS",
    "SPECIAL_TOKENS",
    "ElectraTokenizer",
    "check_corpus_has_text",
    "corpus_stats",
    "count_words",
    "fit_options",
    "is_tfrecord_input",
    "learn_vocab",
    "line_dataset",
    "load_vocab",
    "pack_examples",
    "pretraining_dataset",
    "pretraining_examples",
    "resolve_corpus_files",
    "resolve_tfrecord_files",
    "save_vocab",
    "tokenize_lines",
    "validate_vocab",
    "write_pretraining_tfrecords",
]


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
