"""How long learning a WordPiece vocabulary takes as the distinct words grow, against
tensorflow-text's learner.

What ``prepare`` and ``pretrain`` run after counting words (``vocab_from_counts``: the
learner once, at the count of the ``--vocab-size``-th most frequent word) on synthetic
counts: random lowercase words of 3 to 12 letters with Zipf-like counts
(``1 + 1e5 / rank^1.1``), at each size given. At each size, in the same process, our
learner (``wordpiece_pieces``) and the reference: tensorflow-text's
``wordpiece_tokenizer_learner_lib.learn`` at its best setting for this job (one run at
the threshold, not its binary search over thresholds, which runs it about six times),
with the check that both give the same vocabulary. Prints one JSON object per size and
writes them all to ``--output``.

Usage:
    python benchmarks/vocab_learning.py --words 200000 1000000 [--vocab-size 30522]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import random
import sys
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, str(Path(__file__).resolve().parent))

from machine_info import cpu_description  # noqa: E402

LETTERS = "abcdefghijklmnopqrstuvwxyz"
OUTPUT = Path(__file__).resolve().parent / "results" / "vocab_learning.json"


def synthetic_counts(distinct: int, seed: int = 0) -> dict[str, int]:
    rng = random.Random(seed)
    counts: dict[str, int] = {}
    while len(counts) < distinct:
        word = "".join(rng.choice(LETTERS) for _ in range(rng.randint(3, 12)))
        counts[word] = int(1 + 1e5 / (1 + len(counts)) ** 1.1)
    return counts


def _significant(seconds: float) -> float:
    """A timing to three significant digits: fixed decimals round a fast run to zero."""
    return float(f"{seconds:.3g}")


def compare(distinct: int, vocab_size: int, reference: bool = True) -> dict:
    """Our learner and (with ``reference``) tensorflow-text's on the same counts."""
    from keras_electra.data.vocab import SPECIAL_TOKENS, learning_threshold, wordpiece_pieces

    counts = synthetic_counts(distinct)
    words = [(w, n) for w, n in counts.items() if w not in SPECIAL_TOKENS]
    threshold = learning_threshold(words, vocab_size)
    start = time.perf_counter()
    ours = wordpiece_pieces(words, threshold, SPECIAL_TOKENS)
    ours_seconds = time.perf_counter() - start
    record = {
        "benchmark": "vocab_learning",
        "distinct_words": distinct,
        "vocab_size": vocab_size,
        "threshold": threshold,
        "tokens": len(ours),
        "seconds": _significant(ours_seconds),
    }
    if reference:
        from tensorflow_text.tools.wordpiece_vocab import wordpiece_tokenizer_learner_lib

        start = time.perf_counter()
        theirs = wordpiece_tokenizer_learner_lib.learn(
            words,
            vocab_size=vocab_size,
            reserved_tokens=list(SPECIAL_TOKENS),
            upper_thresh=threshold,
            lower_thresh=threshold,
        )
        reference_seconds = time.perf_counter() - start
        record["reference_seconds"] = _significant(reference_seconds)
        record["speedup"] = round(reference_seconds / max(ours_seconds, 1e-9), 2)
        record["identical"] = theirs == ours
    return record


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--words", type=int, nargs="+", default=[200_000, 1_000_000])
    parser.add_argument("--vocab-size", type=int, default=30522)
    parser.add_argument(
        "--no-reference", action="store_true", help="time our learner only (no comparison)"
    )
    parser.add_argument("--output", type=Path, default=OUTPUT, help="the results file")
    args = parser.parse_args(argv)

    records = []
    for distinct in args.words:
        record = compare(distinct, args.vocab_size, reference=not args.no_reference)
        records.append(record)
        print(json.dumps(record), flush=True)
    result = {
        "benchmark": "vocab_learning",
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "cpu": cpu_description(),
        "runs": records,
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    return 0 if all(r.get("identical", True) for r in records) else 1


if __name__ == "__main__":
    raise SystemExit(main())
