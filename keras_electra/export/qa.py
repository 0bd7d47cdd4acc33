"""SavedModels of fine-tuned extractive QA models (``qa`` task), for TF Serving 2.21.

Encoding and decoding are :mod:`keras_electra.finetuning.tasks.qa`'s, in the graph (the
windows, the ``N_BEST`` starts and ends, the answer as the span's whitespace words joined by
one space; docs/finetuning.md), but for three rules: the question is also cut to ``L - 4``
pieces, so one context piece fits; at most ``max_windows`` windows (16 by default) are read
per question, the context past them ignored; of equal spans the first window's wins.

Signature ``serving_default``: inputs ``question`` and ``context`` (DT_STRING ``[-1]``)
-> ``answer``, ``answer_start_word``, ``answer_end_word`` (-1 for no answer),
``answer_score`` (of the best span, also when a SQuAD 2.0 model declines to answer; 0 if
the context is empty), ``start_logits``, ``end_logits``, ``tokens`` (each ``[-1, K, L]``
with ``K`` the most windows of any question in the merged batch; at padding and in the
windows past a question's own, the logits are -10000 and the tokens ``""``),
``num_windows`` and, for SQuAD 2.0 models, ``answerable`` (dtypes: docs/finetuning.md).

Examples:
    >>> module = QuestionAnsweringModule(load_finetuned("runs/squad"))  # doctest: +SKIP
    >>> out = module.serve(tf.constant(["Who?"]), tf.constant(["Ann met Bob."]))  # doctest: +SKIP
    >>> out["answer"]  # doctest: +SKIP
    <tf.Tensor: shape=(1,), dtype=string, numpy=array([b'Ann'], dtype=object)>
"""

from __future__ import annotations

import tensorflow as tf

from keras_electra.encoding import token_column
from keras_electra.export.saved_model import FinetunedModule
from keras_electra.export.words import split_words
from keras_electra.finetuning.saved import FinetunedModel
from keras_electra.finetuning.tasks.base import piece_ids
from keras_electra.finetuning.tasks.qa import N_BEST
from keras_electra.limits import QA_PADDING_LOGIT

MAX_WINDOWS = 16
"""Windows read per question by default; longer contexts are cut."""

WARMUP_PAIRS = (
    ("Who wrote the play?", "The play was written by William Shakespeare in 1600."),
    ("", ""),
    ("Wo ist das Ünïcödé? 🙂", "Ünïcödé steht hier 中文 und emoji 🙂."),
)
PADDING_LOGIT = QA_PADDING_LOGIT


