"""Serving throughput: the exported SavedModel vs the Keras model, side by side.

The export runs the way TF Serving runs it (TF1 loader, session, SignatureDef
tensor names; tokenization inside the graph), through ``SignatureRunner`` from
the tests' TF Serving stand-in (``tests/tfserving_standin``, not part of the
library; this script puts the repository's ``tests/`` directory on
``sys.path`` to import it). The Keras side tokenizes with the same in-graph
encoder and calls the model in process. Both score the same sentences at batch
1 and 32. Prints one JSON object per (engine, batch) and a summary line, all
machine-readable.

    python benchmarks/serving_throughput.py [--run RUN_DIR] [--preset tiny|small]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))  # for tfserving_standin (the tests' TF Serving stand-in)


def sentences(n: int) -> list[str]:
    lines = (REPO / "data/sample/shakespeare_valid.txt").read_text(encoding="utf-8").splitlines()
    lines = [line for line in lines if len(line.split()) >= 5]
    return [lines[i % len(lines)] for i in range(n)]


def measure(fn, batch: list[str], seconds: float, min_calls: int = 5) -> dict:
    fn(batch)  # warm up (traces, allocates)
    latencies = []
    start = time.perf_counter()
    while len(latencies) < min_calls or time.perf_counter() - start < seconds:
        t = time.perf_counter()
        fn(batch)
        latencies.append(time.perf_counter() - t)
    total = sum(latencies)
    return {
        "calls": len(latencies),
        "sentences_per_sec": round(len(batch) * len(latencies) / total, 1),
        "p50_ms": round(1000 * statistics.median(latencies), 2),
        "p99_ms": round(1000 * float(np.percentile(latencies, 99)), 2),
    }


def make_run(preset: str, workdir: Path, max_seq_length: int) -> Path:
    from keras_electra.pretraining.run import pretrain

    run = workdir / "run"
    pretrain(
        [str(REPO / "data/sample/shakespeare.txt")],
        run,
        preset=preset,
        steps=1,
        batch_size=8,
        max_seq_length=max_seq_length,
        log_every=1,
        progress=False,
    )
    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--run", help="a pretraining run (default: a fresh 1-step run)")
    parser.add_argument("--preset", default="tiny", help="preset of the fresh run")
    parser.add_argument("--max-seq-length", type=int, default=128)
    parser.add_argument("--seconds", type=float, default=5.0, help="time per measurement")
    args = parser.parse_args()

    from tfserving_standin import SignatureRunner

    from keras_electra.encoding import encode_texts
    from keras_electra.export import export
    from keras_electra.pretraining.run import load_run

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        run = Path(args.run) if args.run else make_run(args.preset, tmp, args.max_seq_length)
        exported = export(run, tmp / "saved" / "electra", max_length=args.max_seq_length)
        model, tokenizer, _ = load_run(run)
        runner = SignatureRunner(str(exported))

        @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
        def keras_score(text):
            inputs = encode_texts(tokenizer, text, max_length=args.max_seq_length)
            return tf.sigmoid(model(inputs, training=False))

        engines = {
            "saved_model_session": lambda b: runner.run(
                "serving_default", {"text": np.array([s.encode() for s in b], object)}
            ),
            "keras_in_process": lambda b: keras_score(tf.constant(b)).numpy(),
        }
        results = []
        for batch_size in (1, 32):
            batch = sentences(batch_size)
            for engine, fn in engines.items():
                row = {
                    "benchmark": "serving_throughput",
                    "engine": engine,
                    "batch": batch_size,
                    "max_seq_length": args.max_seq_length,
                    "params": int(model.discriminator.count_params()),
                    **measure(fn, batch, args.seconds),
                }
                results.append(row)
                print(json.dumps(row), flush=True)
        runner.close()
    by = {(r["engine"], r["batch"]): r["sentences_per_sec"] for r in results}
    print(
        json.dumps(
            {
                "benchmark": "serving_throughput_summary",
                "machine": f"{platform.machine()} {os.cpu_count()} cpus",
                "tensorflow": tf.__version__,
                "saved_model_vs_keras_b1": round(
                    by[("saved_model_session", 1)] / by[("keras_in_process", 1)], 2
                ),
                "saved_model_vs_keras_b32": round(
                    by[("saved_model_session", 32)] / by[("keras_in_process", 32)], 2
                ),
            }
        )
    )


if __name__ == "__main__":
    main()
