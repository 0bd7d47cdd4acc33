"""Interleaved A/B of the pretraining step: this checkout against another commit.

``pretrain_throughput.py --baseline`` runs each side in its own process, one after the
other; on a machine whose speed drifts by 10-50% within minutes (a shared cloud host:
its matmul calibration moves that much) that cannot resolve a 2% difference. Here both
sides are built once, each in a child process of its own (the other commit's
``keras_electra/`` extracted with ``git archive``), and then take turns: a block of
``--block`` steps on one, a block on the other, in the order A B B A A B ..., so each
pair of blocks runs back to back under nearly the same conditions. The child not
running waits on its pipe and takes no CPU. The step is ``pretrain_throughput``'s
(the default step: ELECTRA-Small, synthetic batches of 32 x 128, AdamW).

    python benchmarks/step_ab.py --baseline 7ceba19 [--precisions float32,mixed_bfloat16]
        [--blocks 10] [--block 4] [--output benchmarks/results/step_ab.json]

Output: one JSON object per precision (each block's seconds per step on both sides,
the per-pair ratios ``baseline / current``, above 1 when this checkout is faster,
their median and a bootstrap 95% interval of the median), and a ``summary`` line; with
``--output`` the whole run is also written there, with the machine's description.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from machine_info import machine  # noqa: E402


def serve(args) -> None:
    """The child: build the step, warm it up, then run a block of steps per request."""
    import tensorflow as tf
    from pretrain_throughput import load_package_from
    from step_profile import build

    if args.source:
        load_package_from(args.source)
    model, data = build(args)  # the step step_profile.py profiles
    options = tf.data.Options()
    options.autotune.enabled = False  # no autotuning thread working between blocks
    iterator = iter(data.with_options(options))
    step = model.make_train_function()
    for _ in range(args.warmup):  # trace and warm up
        step(iterator)
    print(json.dumps({"ready": True, "package": keras_electra_path()}), flush=True)
    for line in sys.stdin:
        steps = int(line)
        start = time.perf_counter()
        for _ in range(steps):
            logs = step(iterator)
        float(logs["loss"])  # the last step has finished
        print(json.dumps({"seconds_per_step": (time.perf_counter() - start) / steps}), flush=True)


def keras_electra_path() -> str:
    import keras_electra

    return str(Path(keras_electra.__file__).parent)


class Side:
    """One child process: a step built from this checkout or from ``source``."""

    def __init__(self, args, source: str | None):
        command = [sys.executable, __file__, "--serve", "--precision", args.precision]
        command += ["--preset", args.preset, "--batch", str(args.batch)]
        command += ["--length", str(args.length), "--warmup", str(args.warmup)]
        if source:
            command += ["--source", source]
        self.process = subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        self.ready = self._read()

    def _read(self) -> dict:
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError(f"the step's process ended (exit code {self.process.wait()})")
        return json.loads(line)

    def block(self, steps: int) -> float:
        self.process.stdin.write(f"{steps}\n")
        self.process.stdin.flush()
        return self._read()["seconds_per_step"]

    def close(self) -> None:
        self.process.stdin.close()
        self.process.wait(timeout=120)


def order(blocks: int) -> list[tuple[str, str]]:
    """Each pair's order, A B then B A then A B ...: neither side always goes first."""
    return [
        ("current", "baseline") if i % 2 == 0 else ("baseline", "current") for i in range(blocks)
    ]


def median_interval(ratios: list[float], draws: int = 2000, seed: int = 0) -> list[float]:
    """A bootstrap 95% interval of the median of ``ratios`` (percentile method)."""
    rng = random.Random(seed)
    medians = sorted(statistics.median(rng.choices(ratios, k=len(ratios))) for _ in range(draws))
    return [medians[int(0.025 * draws)], medians[int(0.975 * draws) - 1]]


def compare(args, precision: str, source: str) -> dict:
    args.precision = precision
    sides = {"current": Side(args, None), "baseline": Side(args, source)}
    try:
        pairs = []
        for first, second in order(args.blocks):
            times = {first: sides[first].block(args.block)}
            times[second] = sides[second].block(args.block)
            pairs.append(times)
    finally:
        for side in sides.values():
            side.close()
    ratios = [p["baseline"] / p["current"] for p in pairs]
    return {
        "kind": "precision",
        "precision": precision,
        "blocks": args.blocks,
        "steps_per_block": args.block,
        "current_seconds_per_step": [round(p["current"], 4) for p in pairs],
        "baseline_seconds_per_step": [round(p["baseline"], 4) for p in pairs],
        "ratios": [round(r, 4) for r in ratios],
        "median_ratio": round(statistics.median(ratios), 4),
        "median_ratio_95": [round(x, 4) for x in median_interval(ratios)],
        "packages": {name: side.ready["package"] for name, side in sides.items()},
    }


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--baseline", metavar="REF", help="the commit to compare with")
    p.add_argument("--precisions", default="float32,mixed_bfloat16")
    p.add_argument("--preset", default="small")
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--length", type=int, default=128)
    p.add_argument("--blocks", type=int, default=10, help="pairs of blocks per precision")
    p.add_argument("--block", type=int, default=4, help="steps per block")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--output", type=Path, help="also write the run to this JSON file")
    p.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--source", help=argparse.SUPPRESS)
    p.add_argument("--precision", default="float32", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.serve:
        serve(args)
        return 0
    if not args.baseline:
        p.error("--baseline REF is required: the commit to compare this checkout with")
    from pretrain_throughput import extract

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        source = extract(args.baseline, tmp)
        for precision in args.precisions.split(","):
            row = compare(args, precision, source)
            print(json.dumps(row), flush=True)
            rows.append(row)
    summary = {
        "kind": "summary",
        "baseline": args.baseline,
        "median_ratio": {r["precision"]: r["median_ratio"] for r in rows},
        "median_ratio_95": {r["precision"]: r["median_ratio_95"] for r in rows},
        "machine": machine(),
        "date": time.strftime("%Y-%m-%d"),
        "command": "python benchmarks/step_ab.py " + " ".join(argv or sys.argv[1:]),
    }
    print(json.dumps(summary), flush=True)
    if args.output:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(json.dumps({**summary, "rows": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
