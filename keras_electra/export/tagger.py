"""SavedModels of fine-tuned taggers (``tag`` task), for TF Serving 2.21.

The text is split into words on whitespace (as Python's ``str.split()``), each
word into word pieces (``[UNK]`` if it yields none) and packed exactly as
:func:`keras_electra.finetuning.tasks.tagging.align_words` packs a sentence:
``[CLS] pieces... [SEP]`` with words kept while their pieces fit in ``L``
(later words are cut). A word's tag is read at its first word piece.

Signature ``serving_default``: input ``text`` (DT_STRING ``[-1]``, whitespace-separated
words) -> ``tag_probs``, ``tags``, ``words``, ``word_mask``, ``num_words`` and ``tag_names``
(shapes, dtypes and padding: docs/finetuning.md; ``W``, the words of the longest text, is
the merged batch's when TF Serving batches requests).

Examples:
    >>> module = TextTaggerModule(load_finetuned("runs/ner"))  # doctest: +SKIP
    >>> module.serve(tf.constant(["John lives in London"]))["tags"]  # doctest: +SKIP
    <tf.Tensor: shape=(1, 4), dtype=string, numpy=array([[b'B-PER', b'O', b'O', b'B-LOC']])>
"""

from __future__ import annotations

import tensorflow as tf

from keras_electra.encoding import token_column
from keras_electra.export.saved_model import FinetunedModule
from keras_electra.export.words import split_words
from keras_electra.finetuning.saved import FinetunedModel
from keras_electra.finetuning.tasks.base import piece_ids

WARMUP_TEXTS = ("John lives in London .", "", "Ünïcödé and emoji 🙂 words")


class TextTaggerModule(FinetunedModule):
    """A fine-tuned tagger with its tokenizer, as a TF Serving ``serving_default`` signature.

    Args:
        finetuned: the loaded ``tag`` model (see
            :func:`keras_electra.finetuning.load_finetuned`).
        max_length: the fixed sequence length ``L`` (default: the fine-tuning one).

    Examples:
        >>> module = TextTaggerModule(load_finetuned("runs/ner"))  # doctest: +SKIP
        >>> module.serve(tf.constant(["John lives"]))["tag_probs"].shape  # doctest: +SKIP
        TensorShape([1, 2, 3])
    """

    def __init__(self, finetuned: FinetunedModel, max_length: int | None = None):
        super().__init__("electra_tagger", finetuned, max_length)
        self.tag_names = tf.constant(list(finetuned.settings.labels), tf.string)
        self.serve = self.signature(self._tag, "text")

    def _tag(self, text):
        length = self.max_length
        words = split_words(text)
        sentence = words.value_rowids()
        batch = words.nrows()
        pieces = piece_ids(self.tokenizer, words.flat_values)
        sizes = tf.cast(pieces.row_lengths(), tf.int32)
        # Pieces up to and including each word, counted from its sentence's first word.
        ends = tf.cumsum(sizes)
        before = tf.gather(tf.concat([[0], ends], 0), tf.cast(words.row_starts(), tf.int32))
        ends -= tf.gather(before, sentence)
        kept = ends <= length - 2  # room for [CLS] and [SEP]; a prefix of each sentence
        first = ends - sizes + 1  # position of the first piece, after [CLS]

        kept_sizes = tf.math.unsorted_segment_sum(tf.where(kept, sizes, 0), sentence, batch)
        body = tf.RaggedTensor.from_row_lengths(
            tf.ragged.boolean_mask(pieces, kept).flat_values, tf.cast(kept_sizes, tf.int64)
        )
        cls_id, sep_id = self.tokenizer.cls_id, self.tokenizer.sep_id
        ids = tf.concat([token_column(batch, cls_id), body, token_column(batch, sep_id)], 1)
        token_ids = ids.to_tensor(default_value=self.tokenizer.pad_id, shape=[None, length])
        padding_mask = tf.sequence_mask(kept_sizes + 2, length, dtype=tf.int32)
        inputs = {
            "token_ids": token_ids,
            "segment_ids": tf.zeros_like(padding_mask),
            "padding_mask": padding_mask,
        }
        probs = tf.nn.softmax(tf.cast(self.model(inputs, training=False), tf.float32), axis=-1)

        def per_word(values: tf.Tensor, default) -> tf.Tensor:
            return tf.RaggedTensor.from_row_splits(values, words.row_splits).to_tensor(default)

        scored = per_word(kept, False)
        present = per_word(tf.ones_like(kept), False)
        positions = tf.where(scored, per_word(first, 0), 0)
        mask = tf.cast(scored, tf.float32)[..., None]
        tag_probs = tf.gather(probs, positions, batch_dims=1) * mask
        best = tf.gather(self.tag_names, tf.argmax(tag_probs, axis=-1, output_type=tf.int32))
        tags = tf.where(scored, best, tf.where(present, tf.constant("O"), tf.constant("")))
        return {
            "tag_probs": tag_probs,
            "tags": tags,
            "words": words.to_tensor(""),
            "word_mask": tf.cast(scored, tf.int32),
            "num_words": tf.cast(words.row_lengths(), tf.int32),
            "tag_names": tf.tile(self.tag_names[None, :], [batch, 1]),
        }

    def warmup_feeds(self) -> dict[str, list[str]]:
        return {"text": list(WARMUP_TEXTS)}
