"""The README's two commands on a clean clone, and the wheel in a fresh virtualenv.

What a new user meets, measured: the repository is cloned (from this checkout's HEAD) into
a temporary directory, and there

1. ``make demo`` runs (virtualenv, install, 600 tiny-preset steps on the bundled corpus,
   report, export, score): its wall time, the run's last window and the scored sentences;
2. ``make test`` runs (the dev install and the suite without its slow tests; ``--parts
   test-all`` runs ``make test-all``, every test): passed/skipped/failed and the suite's own
   time beside the command's;
3. the wheel (``python -m build``) is installed into a new virtualenv outside the clone, and
   ``keras-electra --version`` and a short pretrain → export → score on a copy of the sample
   corpus run from a directory that is not the repository.

Each finished part appends one run to its results file (``demo.json``, ``test_suite.json``,
``wheel_install.json`` in benchmarks/results/; the pages quote them through
``benchmarks/doc_numbers.py``). The machine should be otherwise idle; ``--conditions``
records what it was.

    python benchmarks/fresh_clone.py                      # demo, test and wheel (~45 min)
    python benchmarks/fresh_clone.py --parts test-all     # every test, the slow ones too
    python benchmarks/fresh_clone.py --parts demo wheel   # without the suite
    python benchmarks/fresh_clone.py --parts test --without apache-beam  # without the Beam extra
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results"
PARTS = ("demo", "test", "test-all", "wheel")
SCORED = re.compile(r"^(?:\S+\(\d\.\d+\) ?)+$")
sys.path.insert(0, str(Path(__file__).resolve().parent))
from machine_info import machine  # noqa: E402

SUMMARY = re.compile(r"^=*\s*(?P<counts>\d+ (?:passed|failed).*?) in (?P<seconds>[\d.]+)s\b")


def scored_lines(output: str) -> list[str]:
    """The lines ``keras-electra score`` printed: ``piece(probability)`` pairs only."""
    return [line.strip() for line in output.splitlines() if SCORED.match(line.strip())]


def suite_counts(output: str) -> dict:
    """pytest's closing line as numbers: ``{"passed": N, "skipped": M, ..., "seconds": S}``."""
    for line in reversed(output.splitlines()):
        found = SUMMARY.match(line.strip())
        if found:
            counts = {
                kind: int(n)
                for n, kind in re.findall(r"(\d+) (passed|failed|skipped|deselected|errors?)", line)
            }
            counts = {("errors" if k.startswith("error") else k): v for k, v in counts.items()}
            return {"passed": 0, "skipped": 0, **counts, "seconds": float(found["seconds"])}
    raise ValueError("pytest printed no closing line ('N passed ... in S s')")


def last_window(run_dir: Path) -> dict:
    """The last line of a run's metrics.jsonl."""
    lines = (run_dir / "metrics.jsonl").read_text(encoding="utf-8").splitlines()
    return json.loads(lines[-1])


