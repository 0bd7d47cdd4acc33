"""Does an Electric model's sentence score pick the right hypothesis, and does it read the
context or only how rare a word is?

Held-out sentences (6 to 30 words) each become an n-best list: the sentence and three
copies with one inner word replaced, in two kinds of lists:

- ``random``: by a word drawn uniformly from the vocabulary's whole words (most are rare:
  a rarity cue gives them away);
- ``frequency-matched``: by a word of about the same corpus frequency (its neighbours in
  the frequency ranking, within ``--band`` ranks), so that only the context tells.

Each list is re-ranked by the export's sentence score (``keras_electra.rerank``), and, as
the reference, by a unigram language model of the pretraining corpus (add-one smoothed
word log-probabilities summed over the sentence: what knows rarity and no context). Per
kind and scorer: how often the original comes first (chance: 1 in 4) and the word error
rate of the chosen hypotheses (``--per-token`` scores too).

Writes one JSON object (``--output``, default ``benchmarks/results/rerank_electric.json``).

Usage:
    python benchmarks/rerank_electric.py   # the study's BBC Electric run, its held-out text
    python benchmarks/rerank_electric.py --run RUN --corpus TRAIN.txt --texts HELD_OUT.txt
"""

from __future__ import annotations

import argparse
import collections
import json
import math
import os
import random
import re
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, str(Path(__file__).resolve().parent))
from machine_info import cpu_description  # noqa: E402

HERE = Path(__file__).resolve().parent
STUDY = HERE / "cache" / "electra_vs_mlm" / "bbc_topic" / "x1" / "electric-seed0" / "run"
DOMAIN = HERE / "cache" / "tasks" / "bbc_topic" / "in_domain"
OUTPUT = HERE / "results" / "rerank_electric.json"
KINDS = ("random", "frequency-matched")
COPIES = 3
WORD = re.compile(r"^[a-z]{3,}$")


def sentences(path: Path, low: int = 6, high: int = 30) -> list[str]:
    """The file's sentences (split after ``.``, ``!`` or ``?``) of ``low`` to ``high``
    words, each once, in order."""
    seen, out = set(), []
    for line in path.read_text(encoding="utf-8").splitlines():
        for sentence in re.split(r"(?<=[.!?])\s+", line.strip()):
            if low <= len(sentence.split()) <= high and sentence not in seen:
                seen.add(sentence)
                out.append(sentence)
    return out


def plain_word(word: str) -> str:
    """A whitespace word lowercased, punctuation stripped at its ends (the unigram model's
    unit)."""
    return word.strip(".,;:!?\"'()").lower()


def word_counts(path: Path) -> collections.Counter:
    """Lowercased whitespace words of the corpus, punctuation stripped at their ends."""
    counts: collections.Counter = collections.Counter()
    with open(path, encoding="utf-8") as f:
        for line in f:
            counts.update(plain_word(w) for w in line.split())
    counts.pop("", None)
    return counts


def build_lists(texts, vocab_words, counts, kind, rng, band) -> list[dict]:
    """One list per text that has an inner word of the vocabulary: ``COPIES`` copies with
    that word replaced (``kind`` says by what), then the text; the text is the reference."""
    by_rank = [w for w, _ in counts.most_common() if w in vocab_words]
    rank = {w: i for i, w in enumerate(by_rank)}
    pool = sorted(vocab_words)
    lists = []
    for text in texts:
        words = text.split()
        inner = [i for i in range(1, len(words) - 1) if words[i] in rank]
        if not inner:
            continue
        i = rng.choice(inner)
        copies, tries = [], 0
        while len(copies) < COPIES and tries < 100:
            tries += 1
            if kind == "random":
                new = rng.choice(pool)
            else:
                r = rank[words[i]]
                new = by_rank[rng.randint(max(0, r - band), min(len(by_rank) - 1, r + band))]
            copy = " ".join([*words[:i], new, *words[i + 1 :]])
            if new != words[i] and copy not in copies:
                copies.append(copy)
        if len(copies) == COPIES:
            hypotheses = [*copies, text]
            lists.append({"id": str(len(lists)), "hypotheses": hypotheses, "reference": text})
    return lists


