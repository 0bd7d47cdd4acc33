"""What the run-health probe costs: its time against the training time of each window.

Runs ``pretrain`` (tiny preset by default, the sample corpus, the held-back plays
as the probe's text) and reads ``metrics.jsonl``: every window records the
training time of its steps (``window_seconds``) and the probe's time after them
(``health_seconds``), measured in the same process one after the other, so load
from other processes hits both. Prints one JSON object: per-window ratios and
the whole run's ratio. The first window is reported apart: it includes tracing
the probe's graph once.

Usage:
    python benchmarks/health_overhead.py --steps 300 --log-every 50 [--preset tiny]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
REPO = Path(__file__).resolve().parents[1]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", default="tiny")
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--log-every", type=int, default=50)
    parser.add_argument("--batch-size", type=int)
    parser.add_argument("--max-seq-length", type=int)
    args = parser.parse_args(argv)

    from keras_electra.pretraining.run import pretrain

    with tempfile.TemporaryDirectory() as tmp:
        result = pretrain(
            [str(REPO / "data/sample/shakespeare.txt")],
            Path(tmp) / "run",
            preset=args.preset,
            steps=args.steps,
            log_every=args.log_every,
            batch_size=args.batch_size,
            max_seq_length=args.max_seq_length,
            validation=[str(REPO / "data/sample/shakespeare_valid.txt")],
            progress=False,
        )
    windows = result.history
    later = windows[1:]
    ratios = [r["health_seconds"] / r["window_seconds"] for r in later]
    print(
        json.dumps(
            {
                "benchmark": "health_overhead",
                "preset": args.preset,
                "cpu": platform.processor() or platform.machine(),
                "steps_per_window": args.log_every,
                "first_window": {
                    "window_seconds": windows[0]["window_seconds"],
                    "health_seconds": windows[0]["health_seconds"],
                },
                "later_windows": len(later),
                "window_seconds_median": statistics.median(r["window_seconds"] for r in later),
                "health_seconds_median": statistics.median(r["health_seconds"] for r in later),
                "overhead_median": round(statistics.median(ratios), 4),
                "overhead_max": round(max(ratios), 4),
                "overhead_total": round(
                    sum(r["health_seconds"] for r in later)
                    / sum(r["window_seconds"] for r in later),
                    4,
                ),
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