def _run(
    command: list[str], cwd: Path, log: Path, env: dict | None = None, check: bool = True
) -> tuple[float, str]:
    """Run ``command``; its output goes to ``log`` too. Returns (seconds, output); a
    failure stops the benchmark unless ``check`` is false."""
    start = time.monotonic()
    done = subprocess.run(
        command, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    seconds = time.monotonic() - start
    log.write_text(done.stdout, encoding="utf-8")
    if done.returncode and check:
        tail = "\n".join(done.stdout.splitlines()[-30:])
        raise SystemExit(f"{' '.join(command)} failed ({done.returncode}); see {log}:\n{tail}")
    return seconds, done.stdout


def _append(name: str, run: dict) -> None:
    path = RESULTS / name
    data = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {"runs": []}
    data["runs"].append(run)
    path.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    print(json.dumps({"file": name, **run}), flush=True)


def demo(clone: Path, base: dict, logs: Path) -> None:
    seconds, output = _run(["make", "demo"], clone, logs / "demo.log")
    window = last_window(clone / "runs" / "demo")
    _append(
        "demo.json",
        {
            **base,
            "command": "make demo (a clean clone)",
            "seconds": round(seconds),
            "step": window["step"],
            "disc_auc": round(window["disc_auc"], 4),
            "disc_recall": round(window["disc_recall"], 4),
            "output": scored_lines(output),
        },
    )


def test(
    clone: Path, base: dict, logs: Path, without: list[str] = (), target: str = "test"
) -> None:
    """``make test`` (or ``make test-all``, the slow tests too); with ``without``, those
    packages are uninstalled from the test install (``make .venv/.dev``) before the suite
    runs, and the run says so."""
    # A failing suite is recorded too (its "failed" count), then ends the benchmark.
    seconds = 0.0
    if without:
        seconds, _ = _run(["make", ".venv/.dev"], clone, logs / "install.log")
        python = str(clone / ".venv" / "bin" / "python")
        _run([python, "-m", "pip", "uninstall", "-y", *without], clone, logs / "uninstall.log")
    more, output = _run(["make", target], clone, logs / f"{target}.log", check=False)
    counts = suite_counts(output)
    _append(
        "test_suite.json",
        {
            **base,
            "target": target,  # make test leaves out the tests marked slow
            "command": f"make {target} (a clean clone"
            + (f", without {', '.join(without)})" if without else ")"),
            **({"without": list(without)} if without else {}),
            # Options passed through make (PYTEST_ARGS): "-n 3" runs three workers.
            **({"pytest_args": os.environ["PYTEST_ARGS"]} if os.environ.get("PYTEST_ARGS") else {}),
            **counts,
            "seconds_with_install": round(seconds + more),
        },
    )
    if counts.get("failed") or counts.get("errors"):
        raise SystemExit(f"make {target} failed; see {logs / f'{target}.log'}")


def wheel(clone: Path, base: dict, logs: Path) -> None:
    """Build the wheel with the clone's virtualenv, install it into a new one elsewhere, and
    use the command from a directory that is not the repository."""
    python = clone / ".venv" / "bin" / "python"
    if not python.is_file():
        _run(["make", "setup"], clone, logs / "setup.log")
    _run([str(python), "-m", "pip", "install", "-q", "build"], clone, logs / "build-install.log")
    build_seconds, _ = _run(
        [str(python), "-m", "build", "--wheel", "--outdir", str(clone / "dist")],
        clone,
        logs / "build.log",
    )
    (built,) = (clone / "dist").glob("keras_electra-*.whl")
    elsewhere = clone.parent / "user"
    elsewhere.mkdir()
    venv = elsewhere / "venv"
    start = time.monotonic()
    _run([sys.executable, "-m", "venv", str(venv)], elsewhere, logs / "venv.log")
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", str(built)]
    _run(pip, elsewhere, logs / "wheel-install.log")
    install_seconds = time.monotonic() - start
    command = str(venv / "bin" / "keras-electra")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    _, version = _run([command, "--version"], elsewhere, logs / "version.log", env)
    corpus = elsewhere / "corpus.txt"
    shutil.copy(clone / "data" / "sample" / "shakespeare.txt", corpus)
    steps = [
        ["pretrain", "--preset", "tiny", "--corpus", "corpus.txt", "--output", "run",
         "--steps", "20", "--log-every", "10", "--no-progress"],
        ["export", "--run", "run", "--output", "exported"],
        ["score", "--model", "exported", "The king is dead, long live the banana."],
    ]  # fmt: skip
    start = time.monotonic()
    output = ""
    for argv in steps:
        _, output = _run([command, *argv], elsewhere, logs / f"wheel-{argv[0]}.log", env)
    (line,) = scored_lines(output)
    _append(
        "wheel_install.json",
        {
            **base,
            "command": "python -m build --wheel; pip install the wheel into a new virtualenv; "
            "keras-electra --version, pretrain (20 steps), export, score outside the clone",
            "wheel": built.name,
            "version": version.strip(),
            "build_seconds": round(build_seconds),
            "install_seconds": round(install_seconds),
            "commands_seconds": round(time.monotonic() - start),
            "scored": line,
        },
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--parts", nargs="+", choices=PARTS, default=["demo", "test", "wheel"]
    )  # test-all: by hand
    parser.add_argument("--conditions", default="idle", help="what else the machine ran")
    parser.add_argument(
        "--keep",
        action="store_true",
        help="keep the clone (its path is printed); its logs (make test's durations) are "
        "kept either way",
    )
    parser.add_argument(
        "--without",
        nargs="+",
        default=[],
        metavar="PACKAGE",
        help="uninstall these from the test install before the suite (an optional extra's "
        "packages, e.g. apache-beam: the suite must pass without them)",
    )
    args = parser.parse_args(argv)
    head = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True
    ).stdout.strip()
    root = Path(tempfile.mkdtemp(prefix="keras-electra-fresh-"))
    clone = root / "keras-electra"
    subprocess.run(["git", "clone", "--quiet", str(REPO), str(clone)], check=True)
    logs = root / "logs"
    logs.mkdir()
    print(f"clone of {head} in {clone}; logs in {logs}", flush=True)
    base = {
        "date": datetime.date.today().isoformat(),
        "machine": machine(),
        "conditions": args.conditions,
    }
    parts = {
        "demo": demo,
        "test": lambda *a: test(*a, without=args.without),
        "test-all": lambda *a: test(*a, without=args.without, target="test-all"),
        "wheel": wheel,
    }
    for part in PARTS:
        if part in args.parts:
            parts[part](clone, base, logs)
    if not args.keep:
        shutil.rmtree(clone, ignore_errors=True)  # the logs stay, a few hundred KB
    return 0


if __name__ == "__main__":
    sys.exit(main())
