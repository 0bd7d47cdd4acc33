"""Token tagging (NER, chunking), BIO/BIOES: a word's tag is trained and predicted on its
first word piece (label ``-1`` elsewhere); words past ``max_seq_length`` are predicted ``O``."""

from __future__ import annotations

import numpy as np

from keras_electra.data.tokenizer import ElectraTokenizer
from keras_electra.errors import InputDataError
from keras_electra.finetuning import metrics
from keras_electra.finetuning.models import ElectraTagger, MaskedSparseCrossentropy
from keras_electra.finetuning.readers import TaggedSentence, read_conll
from keras_electra.finetuning.tasks.base import Task, pack, word_pieces


def align_words(
    tokenizer: ElectraTokenizer,
    sentences: list[list[str]],
    tag_ids: list[list[int]] | None,
    max_length: int,
) -> tuple[dict[str, np.ndarray], np.ndarray, list[list[int]]]:
    """``(inputs, labels, positions)``: int32 ``[N, max_length]`` inputs and labels (each
    word's ``tag_ids`` on its first piece, ``-1`` elsewhere or without ``tag_ids``), and
    per sentence the position of each kept word's first piece."""
    pieces = word_pieces(tokenizer, [w for words in sentences for w in words])
    labels = np.full((len(sentences), max_length), -1, np.int32)
    rows: list[list[int]] = []
    positions: list[list[int]] = []
    k = 0
    for i, words in enumerate(sentences):
        ids, kept = [tokenizer.cls_id], []
        for j in range(len(words)):
            word = pieces[k + j]
            if len(ids) + len(word) > max_length - 1:
                break
            kept.append(len(ids))
            if tag_ids is not None:
                labels[i, len(ids)] = tag_ids[i][j]
            ids.extend(word)
        k += len(words)
        rows.append([*ids, tokenizer.sep_id])
        positions.append(kept)
    return pack(rows, max_length, tokenizer.pad_id), labels, positions


def sort_tags(tags) -> list[str]:
    """``O`` first, then the other tags sorted by type, then prefix.

    Examples:
        >>> sort_tags(["I-PER", "O", "B-PER", "B-LOC"])
        ['O', 'B-LOC', 'B-PER', 'I-PER']
    """
    return ["O", *sorted(set(tags) - {"O"}, key=lambda t: (t.split("-", 1)[-1], t))]


class TagTask(Task):
    FROM_PYTHON = "texts (split into words at whitespace) or lists of words"

    def example(self, value, number, settings):
        if isinstance(value, TaggedSentence):
            return value
        words = value.split() if isinstance(value, str) else value
        if isinstance(value, str) and not words:
            raise InputDataError(f"Example {number} has no words to tag; leave it out.")
        if isinstance(words, list | tuple) and words and all(isinstance(w, str) for w in words):
            return TaggedSentence(list(words), [], number)
        return super().example(value, number, settings)

    """Token tagging on CoNLL files; metrics: conlleval chunk F1, precision, recall."""

    name = "tag"

    def read(self, path, settings, *, labelled=True) -> list[TaggedSentence]:
        return read_conll(path, require_tags=labelled)

    def set_labels(self, examples, settings):
        settings.labels = sort_tags(t for s in examples for t in s.tags)
        if len(settings.labels) < 2:  # it would learn nothing, and score F1 0 as if it had
            first = examples[0]
            raise InputDataError(
                f"{first.file}: every training word has the tag '{settings.labels[0]}'; "
                "tagging needs at least two tags (entities as well as O)."
            )

    def tag_ids(self, examples: list[TaggedSentence], settings) -> list[list[int]]:
        index = {t: i for i, t in enumerate(settings.labels)}
        ids = []
        for s in examples:
            for j, tag in enumerate(s.tags):
                if tag not in index:
                    raise InputDataError(
                        f"{s.file}:{s.line + j}: tag '{tag}' does not occur in the training data; "
                        "fix the tag or add training sentences with it."
                    )
            ids.append([index[t] for t in s.tags])
        return ids

    def encode(self, examples, tokenizer, settings, *, labelled=True):
        ids = self.tag_ids(examples, settings) if labelled else None
        return align_words(tokenizer, [s.words for s in examples], ids, settings.max_seq_length)

    def encoding_note(self, examples, y, extra) -> str:
        """The training sentences longer than the model's length, whose words past it (and
        their tags) are not trained on."""
        cut = [(s, len(kept)) for s, kept in zip(examples, extra, strict=True)]
        cut = [(s, n) for s, n in cut if n < len(s.words)]
        if not cut:
            return ""
        tags = sum(1 for s, n in cut for tag in s.tags[n:] if tag != "O")
        return (
            f"{len(cut):,} of {len(examples):,} training sentences are longer than "
            f"--max-seq-length, so their words past it ({sum(len(s.words) - n for s, n in cut):,}"
            f" words, {tags:,} of them tagged other than O) are not trained on; a larger "
            "--max-seq-length, or shorter sentences, keeps them."
        )

    def build_model(self, backbone, settings):
        return ElectraTagger(backbone, len(settings.labels), dropout=settings.dropout)

    def loss(self, settings):
        return MaskedSparseCrossentropy()

    def predicted_tags(
        self, model, examples, tokenizer, settings, batch_size
    ) -> tuple[list[list[str]], list[bool]]:
        """Each sentence's tags, and whether it was cut: words past the model's length are
        tagged ``O`` without being scored, as the export tags them."""
        x, _, positions = self.encode(examples, tokenizer, settings, labelled=False)
        best = np.asarray(model.predict(x, batch_size=batch_size, verbose=0)).argmax(-1)
        tags, cut = [], []
        for i, s in enumerate(examples):
            kept = [settings.labels[best[i, p]] for p in positions[i]]
            tags.append(kept + ["O"] * (len(s.words) - len(kept)))
            cut.append(len(kept) < len(s.words))
        return tags, cut

    def scores(self, model, examples, tokenizer, settings, batch_size):
        self.tag_ids(examples, settings)
        predicted, _ = self.predicted_tags(model, examples, tokenizer, settings, batch_size)
        return metrics.chunk_scores([s.tags for s in examples], predicted)

    def predict(self, model, examples, tokenizer, settings, batch_size=64):
        predicted, cut = self.predicted_tags(model, examples, tokenizer, settings, batch_size)
        return [
            {"words": s.words, "tags": t, **({"truncated": True} if c else {})}
            for s, t, c in zip(examples, predicted, cut, strict=True)
        ]

    def export_inputs(self, examples, settings):
        # The export splits its text on whitespace as the CoNLL reader split the lines.
        return {"text": [" ".join(s.words) for s in examples]}

    def export_row(self, example, answer):
        return {"words": example.words, "tags": answer["tags"]}