def unigram_scorer(counts: collections.Counter):
    """Sentence scores from an add-one unigram model of ``counts`` (as SentenceScores)."""
    from keras_electra.serving.export_reader import SentenceScore

    total, size = sum(counts.values()), len(counts) + 1

    def score(texts):
        out = []
        for text in texts:
            words = [plain_word(w) for w in text.split()]
            logp = sum(math.log((counts.get(w, 0) + 1) / (total + size)) for w in words if w)
            out.append(SentenceScore([(w, 0.0) for w in words], logp))
        return out

    return score


def evaluate(lists, scorer, per_token: bool = False) -> dict:
    from keras_electra.rerank import NBest, rerank, word_error_rate

    nbest = [NBest(row["id"], row["hypotheses"], None, row["reference"]) for row in lists]
    ranked = rerank(nbest, scorer, per_token=per_token)
    first = sum(r.best == r.reference for r in ranked) / len(ranked)
    wer = word_error_rate([r.best for r in ranked], [r.reference for r in ranked])
    return {"original_first": round(first, 4), "wer": round(wer, 4)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--run", type=Path, default=STUDY, help="an Electric run directory")
    parser.add_argument("--corpus", type=Path, default=DOMAIN / "train.txt")
    parser.add_argument("--texts", type=Path, default=DOMAIN / "valid.txt")
    parser.add_argument("--lists", type=int, default=300, help="lists per kind (at most)")
    parser.add_argument("--band", type=int, default=20, help="frequency-matched: +- ranks")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--output", type=Path, default=OUTPUT)
    args = parser.parse_args(argv)

    from keras_electra.export import export
    from keras_electra.rerank import ElectricScorer, word_error_rate

    started = time.perf_counter()
    vocab = (args.run / "vocab.txt").read_text(encoding="utf-8").splitlines()
    vocab_words = {w for w in vocab if WORD.match(w)}
    counts = word_counts(args.corpus)
    texts = sentences(args.texts)
    with tempfile.TemporaryDirectory() as tmp:
        exported = export(args.run, Path(tmp) / "electric")
        electric = ElectricScorer(exported)
        kinds = {}
        for kind in KINDS:
            rng = random.Random(args.seed)
            lists = build_lists(texts, vocab_words, counts, kind, rng, args.band)[: args.lists]
            hypotheses = [h for row in lists for h in row["hypotheses"]]
            kinds[kind] = {
                "lists": len(lists),
                "hypotheses": len(hypotheses),
                "chance_original_first": round(1 / (COPIES + 1), 4),
                # Picking a hypothesis at random: the mean over each list's hypotheses.
                "chance_wer": round(
                    word_error_rate(
                        hypotheses,
                        [row["reference"] for row in lists for _ in row["hypotheses"]],
                    ),
                    4,
                ),
                "electric": evaluate(lists, electric),
                "electric_per_token": evaluate(lists, electric, per_token=True),
                "unigram": evaluate(lists, unigram_scorer(counts)),
                "example": lists[0] if lists else None,
            }
            print(kind, json.dumps({k: v for k, v in kinds[kind].items() if k != "example"}))
        truncated = electric.truncated
    config = json.loads((args.run / "config.json").read_text())
    metrics = (args.run / "metrics.jsonl").read_text().splitlines()
    result = {
        "run": str(args.run.resolve().relative_to(HERE.parent))
        if args.run.resolve().is_relative_to(HERE.parent)
        else str(args.run),
        "pretrain_steps": json.loads(metrics[-1])["step"] if metrics else None,
        "model": {k: config[k] for k in ("hidden_size", "num_layers", "vocab_size")},
        "corpus": str(args.corpus.name),
        "texts": str(args.texts.name),
        "sentences": len(texts),
        "band": args.band,
        "seed": args.seed,
        "truncated": truncated,
        "kinds": kinds,
        "seconds": round(time.perf_counter() - started, 1),
        "machine": cpu_description(),
        "date": time.strftime("%Y-%m-%d"),
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
