"""Re-rank n-best lists with an Electric export's sentence scores.

A speech recognizer or a translator proposes several hypotheses per input, each with its
own score; an Electric model (``pretrain --objective electric``) scores how well each
hypothesis reads as text in one forward pass (its ``sentence_score``, a pseudo-log-
likelihood: higher is more plausible), and the hypotheses are ordered by

    total = first-pass score + weight * sentence_score

(``weight`` tuned on held-out lists: :func:`tune_weight`), as the Electric paper
re-ranks a speech recognizer's lists. A list without first-pass scores is ordered by the
sentence score alone. ``per_token`` divides each sentence score by its number of word
pieces: a sum of energies moves with the length (it favours short hypotheses where the
energies are mostly above zero, long ones where they are below).

The lists are JSON Lines, one list per line::

    {"id": "utt1", "hypotheses": [{"text": "...", "score": -12.3}, ...], "reference": "..."}

``hypotheses`` may also be plain strings (no first-pass scores); ``id`` and
``reference`` are optional. With a reference on every list, :func:`word_error_rate` says
how often the words were wrong before and after.

Examples:
    >>> lists = [NBest("u1", ["the cat sad", "the cat sat"], [-0.9, -1.0])]
    >>> scores = {"the cat sat": -2.0, "the cat sad": -5.0}
    >>> def score(texts):
    ...     return [SentenceScore([], scores[text]) for text in texts]
    >>> ranked = rerank(lists, score, weight=1.0)
    >>> ranked[0].best, ranked[0].hypotheses[0]["was"]
    ('the cat sat', 2)
    >>> word_error_rate(["the cat sad"], ["the cat sat"])
    0.3333333333333333
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from keras_electra.errors import ConfigError, InputDataError, parse_json
from keras_electra.limits import has_text
from keras_electra.serving.export_reader import SentenceScore

SentenceScorer = Callable[[list[str]], Sequence[SentenceScore]]
"""Texts in, an Electric export's answer per text out (its word pieces' energies and the
sentence score, higher: more plausible): :class:`ElectricScorer` is one."""

STEPS_PER_DECADE, DECADES = 8, 2
"""The grid :func:`tune_weight` searches when none is given: 0, and ``DECADES`` decades
either side of the weight that gives both scores the same spread, ``STEPS_PER_DECADE``
weights a decade (neighbours 1.33 times apart)."""


@dataclass(frozen=True)
class NBest:
    """One input's hypotheses, in the first pass's order (its best first, by convention),
    with their first-pass scores (higher is better) if the list has them, and the right
    answer if it is known."""

    id: str
    texts: list[str]
    scores: list[float] | None = None
    reference: str | None = None

    def __post_init__(self) -> None:
        # From Python: a str is a sequence (of letters), and zip cut a short score list.
        if isinstance(self.texts, str) or not self.texts:
            raise InputDataError(f"List '{self.id}': texts must be a non-empty list of texts.")
        if self.scores is not None and len(self.scores) != len(self.texts):
            raise InputDataError(
                f"List '{self.id}' has {len(self.scores)} scores for {len(self.texts)} "
                "hypotheses; give one first-pass score per hypothesis, or none."
            )

    def first_pass_order(self) -> list[int]:
        """The hypotheses' indexes, the first pass's best first (by score, a tie in the
        given order; the given order without scores)."""
        indexes = range(len(self.texts))
        if self.scores is None:
            return list(indexes)
        return sorted(indexes, key=lambda i: (-self.scores[i], i))


@dataclass(frozen=True)
class Ranked:
    """A re-ranked list: each hypothesis as a dict of ``text``, ``score`` (the first
    pass's, or ``None``), ``sentence_score``, ``total`` and ``was`` (its place in the
    first pass's order, from 1), best first."""

    id: str
    hypotheses: list[dict]
    reference: str | None = None

    @property
    def best(self) -> str:
        return self.hypotheses[0]["text"]

    def record(self) -> dict:
        """The list as one JSON object (``rerank --json`` prints one per line)."""
        out = {"id": self.id, "best": self.best, "hypotheses": self.hypotheses}
        return out if self.reference is None else {**out, "reference": self.reference}


def _finite(value) -> bool:
    """A real number (not a bool) that is neither NaN nor infinite."""
    return not isinstance(value, bool) and isinstance(value, int | float) and math.isfinite(value)


def check_weight(value, name: str = "--weight") -> float:
    """``value`` as a float, or one sentence: a weight is a finite number."""
    if not _finite(value):
        raise ConfigError(f"{name} must be a finite number, not {value!r}.")
    return float(value)


def _number(value, where: str) -> float:
    if not _finite(value):
        raise InputDataError(f"{where}: a score must be a finite number, not {value!r}.")
    return float(value)


def parse_nbest(line: str, where: str, number: int) -> NBest:
    """One JSON line as an :class:`NBest` (``where`` names it in errors; ``number`` is the
    list's id when the line has none)."""
    row = parse_json(line, where, "each line must be one n-best list", InputDataError)
    if not isinstance(row, dict) or not isinstance(row.get("hypotheses"), list):
        raise InputDataError(
            f'{where} has no "hypotheses" list; write {{"hypotheses": ["text", ...]}} or '
            '{"hypotheses": [{"text": "...", "score": -1.5}, ...]}.'
        )
    texts, scores = [], []
    for i, item in enumerate(row["hypotheses"], 1):
        text = item.get("text") if isinstance(item, dict) else item
        if not isinstance(text, str) or not has_text(text):
            raise InputDataError(f"{where}, hypothesis {i}: the text must be a non-empty string.")
        texts.append(text)
        if isinstance(item, dict) and "score" in item:
            scores.append(_number(item["score"], f"{where}, hypothesis {i}"))
    if not texts:
        raise InputDataError(f"{where} has an empty hypotheses list; give at least one.")
    items = [item for item in row["hypotheses"] if isinstance(item, dict)]
    numbers = [k for item in items for k, v in item.items() if _finite(v)]
    if not scores and numbers:  # else reranked by the sentence score alone, unsaid
        raise InputDataError(
            f'{where}: its hypotheses have no "score" but a number under "{numbers[0]}"; '
            'name the first-pass score "score", or leave the numbers out to rank by the '
            "sentence score alone."
        )
    if scores and len(scores) != len(texts):
        raise InputDataError(
            f"{where}: {len(scores)} of its {len(texts)} hypotheses have a score; give every "
            "hypothesis a first-pass score, or none."
        )
    reference = row.get("reference")
    if reference is not None and not isinstance(reference, str):
        raise InputDataError(f"{where}: the reference must be a string.")
    return NBest(str(row.get("id", number)), texts, scores or None, reference)


def read_nbest(path: str | Path) -> list[NBest]:
    """The n-best lists in a JSON Lines file (``-``: standard input); blank lines are
    skipped.

    Raises:
        InputDataError: a missing file, a line that is not an n-best list (one sentence
            naming the line), or a file with no lists.
    """
    name = "standard input" if str(path) == "-" else f"'{path}'"
    try:
        text = sys.stdin.read() if str(path) == "-" else Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputDataError(f"N-best file {name} does not exist.") from None
    except IsADirectoryError:
        raise InputDataError(f"N-best file {name} is a folder; pass a JSON Lines file.") from None
    except UnicodeDecodeError:
        raise InputDataError(f"N-best file {name} is not UTF-8 text.") from None
    text = text.removeprefix("\ufeff")  # a byte-order mark is not the first line's
    lists = [
        parse_nbest(line, f"Line {n} of {name}", n)
        # "\n" alone ends a line: JSON strings may hold U+2028, U+2029 or U+0085 raw,
        # which str.splitlines() would also break at.
        for n, line in enumerate(text.split("\n"), 1)
        if line.strip()
    ]
    if not lists:
        raise InputDataError(f"N-best file {name} has no lists (one JSON object per line).")
    return lists


def sentence_scores(answers: Sequence[SentenceScore], per_token: bool = False) -> list[float]:
    """The answers' sentence scores, each divided by its number of word pieces with
    ``per_token``."""
    return [a.score / max(1, len(a.tokens)) if per_token else a.score for a in answers]


def rerank(
    lists: Sequence[NBest], score: SentenceScorer, *, weight: float = 1.0, per_token: bool = False
) -> list[Ranked]:
    """Each list ordered by ``first-pass score + weight * sentence score`` (ties keep the
    given order); every hypothesis of every list goes to ``score`` in one call.

    Args:
        lists: the n-best lists.
        score: texts to sentence scores (:class:`ElectricScorer` is one).
        weight: the sentence score's weight against the first pass's scores (with no
            first-pass scores it only scales the totals).
        per_token: divide each sentence score by its text's number of word pieces.
    """
    weight = check_weight(weight, "weight")
    texts = [text for nbest in lists for text in nbest.texts]
    sentence = sentence_scores(score(texts), per_token)
    ranked, at = [], 0
    for nbest in lists:
        first = nbest.scores or [None] * len(nbest.texts)
        place = {i: rank for rank, i in enumerate(nbest.first_pass_order(), 1)}
        rows = []
        for i, (text, prior) in enumerate(zip(nbest.texts, first, strict=True)):
            s = float(sentence[at + i])
            total = (prior or 0.0) + weight * s
            rows.append(
                {"text": text, "score": prior, "sentence_score": s, "total": total, "was": place[i]}
            )
        at += len(nbest.texts)
        rows.sort(key=lambda row: -row["total"])  # stable: a tie keeps the given order
        ranked.append(Ranked(nbest.id, rows, nbest.reference))
    return ranked


def first_pass_best(nbest: NBest) -> str:
    """The first pass's choice: its best-scored hypothesis, or the first one given."""
    return nbest.texts[nbest.first_pass_order()[0]]


def _edits(hypothesis: list[str], reference: list[str]) -> int:
    """Word-level Levenshtein distance."""
    previous = list(range(len(reference) + 1))
    for i, word in enumerate(hypothesis, 1):
        current = [i]
        for j, ref in enumerate(reference, 1):
            current.append(
                min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (word != ref))
            )
        previous = current
    return previous[-1]


