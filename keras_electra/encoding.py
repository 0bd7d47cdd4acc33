"""Raw strings to fixed-length model inputs, in the TensorFlow graph.

Used for scoring in process, for fine-tuning inputs and inside exported
SavedModels, so a sentence is encoded the same way everywhere:
``[CLS] A [SEP]`` or ``[CLS] A [SEP] B [SEP]``, truncated to ``max_length``
(longest segment first for pairs), padded with ``[PAD]`` to exactly
``max_length``. Each text is first cut to :data:`keras_electra.limits.MAX_TEXT_CHARS`
characters (as the corpus reader cuts a line), so one request's text cannot take the
server's memory; the clients cut the same before sending. Only dense and ragged core
ops are used (no trimmer ops), so TF Serving runs the result.
"""

from __future__ import annotations

import tensorflow as tf

from keras_electra.data.files import clean_lines
from keras_electra.data.tokenizer import ElectraTokenizer


def encode_texts(
    tokenizer: ElectraTokenizer,
    text_a: tf.Tensor,
    text_b: tf.Tensor | None = None,
    *,
    max_length: int,
) -> dict[str, tf.Tensor]:
    """Tokenize and pack strings into ``token_ids``/``segment_ids``/``padding_mask``.

    Args:
        tokenizer: the run's tokenizer.
        text_a: string tensor ``[N]``.
        text_b: optional string tensor ``[N]``: the second segment of each pair.
        max_length: the fixed output length ``L`` (at least 3, 4 for pairs).

    Returns:
        int32 ``[N, L]`` tensors ``token_ids``, ``segment_ids`` and ``padding_mask``.

    Examples:
        >>> vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "hi", "there"]
        >>> t = ElectraTokenizer(vocab)
        >>> encode_texts(t, tf.constant(["hi there"]), max_length=6)["token_ids"].numpy().tolist()
        [[2, 5, 6, 3, 0, 0]]
    """
    pieces_a = tokenizer.tokenize(clean_lines(tf.reshape(text_a, [-1])))
    n = pieces_a.nrows()
    len_a = pieces_a.row_lengths()
    if text_b is None:
        keep_a = tf.minimum(len_a, max_length - 2)
    else:
        pieces_b = tokenizer.tokenize(clean_lines(tf.reshape(text_b, [-1])))
        keep_a, keep_b = _truncate_longest_first(len_a, pieces_b.row_lengths(), max_length - 3)

    def first(pieces: tf.RaggedTensor, keep: tf.Tensor) -> tf.RaggedTensor:
        return tf.ragged.boolean_mask(pieces, tf.ragged.range(pieces.row_lengths()) < keep[:, None])

    cls, sep = token_column(n, tokenizer.cls_id), token_column(n, tokenizer.sep_id)
    parts = [cls, first(pieces_a, keep_a), sep]
    total = keep_a + 2  # [CLS] A [SEP]
    if text_b is not None:
        parts += [first(pieces_b, keep_b), sep]
        total += keep_b + 1
    ids = tf.concat(parts, axis=1)
    token_ids = ids.to_tensor(default_value=tokenizer.pad_id, shape=[None, max_length])
    padding_mask = tf.sequence_mask(total, max_length, dtype=tf.int32)
    segment_ids = padding_mask - tf.sequence_mask(keep_a + 2, max_length, dtype=tf.int32)
    return {"token_ids": token_ids, "segment_ids": segment_ids, "padding_mask": padding_mask}


def token_column(rows: tf.Tensor, token_id: int) -> tf.RaggedTensor:
    """A ragged ``[rows, 1]`` int32 column of ``token_id`` (``[CLS]`` or ``[SEP]``)."""
    return tf.RaggedTensor.from_tensor(tf.fill([rows, 1], tf.constant(token_id, tf.int32)))


def _truncate_longest_first(len_a: tf.Tensor, len_b: tf.Tensor, budget: int):
    """How many pieces of each segment to keep so both fit in ``budget``.

    The longer segment is cut first; when both must be cut they share the budget
    evenly (the first segment gets the odd piece).
    """
    half_b = budget // 2
    half_a = budget - half_b
    fits = len_a + len_b <= budget
    keep_a = tf.where(
        fits, len_a, tf.where(len_b <= half_b, budget - len_b, tf.minimum(len_a, half_a))
    )
    keep_b = tf.where(fits, len_b, tf.minimum(len_b, budget - keep_a))
    return keep_a, keep_b
