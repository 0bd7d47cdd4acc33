"""Whitespace words, in the TensorFlow graph.

Tagging and QA read text as whitespace-separated words (Python's ``str.split``:
:func:`keras_electra.finetuning.readers.read_conll`,
:func:`keras_electra.finetuning.tasks.qa.whitespace_words`) and tokenize each word on
its own (:func:`keras_electra.finetuning.tasks.base.piece_ids`, in the graph too).
:func:`split_words` does the same with core ops TF Serving runs (``UnicodeTranscode``,
``RegexReplace``, ``StringSplitV2``), so exported tagger and QA models see the words and
pieces the Keras model was trained on.

Examples:
    >>> split_words(tf.constant(["a  b\\u3000c", ""])).to_list()
    [[b'a', b'b', b'c'], []]
"""

from __future__ import annotations

import tensorflow as tf

# Every character Python's str.isspace() accepts, as an RE2 class (RE2's \s is ASCII only).
PYTHON_WHITESPACE = (
    r"[\s\x{0b}\x{1c}-\x{1f}\x{85}\x{a0}\x{1680}\x{2000}-\x{200a}"
    r"\x{2028}\x{2029}\x{202f}\x{205f}\x{3000}]+"
)


def split_words(text: tf.Tensor) -> tf.RaggedTensor:
    """Split strings on whitespace exactly like Python's ``str.split()``.

    Invalid UTF-8 bytes become U+FFFD first (as the tokenizer does).

    Args:
        text: string tensor ``[N]``.

    Returns:
        A string ``tf.RaggedTensor`` ``[N, None]`` of words.

    Examples:
        >>> split_words(tf.constant(["x\\ty z"])).to_list()
        [[b'x', b'y', b'z']]
    """
    text = tf.strings.unicode_transcode(
        tf.reshape(text, [-1]), "UTF-8", "UTF-8", errors="replace", replacement_char=0xFFFD
    )
    return tf.strings.split(tf.strings.regex_replace(text, PYTHON_WHITESPACE, " "))