class QuestionAnsweringModule(FinetunedModule):
    """A fine-tuned span extractor with its tokenizer, as a TF Serving signature.

    Args:
        finetuned: the loaded ``qa`` model (see
            :func:`keras_electra.finetuning.load_finetuned`).
        max_length: the fixed sequence length ``L`` (default: the fine-tuning one).
        max_windows: the most context windows read per question.

    Examples:
        >>> module = QuestionAnsweringModule(load_finetuned("runs/squad"))  # doctest: +SKIP
        >>> sorted(module.serve(tf.constant(["Who?"]), tf.constant(["Ann."])))  # doctest: +SKIP
        ['answer', 'answer_end_word', 'answer_score', 'answer_start_word', 'end_logits', ...]
    """

    def __init__(
        self,
        finetuned: FinetunedModel,
        max_length: int | None = None,
        max_windows: int = MAX_WINDOWS,
    ):
        super().__init__("electra_question_answering", finetuned, max_length)
        settings = finetuned.settings
        self.max_query_length = min(settings.max_query_length, self.max_length - 4)
        self.doc_stride = settings.doc_stride or 0  # 0: half of each window's room
        self.max_answer_length = settings.max_answer_length
        self.version_2 = settings.version_2
        self.max_windows = max(1, int(max_windows))
        self.serve = self.signature(self._serve, "question", "context")

    def _windows(self, question, context) -> dict[str, tf.Tensor]:
        """Every window of every question as model inputs, with where its context sits."""
        length, tokenizer = self.max_length, self.tokenizer
        query = tokenizer.tokenize(tf.reshape(question, [-1]))[:, : self.max_query_length]
        query_len = tf.cast(query.row_lengths(), tf.int32)
        words = split_words(context)
        pieces = piece_ids(tokenizer, words.flat_values)
        doc_splits = tf.cast(tf.gather(pieces.row_splits, words.row_splits), tf.int32)
        num_pieces = doc_splits[1:] - doc_splits[:-1]
        # As finetuning.tasks.qa.windows: full windows `step` apart (window_step: the stride
        # when it is below the room, else half the room), then the last partial one.
        room = length - 3 - query_len
        step = tf.maximum(room // 2, 1)
        if self.doc_stride > 0:
            step = tf.where(self.doc_stride < room, self.doc_stride, step)
        needed = tf.where(num_pieces <= room, 1, 1 + (num_pieces - room + step - 1) // step)
        count = tf.minimum(needed, self.max_windows)
        windows = tf.ragged.range(count)
        example = tf.cast(windows.value_rowids(), tf.int32)
        start = windows.flat_values * tf.gather(step, example)
        size = tf.maximum(
            tf.minimum(tf.gather(room, example), tf.gather(num_pieces, example) - start), 0
        )
        first_piece = tf.gather(doc_splits, example) + start  # into pieces.flat_values
        body = tf.gather(pieces.flat_values, tf.ragged.range(first_piece, first_piece + size))

        rows = tf.shape(example)[0]
        cls, sep = token_column(rows, tokenizer.cls_id), token_column(rows, tokenizer.sep_id)
        ids = tf.concat([cls, tf.gather(query, example), sep, body, sep], axis=1)
        offset = tf.gather(query_len, example) + 2
        padding_mask = tf.sequence_mask(offset + size + 1, length, dtype=tf.int32)
        inputs = {
            "token_ids": ids.to_tensor(default_value=tokenizer.pad_id, shape=[None, length]),
            "segment_ids": padding_mask - tf.sequence_mask(offset, length, dtype=tf.int32),
            "padding_mask": padding_mask,
        }
        return {
            "inputs": inputs,
            "windows": windows,
            "example": example,
            "offset": offset,
            "size": size,
            "first_piece": first_piece,
            "cut": needed > self.max_windows,  # windows past max_windows not read
            "words": words,
            # Word (index into words.flat_values) of each piece, and a 0 for "no piece".
            "piece_word": tf.concat([tf.cast(pieces.value_rowids(), tf.int32), [0]], 0),
        }

    def _best_spans(self, start_logits, end_logits, offset, size):
        """Per window: the best span's score (-inf if none) and its first and last position."""
        position = tf.range(self.max_length)[None, :]
        context = (position >= offset[:, None]) & (position < (offset + size)[:, None])
        k = min(N_BEST, self.max_length)
        minus_inf = tf.constant(float("-inf"))
        start_top, start_at = tf.math.top_k(tf.where(context, start_logits, minus_inf), k)
        end_top, end_at = tf.math.top_k(tf.where(context, end_logits, minus_inf), k)
        span = end_at[:, None, :] - start_at[:, :, None] + 1
        valid = (
            tf.gather(context, start_at, batch_dims=1)[:, :, None]
            & tf.gather(context, end_at, batch_dims=1)[:, None, :]
            & (span >= 1)
            & (span <= self.max_answer_length)
        )
        scores = tf.where(valid, start_top[:, :, None] + end_top[:, None, :], minus_inf)
        scores = tf.reshape(scores, [-1, k * k])
        best = tf.argmax(scores, axis=-1, output_type=tf.int32)  # the first of equal scores
        first = tf.gather(start_at, best // k, batch_dims=1)
        last = tf.gather(end_at, best % k, batch_dims=1)
        return tf.reduce_max(scores, axis=-1), first, last

    def _serve(self, question, context):
        self.check_same_length(question, context, "question and context")
        w = self._windows(question, context)
        out = self.model(w["inputs"], training=False)
        start_logits = tf.cast(out["start_logits"], tf.float32)
        end_logits = tf.cast(out["end_logits"], tf.float32)
        score, first, last = self._best_spans(start_logits, end_logits, w["offset"], w["size"])

        windows, words = w["windows"], w["words"]

        def per_question(values: tf.Tensor, default) -> tf.Tensor:
            return tf.RaggedTensor.from_row_splits(values, windows.row_splits).to_tensor(default)

        # A trailing -inf column changes no question's choice (argmax takes the first of equal
        # scores) and keeps the axis non-empty for a batch of no questions.
        window_scores = tf.pad(
            per_question(score, float("-inf")), [[0, 0], [0, 1]], constant_values=float("-inf")
        )
        best_window = tf.argmax(window_scores, axis=-1, output_type=tf.int32)
        row = tf.cast(windows.row_starts(), tf.int32) + best_window
        best_score = tf.gather(score, row)
        has_span = best_score > float("-inf")

        def word_of(position: tf.Tensor) -> tf.Tensor:
            piece = tf.gather(w["first_piece"], row) + position - tf.gather(w["offset"], row)
            piece = tf.where(has_span, piece, tf.shape(w["piece_word"])[0] - 1)
            return tf.gather(w["piece_word"], piece)  # an index into words.flat_values

        first_word, last_word = word_of(tf.gather(first, row)), word_of(tf.gather(last, row))
        answered = has_span
        if self.version_2:
            answerable = tf.math.unsorted_segment_max(
                tf.cast(out["answerable"], tf.float32), w["example"], windows.nrows()
            )
            answered &= answerable > 0.0
        last_word = tf.where(answered, last_word, first_word - 1)
        text = tf.strings.reduce_join(
            tf.gather(words.flat_values, tf.ragged.range(first_word, last_word + 1)),
            axis=1,
            separator=" ",
        )
        sentence_start = tf.cast(words.row_starts(), tf.int32)
        tokens = self.tokenizer.detokenize_ids(w["inputs"]["token_ids"])
        tokens = tf.where(tf.cast(w["inputs"]["padding_mask"], tf.bool), tokens, "")
        outputs = {
            "answer": text,
            "answer_start_word": tf.where(answered, first_word - sentence_start, -1),
            "answer_end_word": tf.where(answered, last_word - sentence_start, -1),
            "answer_score": tf.where(has_span, best_score, 0.0),
            "start_logits": per_question(start_logits, PADDING_LOGIT),
            "end_logits": per_question(end_logits, PADDING_LOGIT),
            "tokens": per_question(tokens, ""),
            "num_windows": tf.cast(windows.row_lengths(), tf.int32),
            "context_cut": w["cut"],
        }
        if self.version_2:
            outputs["answerable"] = answerable
        return outputs

    def warmup_feeds(self) -> dict[str, list[str]]:
        questions, contexts = (list(texts) for texts in zip(*WARMUP_PAIRS, strict=True))
        return {"question": questions, "context": contexts}
