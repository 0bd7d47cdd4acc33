"""Peak memory of scoring 10,000 sentences in one call with a tiny export.

    python benchmarks/score_memory.py [--sentences 10000] [--modes in_process,grpc]

Pretrains the tiny preset for two steps on the sample corpus (its default 128-token
sequences; a 2,000-piece vocabulary) and exports it, in a temporary directory and a
process of its own, as the tests make their exports. Then, for each mode, a fresh process
scores the sentences (the sample corpus's lines, repeated) in ONE call and reports its peak
resident memory (``ru_maxrss``), its memory before the call, and the call's time:

- ``in_process``: ``keras_electra.scoring.score_with_saved_model`` (``keras-electra score
  --model``);
- ``grpc``: ``score_with_server`` against the tests' TF Serving stand-in on 127.0.0.1,
  server and client in the same process (``keras-electra score --server``).

Both split the call into chunks of ``keras_electra.limits.MAX_BATCH_SIZE`` (32) texts,
so the peak is one chunk's, not the batch's (issue 48 reported the in-process call going
from 0.9 to 9.6 GiB before the split; this script did not measure that). Appends one JSON
line per mode to ``benchmarks/results/score_memory.jsonl`` and prints it. The target:
under 1.5 GiB.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))
from machine_info import cpu_model  # noqa: E402

RESULTS = REPO / "benchmarks" / "results" / "score_memory.jsonl"
CORPUS = REPO / "data" / "sample" / "shakespeare.txt"
TARGET_GIB = 1.5


def _rss_mib() -> float:
    """This process's peak resident memory so far, in MiB (Linux: ru_maxrss is in KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def make_export(directory: Path) -> Path:
    """The tiny preset after two steps, exported to ``directory/saved_models/tiny``."""
    from keras_electra.export import export
    from keras_electra.pretraining.run import pretrain

    lines = CORPUS.read_text(encoding="utf-8").splitlines()[:3000]
    corpus = directory / "corpus.txt"
    corpus.write_text("\n".join(lines) + "\n", encoding="utf-8")
    run = directory / "run"
    pretrain([str(corpus)], run, preset="tiny", steps=2, batch_size=8, vocab_size=2000,
             log_every=1, progress=False)  # fmt: skip
    return export(run, directory / "saved_models" / "tiny")


def sentences(count: int) -> list[str]:
    lines = [line for line in CORPUS.read_text(encoding="utf-8").splitlines() if line.strip()]
    return [lines[i % len(lines)] for i in range(count)]


def score(export_dir: str, mode: str, count: int) -> dict:
    """Scores ``count`` sentences in one call (in this process: run it in a fresh one)."""
    import tensorflow as tf

    from keras_electra.scoring import score_with_saved_model, score_with_server

    texts = sentences(count)
    tf.constant(texts[:1])  # TensorFlow's runtime up before the first reading
    if mode == "in_process":
        before = _rss_mib()
        start = time.perf_counter()
        rows = score_with_saved_model(export_dir, texts)
    else:
        sys.path.insert(0, str(REPO / "tests"))
        from tfserving_standin import ModelServer

        server = ModelServer(Path(export_dir).parent, "electra").start()
        before = _rss_mib()
        start = time.perf_counter()
        try:
            rows = score_with_server(server.grpc_target, "electra", texts)
        finally:
            server.stop()
    seconds = time.perf_counter() - start
    assert len(rows) == count and all(rows), "every sentence has its scores"
    peak = _rss_mib()
    return {
        "mode": mode,
        "sentences": count,
        "peak_rss_mib": round(peak),
        "peak_rss_gib": round(peak / 1024, 3),
        "rss_before_mib": round(before),  # TensorFlow loaded (and the server started)
        "seconds": round(seconds, 1),
        "under_target": peak / 1024 < TARGET_GIB,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sentences", type=int, default=10_000)
    parser.add_argument("--modes", default="in_process,grpc")
    parser.add_argument("--score", metavar="EXPORT", help=argparse.SUPPRESS)  # the child
    parser.add_argument("--mode", help=argparse.SUPPRESS)
    parser.add_argument("--export-to", metavar="DIR", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.export_to:  # a child: make the export
        print(make_export(Path(args.export_to)))
        return
    if args.score:  # a child: one measurement
        print(json.dumps(score(args.score, args.mode, args.sentences)))
        return
    env = {**os.environ, "PYTHONPATH": str(REPO), "TF_CPP_MIN_LOG_LEVEL": "3"}
    me = [sys.executable, str(Path(__file__).resolve())]

    def child(*extra: str) -> str:
        done = subprocess.run([*me, *extra], env=env, capture_output=True, text=True)
        if done.returncode:
            sys.exit(done.stderr[-3000:])
        return done.stdout.strip().splitlines()[-1]

    with tempfile.TemporaryDirectory() as work:
        export_dir = child("--export-to", work)
        for mode in args.modes.split(","):
            record = json.loads(
                child("--score", export_dir, "--mode", mode, "--sentences", str(args.sentences))
            )
            record.update(
                date=datetime.date.today().isoformat(),
                cpu=cpu_model(),
                cores=os.cpu_count(),
                export="tiny preset, 128-token sequences, 2 steps",
            )
            RESULTS.parent.mkdir(parents=True, exist_ok=True)
            with RESULTS.open("a", encoding="utf-8") as out:
                out.write(json.dumps(record) + "\n")
            print(json.dumps(record))


if __name__ == "__main__":
    main()
