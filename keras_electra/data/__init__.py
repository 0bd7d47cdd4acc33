"""Data layer: vocabularies, the WordPiece tokenizer, and pretraining input pipelines.

Examples:
    >>> from keras_electra.data import ElectraTokenizer, learn_vocab, pretraining_dataset
    >>> vocab = learn_vocab(["data/sample/shakespeare.txt"], vocab_size=8000)  # doctest: +SKIP
    >>> tokenizer = ElectraTokenizer(vocab)  # doctest: +SKIP
    >>> ds = pretraining_dataset(["data/sample/shakespeare.txt"], tokenizer,
    ...                          batch_size=32, max_seq_length=128)  # doctest: +SKIP
"""

from keras_electra.data.files import check_corpus_has_text, resolve_corpus_files
from keras_electra.data.pipeline import fit_options, pretraining_dataset
from keras_electra.data.pretraining import (
    MAX_LINE_CHARS,
    corpus_stats,
    line_dataset,
    pack_examples,
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
