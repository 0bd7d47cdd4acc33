"""Extractive question answering in SQuAD 1.1 / 2.0 form (decoding: docs/finetuning.md).

Contexts are split into whitespace words, each into word pieces, and read in overlapping
windows ``[CLS] question [SEP] window [SEP]`` that start ``doc_stride`` pieces apart (by
default half the window's room: :func:`window_step`). A window that does not hold the
whole answer points start and end at ``[CLS]`` (SQuAD 2.0: answerability 0); an answer
no longer than the windows' overlap lies whole in at least one window.

Examples:
    >>> words, char_to_word = whitespace_words("The cat  sat.")
    >>> words, char_to_word[5]
    (['The', 'cat', 'sat.'], 1)
"""

from __future__ import annotations

import bisect
import re

import keras
import numpy as np
import tensorflow as tf

from keras_electra.errors import ConfigError
from keras_electra.finetuning import metrics
from keras_electra.finetuning.models import ElectraSpanExtractor
from keras_electra.finetuning.readers import QAExample, read_squad
from keras_electra.finetuning.tasks.base import Task, pack, word_pieces

N_BEST = 20


def whitespace_words(text: str) -> tuple[list[str], list[int]]:
    """Words of ``text`` split on whitespace, and the word index of every character."""
    starts = [match.start() for match in re.finditer(r"\S+", text)]
    # A space belongs to the word before it (the first word, before any word).
    return text.split(), [max(0, bisect.bisect_right(starts, i) - 1) for i in range(len(text))]