def has_reference_words(lists: Sequence[NBest]) -> bool:
    """Whether some list's reference has a word (a word error rate is defined)."""
    return any(nbest.reference and nbest.reference.split() for nbest in lists)


def word_error_rate(hypotheses: Iterable[str], references: Iterable[str]) -> float:
    """Word edits (substitutions, insertions, deletions) over reference words, the texts
    compared as whitespace-separated, lowercased words.

    Raises:
        InputDataError: references with no words at all.
    """
    edits = words = 0
    for hypothesis, reference in zip(hypotheses, references, strict=True):
        ref = reference.lower().split()
        edits += _edits(hypothesis.lower().split(), ref)
        words += len(ref)
    if not words:
        raise InputDataError("The references have no words; a word error rate needs some.")
    return edits / words


def _median_spread(groups: Iterable[Sequence[float]]) -> float:
    spreads = sorted(max(g) - min(g) for g in groups if len(g) > 1)
    return spreads[len(spreads) // 2] if spreads else 0.0


def weight_grid(lists: Sequence[NBest], sentence: Sequence[float]) -> list[float]:
    """0 and a log-spaced grid around the weight at which the sentence scores (``sentence``,
    every hypothesis in order) spread as widely within a list as the first pass's scores
    (medians over the lists): the scores' scales differ by orders of magnitude between
    recognizers and models, so a fixed grid would miss."""
    groups, at = [], 0
    for nbest in lists:
        groups.append(sentence[at : at + len(nbest.texts)])
        at += len(nbest.texts)
    first = _median_spread(n.scores for n in lists if n.scores is not None)
    second = _median_spread(groups)
    middle = first / second if first > 0 and second > 0 else 1.0
    steps = range(-DECADES * STEPS_PER_DECADE, DECADES * STEPS_PER_DECADE + 1)
    return [0.0] + [float(f"{middle * 10 ** (k / STEPS_PER_DECADE):.3g}") for k in steps]


def tune_weight(
    lists: Sequence[NBest],
    score: SentenceScorer,
    weights: Sequence[float] | None = None,
    per_token: bool = False,
) -> list[dict]:
    """The word error rate of the re-ranked lists at each weight (default:
    :func:`weight_grid`), lowest first (of a tie, the smaller weight); the texts are
    scored once.

    Raises:
        InputDataError: a list without a reference, or no list with first-pass scores
            (without them the order is the sentence score's at every weight).
    """
    missing = [nbest.id for nbest in lists if nbest.reference is None]
    if missing:
        raise InputDataError(
            f"List '{missing[0]}' has no reference; tuning the weight needs one on every list."
        )
    if not has_reference_words(lists):
        raise InputDataError(
            "The references have no words (every one is empty); tuning the weight needs a "
            "word error rate, so give the lists' transcripts."
        )
    if all(nbest.scores is None for nbest in lists):
        raise InputDataError(
            "No list has first-pass scores; without them the order is the sentence score's at "
            "every weight, so there is no weight to tune."
        )
    texts = [text for nbest in lists for text in nbest.texts]
    answers = list(score(texts))
    by_text = dict(zip(texts, answers, strict=True))

    def again(batch: list[str]) -> list[SentenceScore]:
        return [by_text[text] for text in batch]

    if weights is None:
        sentence = sentence_scores(answers, per_token)
        weights = weight_grid(lists, sentence)
    weights = [check_weight(w, "each of weights") for w in weights]
    references = [nbest.reference for nbest in lists]
    rows = [
        {
            "weight": w,
            "wer": word_error_rate(
                [r.best for r in rerank(lists, again, weight=w, per_token=per_token)], references
            ),
        }
        for w in sorted(weights)
    ]
    return sorted(rows, key=lambda row: row["wer"])  # stable: the smaller weight of a tie


class ElectricScorer:
    """A :data:`SentenceScorer` over an Electric export, in process (``model``: its
    ``saved_models/NAME`` or a version folder) or served (``server``: ``HOST:PORT`` for
    gRPC or an ``http(s)://`` URL for REST, ``model_name`` and the client's arguments as
    :func:`~keras_electra.scoring.score_with_server` takes them). ``truncated`` counts the
    texts it was given that the export cut at its length (their scores cover the kept
    part).

    Raises:
        ConfigError: both ``model`` and ``server``, or neither; when called, an export that
            is not an Electric one (it has no sentence scores).
    """

    def __init__(
        self,
        model: str | Path | None = None,
        *,
        server: str | None = None,
        model_name: str = "electra",
        progress: bool = False,
        **client_args,
    ):
        from keras_electra.scoring import scorer  # TensorFlow, only once there is scoring

        self._scores = scorer(model, server=server, model_name=model_name, **client_args)
        self.model, self.server, self.model_name = model, server, model_name
        self.progress = progress
        self.truncated = self.scored = 0
        self.length: int | None = None

    def __call__(self, texts: list[str]) -> list[SentenceScore]:
        """The texts' answers, :data:`~keras_electra.scoring.CHUNK` at a time (a progress bar
        on stderr over the texts with ``progress``); the first chunk's answers say whether
        the export is an Electric one."""
        from tqdm import tqdm

        from keras_electra.scoring import CHUNK

        answers: list[SentenceScore] = []
        with tqdm(
            total=len(texts),
            unit="text",
            desc="Scoring",
            disable=not self.progress,
            file=sys.stderr,
        ) as bar:
            for start in range(0, len(texts), CHUNK):
                scores = self._scores(texts[start : start + CHUNK])
                if scores.kind != "sentence_score":
                    where = (
                        f"The export at '{self.model}'"
                        if self.model is not None
                        else f"The model '{self.model_name}' at {self.server}"
                    )
                    raise ConfigError(
                        f"{where} is a {scores.reader.title} export, not a sentence-score one; "
                        "re-ranking needs an Electric export (pretrain with --objective "
                        "electric, then export that run)."
                    )
                self.truncated += sum(scores.truncated or [])
                self.scored += len(scores)
                self.length = scores.reader.length
                answers += list(scores)
                bar.update(len(scores))
        return answers

    def truncation_note(self) -> str | None:
        """One sentence on the hypotheses cut at the export's length, or None."""
        if not self.truncated:
            return None
        one = self.truncated == 1
        were, their = (
            ("was", "its sentence score covers") if one else ("were", "their sentence scores cover")
        )
        return (
            f"{self.truncated} of {self.scored} hypotheses {were} cut at the export's length "
            f"of {self.length} tokens: {their} the first {self.length - 2} word pieces only "
            "(export with a larger --max-length)."
        )
