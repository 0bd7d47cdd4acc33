"""SIGTERM trials: `keras-electra pretrain` stopped at random steps, then resumed.

One run directory is trained by a chain of real ``keras-electra pretrain``
subprocesses. Each of the first ``--trials`` processes gets SIGTERM at a random
moment of its training (after its first window, plus a random delay); the last
one runs the same command to the end. Per trial it records the exit status
(must be 75), the seconds from the signal to the exit (must be under 30), the
step the process reported and whether the latest checkpoint and the last
``metrics.jsonl`` line are at that step. At the end the weights must equal those
of the same command run without interruption (in this process).

Output: one JSON object per line (``trial``, then ``summary``).

    python benchmarks/sigterm_trials.py [--trials 10] [--steps 400] [--seed 0]

``tests/test_faults.py`` runs one trial through :func:`run_trials` (two with the slow tests).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

EXIT_LIMIT = 30.0  # seconds from SIGTERM to exit
START_LIMIT = 300.0  # seconds for a process to reach its first window end


def command(corpus: Path, vocab: Path, run_dir: Path, steps: int) -> list[str]:
    """The pretrain command of every trial (a tiny model; windows of 10, checkpoints every 40)."""
    return [
        "pretrain",
        "--corpus",
        str(corpus),
        "--vocab",
        str(vocab),
        "--output",
        str(run_dir),
        "--steps",
        str(steps),
        "--batch-size",
        "8",
        "--max-seq-length",
        "32",
        "--log-every",
        "10",
        "--checkpoint-every",
        "40",
        "--no-progress",
    ]


def _metrics_steps(run_dir: Path) -> list[int]:
    path = run_dir / "metrics.jsonl"
    if not path.exists():
        return []
    steps = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            steps.append(json.loads(line)["step"])
        except (ValueError, KeyError):
            steps.append(-1)  # a line cut short
    return steps


def _latest_checkpoint_step(run_dir: Path) -> int:
    state = run_dir / "checkpoints" / "checkpoint"
    if not state.exists():
        return 0
    match = re.search(r'^model_checkpoint_path: ".*ckpt-(\d+)"', state.read_text(), re.M)
    return int(match.group(1)) if match else 0


def _spawn(args: list[str]) -> subprocess.Popen:
    env = dict(
        os.environ, PYTHONPATH=str(REPO), TF_CPP_MIN_LOG_LEVEL="3", KERAS_BACKEND="tensorflow"
    )
    return subprocess.Popen(
        [sys.executable, "-m", "keras_electra.cli", *args],
        cwd=REPO,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


def one_trial(args: list[str], run_dir: Path, rng: random.Random, max_delay: float) -> dict:
    """Start the command, SIGTERM it at a random moment after its first window, wait for it."""
    before = _latest_checkpoint_step(run_dir)
    proc = _spawn(args)
    deadline = time.monotonic() + START_LIMIT
    while not any(step > before for step in _metrics_steps(run_dir)):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            _, err = proc.communicate()
            return {"resumed_from": before, "error": f"no window ended: {err[-1000:]}"}
        time.sleep(0.02)
    time.sleep(rng.uniform(0.0, max_delay))
    signalled = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    try:
        _, err = proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
    exit_seconds = time.monotonic() - signalled
    lines = [line for line in err.strip().splitlines() if line.strip()]
    reported = re.search(r"at step (\d+) of", err)
    steps = _metrics_steps(run_dir)
    return {
        "resumed_from": before,
        "exit_code": proc.returncode,
        "exit_seconds": round(exit_seconds, 2),
        "reported_step": int(reported.group(1)) if reported else None,
        "checkpoint_step": _latest_checkpoint_step(run_dir),
        "last_metrics_step": steps[-1] if steps else None,
        "stderr": lines,
        # What `keras-electra report` says of the stopped run: the sentence it stopped with.
        "stop_kept": _stop_kept(run_dir),
    }


def _stop_kept(run_dir: Path) -> str | None:
    from keras_electra.run_directory import RunDirectory

    return RunDirectory(run_dir).stopped()


def trial_ok(trial: dict) -> bool:
    """Exit 75 within the limit, the stop sentence last on stderr (no traceback), and the
    checkpoint and last metrics line at the reported step."""
    step = trial.get("reported_step")
    stderr = trial.get("stderr", [])
    return (
        trial.get("exit_code") == 75
        and trial.get("exit_seconds", EXIT_LIMIT) < EXIT_LIMIT
        and bool(stderr)
        and stderr[-1].startswith("keras-electra pretrain: Stopped by SIGTERM at step")
        and not any("Traceback" in line for line in stderr)
        and step is not None
        and step > trial["resumed_from"]
        and trial["checkpoint_step"] == step
        and trial["last_metrics_step"] == step
        and "keras-electra pretrain: " + str(trial.get("stop_kept")) == stderr[-1]
    )


def run_trials(
    trials: int,
    work: Path,
    corpus: Path,
    vocab: Path,
    steps: int,
    seed: int = 0,
    max_delay: float = 2.0,
) -> dict:
    """Interrupt one run ``trials`` times, finish it, and compare it with an uninterrupted run.

    Returns ``{"trials": [...], "final_exit_code", "metrics_steps", "max_abs_diff",
    "uninterrupted_seconds"}``.
    """
    from keras_electra.cli import main
    from keras_electra.pretraining.run import load_run

    rng = random.Random(seed)
    run_dir = work / "interrupted"
    args = command(corpus, vocab, run_dir, steps)
    records = []
    for index in range(trials):
        record = one_trial(args, run_dir, rng, max_delay)
        record["trial"] = index + 1
        records.append(record)
        if "error" in record or record.get("exit_code") != 75:
            break
    final = _spawn(args)
    _, err = final.communicate(timeout=900)

    straight = work / "uninterrupted"
    started = time.monotonic()
    with contextlib.redirect_stdout(io.StringIO()):  # the command's summary
        code = main(command(corpus, vocab, straight, steps))
    uninterrupted_seconds = time.monotonic() - started
    result = {
        "trials": records,
        "final_exit_code": final.returncode,
        "final_stderr": err.strip().splitlines()[-3:],
        "uninterrupted_exit_code": code,
        "uninterrupted_seconds": round(uninterrupted_seconds, 1),
        "metrics_steps": _metrics_steps(run_dir),
        "stop_kept_at_the_end": _stop_kept(run_dir),  # None: the finished run cleared it
    }
    if final.returncode == 0 and code == 0:
        resumed, _, resumed_step = load_run(run_dir)
        reference, _, reference_step = load_run(straight)
        result["final_step"] = resumed_step
        result["max_abs_diff"] = max(
            float(abs(a.numpy() - b.numpy()).max())
            for a, b in zip(resumed.weights, reference.weights, strict=True)
        )
        result["reference_step"] = reference_step
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=10)
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-delay", type=float, default=2.0, help="seconds after a window")
    parser.add_argument("--corpus", default=str(REPO / "data" / "sample" / "shakespeare.txt"))
    parser.add_argument("--lines", type=int, default=3000, help="corpus lines used")
    args = parser.parse_args(argv)

    from keras_electra.data import learn_vocab, save_vocab

    with tempfile.TemporaryDirectory(prefix="sigterm-trials-") as tmp:
        work = Path(tmp)
        corpus = work / "corpus.txt"
        lines = Path(args.corpus).read_text(encoding="utf-8").splitlines()[: args.lines]
        corpus.write_text("\n".join(lines) + "\n", encoding="utf-8")
        vocab = work / "vocab.txt"
        save_vocab(learn_vocab([str(corpus)], 2000), str(vocab))
        result = run_trials(args.trials, work, corpus, vocab, args.steps, args.seed, args.max_delay)
    for trial in result["trials"]:
        print(json.dumps({"trial": trial, "ok": trial_ok(trial)}))
    times = [t["exit_seconds"] for t in result["trials"] if "exit_seconds" in t]
    summary = {
        "trials": len(result["trials"]),
        "ok": sum(trial_ok(t) for t in result["trials"]),
        "exit_seconds_max": max(times, default=None),
        "exit_seconds_mean": round(sum(times) / len(times), 2) if times else None,
        "steps_reached": [t.get("reported_step") for t in result["trials"]],
        "final_exit_code": result["final_exit_code"],
        "max_abs_diff": result.get("max_abs_diff"),
    }
    print(json.dumps({"summary": summary}))
    return 0 if summary["ok"] == args.trials and result.get("max_abs_diff") is not None else 1


if __name__ == "__main__":
    sys.exit(main())