def window_step(room: int, stride: int | None) -> int:
    """Pieces between the starts of neighbouring windows of ``room`` context pieces:
    ``stride`` when it is below ``room`` (so windows overlap), else half the room.

    An unset ``--doc-stride`` (None) steps half the room. So does a stride not below the
    room, which would leave no overlap (an answer across a window boundary would lie in
    no window): a model fine-tuned before 0.3.0 recorded 128, and an export may be
    shorter than its fine-tuning. The windows overlap by ``room - step`` pieces, and every
    answer no longer than that lies whole in one of them.

    Examples:
        >>> window_step(61, None), window_step(61, 128), window_step(61, 16)
        (30, 30, 16)
    """
    if stride is not None and 0 < stride < room:
        return stride
    return max(1, room // 2)


def windows(num_pieces: int, room: int, stride: int | None = None) -> list[tuple[int, int]]:
    """``(start, length)`` of overlapping windows of up to ``room`` pieces covering
    ``num_pieces`` pieces, :func:`window_step` apart.

    Examples:
        >>> windows(10, 4, 3)
        [(0, 4), (3, 4), (6, 4)]
        >>> windows(10, 4)
        [(0, 4), (2, 4), (4, 4), (6, 4)]
    """
    step = window_step(room, stride)
    spans, start = [], 0
    while True:
        length = min(room, num_pieces - start)
        spans.append((start, length))
        if start + length >= num_pieces:
            return spans
        start += step


class QATask(Task):
    FROM_PYTHON = '(question, context) pairs or dicts such as {"question": ..., "context": ...}'

    def example(self, value, number, settings):
        if isinstance(value, QAExample):
            return value
        if isinstance(value, dict) and {"question", "context"} <= value.keys():
            value = (value["question"], value["context"])
        if isinstance(value, tuple | list) and len(value) == 2:
            return QAExample(str(number), str(value[0]), str(value[1]))
        return super().example(value, number, settings)

    """Extractive QA on SQuAD JSON; metrics: exact match and F1 (percent)."""

    name = "qa"

    def read(self, path, settings, *, labelled=True) -> list[QAExample]:
        examples = read_squad(path, require_answers=labelled)
        unanswerable = sum(e.is_impossible for e in examples) if labelled else 0
        if unanswerable and not settings.version_2:
            raise ConfigError(
                f"{path} has {unanswerable} unanswerable question"
                f"{'s' if unanswerable > 1 else ''} (is_impossible: SQuAD 2.0); pass "
                "--squad-v2 to train a model that can decline to answer, or remove them."
            )
        return examples

    def encode(self, examples, tokenizer, settings, *, labelled=True):
        length = settings.max_seq_length
        questions = tokenizer.tokenize(tf.constant([e.question for e in examples])).to_list()
        contexts = [whitespace_words(e.context) for e in examples]
        pieces = word_pieces(tokenizer, [w for words, _ in contexts for w in words])
        rows: dict[str, list] = {k: [] for k in ("ids", "segments", "start", "end", "answerable")}
        features = []  # (example index, offset of the window in the row, window start, length)
        k = 0
        for i, (example, (words, char_to_word)) in enumerate(zip(examples, contexts, strict=True)):
            query = questions[i][: settings.max_query_length]
            doc, piece_to_word, first_piece = [], [], []
            for w in range(len(words)):
                first_piece.append(len(doc))
                doc.extend(pieces[k + w])
                piece_to_word.extend([w] * len(pieces[k + w]))
            k += len(words)
            first_piece.append(len(doc))  # where a word after the last would start
            answer = None
            if labelled and example.answer_start is not None and example.answers:
                start_word = char_to_word[example.answer_start]
                end_word = char_to_word[example.answer_start + len(example.answers[0]) - 1]
                answer = (first_piece[start_word], first_piece[end_word + 1] - 1)
            room = length - len(query) - 3
            if room < 1:
                raise ConfigError(
                    f"--max-seq-length {length} leaves no room for the context after a "
                    f"{len(query)}-piece question; raise it or lower --max-query-length."
                )
            offset = len(query) + 2
            for start, size in windows(len(doc), room, settings.doc_stride):
                ids = [tokenizer.cls_id, *query, tokenizer.sep_id, *doc[start : start + size]]
                ids.append(tokenizer.sep_id)
                rows["ids"].append(ids)
                rows["segments"].append([0] * offset + [1] * (size + 1))
                inside = answer is not None and start <= answer[0] and answer[1] < start + size
                rows["start"].append(answer[0] - start + offset if inside else 0)
                rows["end"].append(answer[1] - start + offset if inside else 0)
                rows["answerable"].append(1.0 if inside else 0.0)
                features.append((i, offset, start, size, piece_to_word, words))
        x = pack(rows["ids"], length, tokenizer.pad_id, rows["segments"])
        y = {
            "start_logits": np.asarray(rows["start"], np.int32),
            "end_logits": np.asarray(rows["end"], np.int32),
        }
        if settings.version_2:
            y["answerable"] = np.asarray(rows["answerable"], np.float32)
        return x, y, features

    def encoding_note(self, examples, y, extra) -> str:
        """The training answers that lie whole in no window (each trains as no answer)."""
        answered = {i for i, e in enumerate(examples) if e.answer_start is not None and e.answers}
        # A kept answer starts after [CLS] and the question; a lost one points at [CLS] (0).
        starts = y["start_logits"]
        placed = {feature[0] for feature, start in zip(extra, starts, strict=True) if start > 0}
        lost = len(answered - placed)
        if not lost:
            return ""
        return (
            f"{lost:,} of {len(answered):,} training answers lie whole in no context window "
            "(they are longer than the windows' overlap), so they train as no answer; a "
            "smaller --doc-stride or a larger --max-seq-length keeps them."
        )

    def build_model(self, backbone, settings):
        return ElectraSpanExtractor(
            backbone, answerable=settings.version_2, dropout=settings.dropout
        )

    def loss(self, settings):
        position = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
        losses = {"start_logits": position, "end_logits": position}
        if settings.version_2:
            losses["answerable"] = keras.losses.BinaryCrossentropy(from_logits=True)
        return losses

    def answers(self, model, examples, tokenizer, settings, batch_size) -> dict[str, str]:
        """Best answer text per question id (``""`` for predicted no-answer)."""
        x, _, features = self.encode(examples, tokenizer, settings, labelled=False)
        out = model.predict(x, batch_size=batch_size, verbose=0)
        best: dict[int, tuple[float, str]] = {}
        answerable: dict[int, float] = {}
        for r, (i, offset, start, size, piece_to_word, words) in enumerate(features):
            starts = out["start_logits"][r, offset : offset + size]
            ends = out["end_logits"][r, offset : offset + size]
            if "answerable" in out:
                answerable[i] = max(answerable.get(i, -np.inf), float(out["answerable"][r]))
            for s in np.argsort(-starts)[:N_BEST]:
                for e in np.argsort(-ends)[:N_BEST]:
                    if e < s or e - s + 1 > settings.max_answer_length:
                        continue
                    score = float(starts[s] + ends[e])
                    if i not in best or score > best[i][0]:
                        first, last = piece_to_word[start + s], piece_to_word[start + e]
                        best[i] = (score, " ".join(words[first : last + 1]))
        result = {}
        for i, example in enumerate(examples):
            text = best.get(i, (0.0, ""))[1]
            if settings.version_2 and answerable.get(i, -1.0) <= 0.0:
                text = ""
            result[example.qid] = text
        return result

    def scores(self, model, examples, tokenizer, settings, batch_size):
        predicted = self.answers(model, examples, tokenizer, settings, batch_size)
        golds = {e.qid: ([] if e.is_impossible else e.answers) for e in examples}
        return metrics.squad_scores(predicted, golds)

    def predict(self, model, examples, tokenizer, settings, batch_size=64):
        predicted = self.answers(model, examples, tokenizer, settings, batch_size)
        return [{"id": e.qid, "question": e.question, "answer": predicted[e.qid]} for e in examples]

    def export_inputs(self, examples, settings):
        return {
            "question": [e.question for e in examples],
            "context": [e.context for e in examples],
        }

    def export_row(self, example, answer):
        # The export's answer also has its word span and score.
        return {"id": example.qid, "question": example.question, **answer}
