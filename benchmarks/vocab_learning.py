"""How long learning a WordPiece vocabulary takes as the distinct words grow.

``vocab_from_counts`` (what ``prepare`` and ``pretrain`` run after counting words) on
synthetic counts: random lowercase words of 3 to 12 letters with Zipf-like counts
(``1 + 1e5 / rank^1.1``), at each size given. Prints one JSON object per size: the
distinct words, the tokens learned and the seconds.

Usage:
    python benchmarks/vocab_learning.py --words 200000 1000000 [--vocab-size 30522]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
LETTERS = "abcdefghijklmnopqrstuvwxyz"


def synthetic_counts(distinct: int, seed: int = 0) -> dict[str, int]:
    rng = random.Random(seed)
    counts: dict[str, int] = {}
    while len(counts) < distinct:
        word = "".join(rng.choice(LETTERS) for _ in range(rng.randint(3, 12)))
        counts[word] = int(1 + 1e5 / (1 + len(counts)) ** 1.1)
    return counts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--words", type=int, nargs="+", default=[200_000, 1_000_000])
    parser.add_argument("--vocab-size", type=int, default=30522)
    args = parser.parse_args(argv)

    from keras_electra.data.vocab import vocab_from_counts

    for distinct in args.words:
        counts = synthetic_counts(distinct)
        start = time.perf_counter()
        tokens = vocab_from_counts(counts, args.vocab_size)
        record = {
            "benchmark": "vocab_learning",
            "distinct_words": distinct,
            "tokens": len(tokens),
            "seconds": round(time.perf_counter() - start, 1),
            "machine": platform.processor() or platform.machine(),
        }
        print(json.dumps(record), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
