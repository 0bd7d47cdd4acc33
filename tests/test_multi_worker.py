"""Multi-worker training: two worker processes on 127.0.0.1 with MultiWorkerMirroredStrategy.

Each worker is a fresh ``python`` process with its own ``TF_CONFIG`` (the
launch docs/distributed.md documents); both share one run directory, as workers share a
bucket or network filesystem. Collectives run over gRPC with the RING
implementation, which works on CPU. Every wait has a timeout, so a hung
collective fails the test instead of blocking CI.
"""

import collections
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time

import numpy as np
import pytest
from conftest import GRADIENT_NORMS, METRICS

# What the chief writes in the run directory (another worker writes nothing there).
RUN_FILES = ["checkpoints", "config.json", "logs", "metrics.jsonl", "run.json", "vocab.txt"]
TIMEOUT = 600  # seconds per cluster launch: a healthy one takes under a minute on an idle
# 2-core machine and over three on one running other jobs (TIMEOUT only catches a hang)

WORKER = r"""
import json, os, signal, sys
import numpy as np
from keras_electra.errors import INTERRUPTED_EXIT_CODE, ElectraError, TrainingInterrupted
from keras_electra.pretraining import run

args = json.loads(sys.argv[1])
kill_at = args.pop("kill_at", None)
term_at = args.pop("term_at", None)
if kill_at is not None or term_at is not None:
    class Dying(run.CheckpointEvery):
        # SIGKILL this worker right after step `kill_at`: no cleanup, like a lost machine;
        # SIGTERM it after step `term_at`, like a preempted one.
        def on_train_batch_end(self, batch, logs=None):
            super().on_train_batch_end(batch, logs)
            if self.step == kill_at:
                os.kill(os.getpid(), signal.SIGKILL)
            if self.step == term_at:
                os.kill(os.getpid(), signal.SIGTERM)
    run.CheckpointEvery = Dying
weights = args.pop("weights")
try:
    result = run.pretrain(**args)
except TrainingInterrupted as e:
    print(json.dumps({"interrupted": e.step, "message": str(e)}))
    sys.exit(INTERRUPTED_EXIT_CODE)
except ElectraError as e:
    print(json.dumps({"error": str(e)}))
    sys.exit(2)
np.savez(weights, **{v.path: np.asarray(v.numpy()) for v in result.model.weights})
print(json.dumps({"history": result.history, "step": result.step, "chief": result.chief}))
"""


# === Helpers ===


def _free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


def _start_cluster(
    worker_args: list[dict], logs, script: str = WORKER, cwd=None
) -> list[subprocess.Popen]:
    """One process per worker running ``script`` (its args as JSON in ``argv[1]``), each
    with TF_CONFIG naming the cluster and its own index."""
    cluster = {"worker": [f"127.0.0.1:{port}" for port in _free_ports(len(worker_args))]}
    processes = []
    for index, args in enumerate(worker_args):
        tf_config = {"cluster": cluster, "task": {"type": "worker", "index": index}}
        env = dict(
            os.environ,
            TF_CONFIG=json.dumps(tf_config),
            TF_CPP_MIN_LOG_LEVEL="3",
            KERAS_BACKEND="tensorflow",
        )
        log = open(logs / f"worker-{index}-{time.monotonic_ns()}.log", "w")  # noqa: SIM115
        processes.append(
            subprocess.Popen(
                [sys.executable, "-c", script, json.dumps(args)],
                env=env,
                cwd=cwd,
                stdout=subprocess.PIPE,
                stderr=log,
                text=True,
            )
        )
        log.close()
    return processes


def _finish(processes: list[subprocess.Popen], logs, timeout: float = TIMEOUT) -> list[dict]:
    """Wait for every worker to succeed; kill them all on failure or timeout."""
    deadline = time.monotonic() + timeout
    results = []
    try:
        for index, process in enumerate(processes):
            out, _ = process.communicate(timeout=max(1.0, deadline - time.monotonic()))
            assert process.returncode == 0, f"worker {index} failed:\n{_log_tails(logs)}"
            results.append(json.loads(out.strip().splitlines()[-1]))
    finally:
        _kill(processes)
    return results


def _kill(processes: list[subprocess.Popen]) -> None:
    for process in processes:
        if process.poll() is None:
            process.send_signal(signal.SIGKILL)
        process.wait(timeout=30)
        if process.stdout is not None:
            process.stdout.close()


def _log_tails(logs) -> str:
    return "\n".join(f"--- {p.name}\n{p.read_text()[-2000:]}" for p in sorted(logs.iterdir()))


def _max_difference(first: str, second: str) -> float:
    a, b = np.load(first), np.load(second)
    assert sorted(a.files) == sorted(b.files)
    return max(float(np.max(np.abs(a[k] - b[k]))) for k in a.files)


def _metrics(history: list[dict]) -> list[dict]:
    """The training metrics every worker computes (the run-health probe runs on the chief)."""
    shared = METRICS | GRADIENT_NORMS | {"step", "learning_rate"}
    return [{k: v for k, v in record.items() if k in shared} for record in history]


def _latest_checkpoint_step(checkpoints) -> int:
    state = (checkpoints / "checkpoint").read_text()
    return int(re.search(r'^model_checkpoint_path: "ckpt-(\d+)"', state, re.M).group(1))


def _cluster_beside_one_device(args: dict, weights: list[str], logs, tmp_path):
    """The cluster of ``args`` (worker ``i`` saving its weights to ``weights[i]``) and, in
    this process while the workers train, the same run on one device (its weights in
    tmp_path/single.npz). ELECTRA's AdamW clips the global gradient norm at 1.0; the
    pretrainer clips the workers' summed gradient, so the step is one device's. Returns
    the workers' results and the single run."""
    workers = _start_cluster([dict(args, weights=w) for w in weights], logs)
    try:
        from keras_electra.pretraining import run

        single = run.pretrain(
            **dict(args, output_dir=str(tmp_path / "single"), strategy="one_device")
        )
        np.savez(
            tmp_path / "single.npz", **{v.path: np.asarray(v.numpy()) for v in single.model.weights}
        )
    finally:
        results = _finish(workers, logs)
    return results, single


# === Fixtures ===


@pytest.fixture(scope="module")
def corpus_and_vocab(small_corpus, tmp_path_factory):
    """1000 lines of the sample corpus and a small hand-made WordPiece vocabulary for it."""
    lines = small_corpus.read_text(encoding="utf-8").splitlines()[:1000]
    root = tmp_path_factory.mktemp("multi_worker")
    corpus = root / "corpus.txt"
    corpus.write_text("\n".join(lines) + "\n", encoding="utf-8")
    words = re.findall(r"\w+|[^\w\s]", " ".join(lines).lower())
    chars = sorted({c for w in words for c in w})
    common = [w for w, _ in collections.Counter(words).most_common(300) if len(w) > 1]
    tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *chars, *(f"##{c}" for c in chars)]
    vocab = root / "vocab.txt"
    vocab.write_text("\n".join(tokens + common) + "\n", encoding="utf-8")
    return str(corpus), str(vocab)


def _run_args(corpus: str, output: str, **changes) -> dict:
    args = dict(
        corpus=[corpus],
        output_dir=output,
        strategy="multi_worker",
        steps=4,
        log_every=2,
        batch_size=8,
        max_seq_length=32,
        learning_rate=1e-3,
        warmup_steps=0,
        progress=False,
        config_overrides={"num_layers": 1, "dropout": 0.0},
    )
    args.update(changes)
    return args


# === Tests ===


def test_a_two_worker_cluster_trains_as_one_device_and_only_the_chief_writes(
    corpus_and_vocab, tmp_path
):
    """The cluster's short run (the fault trials below are marked slow): both workers end
    with one device's weights and metrics, the chief alone measured health and wrote the run
    directory."""
    corpus, vocab = corpus_and_vocab
    logs = tmp_path / "logs"
    logs.mkdir()
    run_dir = tmp_path / "run"
    args = _run_args(corpus, str(run_dir), vocab=vocab, steps=8, log_every=4, checkpoint_every=4)
    weights = [str(tmp_path / f"w{i}.npz") for i in range(2)]
    results, single = _cluster_beside_one_device(args, weights, logs, tmp_path)
    assert [(r["step"], r["chief"]) for r in results] == [(8, True), (8, False)]
    assert _max_difference(*weights) == 0.0
    assert _max_difference(weights[0], tmp_path / "single.npz") < 1e-5
    assert _metrics(results[1]["history"]) == _metrics(results[0]["history"])
    for name in ("loss", "mlm_loss", "disc_loss", "disc_accuracy"):
        assert results[0]["history"][-1][name] == pytest.approx(
            single.history[-1][name], rel=1e-5, abs=1e-6
        ), name
    assert "disc_effective_rank" in results[0]["history"][-1]
    assert "disc_effective_rank" not in results[1]["history"][-1]
    assert _latest_checkpoint_step(run_dir / "checkpoints") == 8
    assert "ckpt-4.index" in {p.name for p in (run_dir / "checkpoints").iterdir()}
    assert sorted(p.name for p in run_dir.iterdir()) == RUN_FILES


@pytest.mark.slow
def test_a_preempted_then_a_lost_worker_and_the_cluster_ends_as_one_uninterrupted_device(
    corpus_and_vocab, tmp_path
):
    """Worker 1 (not the chief) is preempted (SIGTERM): both agree on a step, save there,
    exit 75. The restarted cluster resumes there until worker 1 is lost (SIGKILL, no
    cleanup) past the next backup; the cluster manager restarts the whole job, which
    resumes from that backup, runs the chief's health probe, and ends as one device
    trained without a stop: the same weights, the same metrics, and only the chief wrote
    the run directory."""
    corpus, vocab = corpus_and_vocab
    logs = tmp_path / "logs"
    logs.mkdir()
    run_dir = tmp_path / "run"
    # No health probe until the last cluster: the steps are short, and the workers notice
    # a signal within ~1 s.
    args = _run_args(
        corpus, str(run_dir), vocab=vocab, steps=40, log_every=4, checkpoint_every=8, health=False
    )
    weights = [str(tmp_path / f"w{i}.npz") for i in range(2)]
    workers = _start_cluster(
        [dict(args, weights=weights[0]), dict(args, weights=weights[1], term_at=5)], logs
    )
    outputs = []
    try:
        deadline = time.monotonic() + TIMEOUT
        for process in workers:
            out, _ = process.communicate(timeout=max(1.0, deadline - time.monotonic()))
            outputs.append((process.returncode, out))
    finally:
        _kill(workers)
    assert [code for code, _ in outputs] == [75, 75], _log_tails(logs)
    stopped = [json.loads(out.strip().splitlines()[-1])["interrupted"] for _, out in outputs]
    assert stopped[0] == stopped[1] and 5 < stopped[0] < 32, stopped
    stopped = stopped[0]
    assert _latest_checkpoint_step(run_dir / "checkpoints") == stopped
    lines = [json.loads(line)["step"] for line in open(run_dir / "metrics.jsonl")]
    assert lines[-1] == stopped

    # Worker 1 dies three steps after the next backup: the chief cannot pass the step
    # after without it, and the cluster manager restarts the whole job.
    backup = (stopped // 8 + 1) * 8
    workers = _start_cluster(
        [dict(args, weights=weights[0]), dict(args, weights=weights[1], kill_at=backup + 3)], logs
    )
    try:
        workers[1].wait(timeout=TIMEOUT)
        assert workers[1].returncode == -signal.SIGKILL, _log_tails(logs)
    finally:
        _kill(workers)
    assert _latest_checkpoint_step(run_dir / "checkpoints") == backup

    # The health probe's first measurement costs the chief seconds of tracing: on from here.
    args["health"] = True
    results, single = _cluster_beside_one_device(args, weights, logs, tmp_path)
    assert [r["step"] for r in results] == [40, 40]
    assert [r["chief"] for r in results] == [True, False]  # what `pretrain` says at the end
    # Resumed from the backup, not the stop: the first window ends 4 steps after it (the
    # chief's history holds the run's earlier windows too, which its report draws).
    assert [[x["step"] for x in r["history"] if x.get("resumed")][-1] for r in results] == [
        backup + 4
    ] * 2
    results[0]["history"] = [x for x in results[0]["history"] if x["step"] > backup]
    assert _latest_checkpoint_step(run_dir / "checkpoints") == 40
    assert _max_difference(*weights) == 0.0
    # Same global batches, masks and loss normalization as one device: only float
    # summation order differs.
    assert _max_difference(weights[0], tmp_path / "single.npz") < 1e-5
    assert _metrics(results[1]["history"]) == _metrics(results[0]["history"])
    if stopped < 36:  # the last window, 36 to 40, is the single run's too
        for name in ("loss", "mlm_loss", "disc_loss", "disc_accuracy", "replaced_fraction"):
            assert results[0]["history"][-1][name] == pytest.approx(
                single.history[-1][name], rel=1e-5, abs=1e-6
            ), name
    # The chief's probe measured; the other worker has none.
    assert "disc_effective_rank" in results[0]["history"][-1]
    assert "disc_effective_rank" not in results[1]["history"][-1]
    # The lines the chief logged after its backup were replaced on resume.
    steps = [json.loads(line)["step"] for line in open(run_dir / "metrics.jsonl")]
    assert steps == sorted(set(range(4, 41, 4)) | {stopped})
    # Only the chief wrote the run directory; the other worker's checkpoints went to a
    # temporary directory that is gone.
    assert sorted(p.name for p in run_dir.iterdir()) == RUN_FILES


def test_the_pages_python_snippet_trains_on_two_workers_as_on_one_device(small_corpus, tmp_path):
    """docs/pretraining.md's "From Python" snippet, seeded, with MultiWorkerMirroredStrategy
    as its strategy, on two workers sharing a directory: it failed in Keras' symbolic build
    (a dict batch), and without the pipeline's sharding policy the cluster's loss was not one
    device's. Now both workers log one device's loss and the chief alone saved the run."""
    from doc_snippets import snippet, swapped
    from test_save_run import TINY

    from keras_electra.pretraining.loading import load_run

    code = swapped(
        snippet("docs/pretraining.md", "## From Python"),
        {
            **TINY,
            '"data/sample/shakespeare.txt"': repr(str(small_corpus)),
            "import tensorflow as tf\n": "import tensorflow as tf, keras, json\n"
            "keras.utils.set_random_seed(0)\n",
            "model.fit(": "history = model.fit(",
            'export("runs/from-python", "saved_models/from-python")': (
                'print(json.dumps(history.history["loss"]))'
            ),
        },
    )
    logs, shared, single = tmp_path / "logs", tmp_path / "shared", tmp_path / "single"
    for directory in (logs, shared, single):
        directory.mkdir()
    cluster = code.replace(
        "tf.distribute.get_strategy()", "tf.distribute.MultiWorkerMirroredStrategy()"
    )
    workers = _start_cluster([{}, {}], logs, script=cluster, cwd=shared)
    try:
        alone = subprocess.run(
            [sys.executable, "-c", code],
            cwd=single,
            env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"},
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
        )
        outputs = [p.communicate(timeout=TIMEOUT)[0] for p in workers]
    finally:
        _kill(workers)
    assert alone.returncode == 0, alone.stderr[-3000:]
    assert [p.returncode for p in workers] == [0, 0], _log_tails(logs)
    expected = json.loads(alone.stdout.strip().splitlines()[-1])
    for out in outputs:
        assert json.loads(out.strip().splitlines()[-1]) == pytest.approx(expected, rel=1e-6)
    assert load_run(shared / "runs" / "from-python")[2] == 4
    assert sorted(p.name for p in shared.iterdir()) == ["runs"]


def test_a_lost_worker_stops_the_other_in_one_sentence_that_says_where_it_resumes(
    corpus_and_vocab, tmp_path
):
    """Worker 1 SIGKILLed (a lost machine) after step 6: the chief ended with TensorFlow's
    38-line UnavailableError traceback; it now stops as a run that resumes (exit 75),
    naming the lost worker and the checkpoint the restarted cluster goes on from."""
    corpus, vocab = corpus_and_vocab
    logs = tmp_path / "logs"
    logs.mkdir()
    run_dir = tmp_path / "run"
    args = _run_args(corpus, str(run_dir), vocab=vocab, steps=400, checkpoint_every=4)
    workers = _start_cluster(
        [dict(args, weights="w0.npz"), dict(args, weights="w1.npz", kill_at=6)], logs
    )
    try:
        out, _ = workers[0].communicate(timeout=TIMEOUT)
    finally:
        _kill(workers)
    assert workers[1].returncode == -signal.SIGKILL, _log_tails(logs)
    assert workers[0].returncode == 75, _log_tails(logs)
    assert json.loads(out.strip().splitlines()[-1]) == {
        "interrupted": 4,
        "message": "Lost worker 1 of the cluster (it crashed or was stopped); restart every "
        "worker with the same command: the run resumes from its last checkpoint, step 4.",
    }
    assert _latest_checkpoint_step(run_dir / "checkpoints") == 4


def _cli_worker(corpus: str, output: str, ports: list[int], **popen) -> subprocess.Popen:
    """``keras-electra pretrain`` as worker 0 of a cluster on ``ports`` (the others are
    never started)."""
    cluster = {"worker": [f"127.0.0.1:{port}" for port in ports]}
    tf_config = {"cluster": cluster, "task": {"type": "worker", "index": 0}}
    command = [sys.executable, "-m", "keras_electra.cli", "pretrain", "--corpus", corpus]
    command += ["--output", output, "--strategy", "multi_worker", "--steps", "4"]
    command += ["--batch-size", "8", "--max-seq-length", "32", "--no-progress"]
    env = dict(os.environ, TF_CONFIG=json.dumps(tf_config), TF_CPP_MIN_LOG_LEVEL="3")
    return subprocess.Popen(command, env=env, text=True, **popen)


def test_a_taken_port_is_one_sentence(corpus_and_vocab, tmp_path):
    """Another process listening at this worker's TF_CONFIG address: it was TensorFlow's
    traceback ending in "Could not start gRPC server"."""
    corpus, _ = corpus_and_vocab
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        worker = _cli_worker(
            corpus,
            str(tmp_path / "run"),
            [port, *_free_ports(1)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        try:
            _, err = worker.communicate(timeout=TIMEOUT)
        finally:
            _kill([worker])
    assert worker.returncode == 2, err[-3000:]
    said = [line for line in err.splitlines() if not line.startswith(("I0000", "WARNING: All"))]
    assert said == [
        f"keras-electra pretrain: error: This worker could not listen at 127.0.0.1:{port}, "
        "its address in TF_CONFIG: another process holds the port, or the host is not this "
        "machine's; stop that process or give this worker a free port in every worker's "
        "TF_CONFIG."
    ]


def test_a_worker_waiting_for_its_cluster_says_who_is_missing_and_stops_on_ctrl_c(
    corpus_and_vocab, tmp_path
):
    """Worker 1 never started: worker 0 waited in silence, and Ctrl-C did not end it
    (TensorFlow holds the interpreter lock while it waits: no Python handler runs). Now
    it names the worker that does not answer, and Ctrl-C ends the wait with a sentence."""
    from keras_electra.training.strategy import JOIN_NOTE_SECONDS

    corpus, _ = corpus_and_vocab
    ports = _free_ports(2)
    worker = _cli_worker(
        corpus,
        str(tmp_path / "run"),
        ports,
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        # A job started by a non-interactive shell ignores SIGINT; a terminal's does not.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    said = []
    try:
        started = time.monotonic()
        for line in worker.stderr:
            said.append(line.rstrip("\n"))
            if line.startswith("Waiting for the cluster's workers to join"):
                break
        waited = time.monotonic() - started
        worker.send_signal(signal.SIGINT)
        said += [line.rstrip("\n") for line in worker.stderr]
        worker.wait(timeout=30)
    finally:
        _kill([worker])
    assert worker.returncode == -signal.SIGINT, said
    said = [line for line in said if not line.startswith(("I0000", "WARNING: All"))]
    missing = f"worker 1 at 127.0.0.1:{ports[1]}"
    assert said == [
        f"Waiting for the cluster's workers to join; not answering yet: {missing}. Start "
        "every worker TF_CONFIG lists, each with its own task index.",
        f"Stopped while waiting for the cluster's workers to join (not answering: {missing}); "
        "nothing was trained or saved.",
    ]
    assert JOIN_NOTE_SECONDS <= waited < JOIN_NOTE_SECONDS + 60


def test_workers_started_with_different_batch_sizes_refuse_before_a_step(
    corpus_and_vocab, tmp_path
):
    """A worker started with another --batch-size trained to the end beside the chief and
    both reported success; both now stop before the first step with one sentence."""
    corpus, vocab = corpus_and_vocab
    logs = tmp_path / "logs"
    logs.mkdir()
    run_dir = tmp_path / "run"
    args = _run_args(corpus, str(run_dir), vocab=vocab, steps=4)
    workers = _start_cluster(
        [dict(args, weights="w0.npz"), dict(args, batch_size=16, weights="w1.npz")], logs
    )
    try:
        outputs = [p.communicate(timeout=TIMEOUT)[0] for p in workers]
    finally:
        _kill(workers)
    assert [p.returncode for p in workers] == [2, 2], _log_tails(logs)
    for out in outputs:
        assert json.loads(out.strip().splitlines()[-1]) == {
            "error": "The workers disagree on --batch-size (8 on one, 16 on another); start "
            "every worker with the same arguments and put the run directory on storage they "
            "all share."
        }
    assert not (run_dir / "metrics.jsonl").exists() or not (run_dir / "metrics.jsonl").read_text()


def test_the_workers_comparison_names_the_first_flag_that_differs():
    """What the workers gather, compared without a cluster: numbers are shown, other
    values named, and values a float would round together (2**60, 2**60 + 1) or a type
    apart (3, "3") still differ."""
    from keras_electra.training.strategy import _comparable, disagreement

    def compare(mine: dict, theirs: dict) -> str | None:
        names = sorted(mine)
        rows = [[_comparable(values[n]) for n in names] for values in (mine, theirs)]
        return disagreement(names, np.array(rows), mine)

    mine = {"--seed": 2**60, "--precision": "float32", "--hyperparameters": {"a": 1}, "step": 5}
    assert compare(mine, dict(mine)) is None
    assert compare(mine, dict(mine, step=6)).startswith(
        "The workers disagree on the run's step (5 on one, 6 on another); "
    )
    assert "on --seed (" in compare(mine, dict(mine, **{"--seed": 2**60 + 1}))
    assert compare(mine, dict(mine, **{"--precision": "mixed_bfloat16"})).startswith(
        'The workers disagree on --precision (this worker has "float32"); '
    )
    assert "on --hyperparameters (" in compare(mine, dict(mine, **{"--hyperparameters": {}}))
    assert "on the run's step" in compare(mine, dict(mine, step="5"))


def test_only_the_chief_names_the_run_directory_when_the_run_ends(tiny_run):
    """Every worker of a cluster printed "Run directory: ..." and the commands that take
    it next, though only the chief writes it; another worker now says it finished."""
    from keras_electra.cli import pretrain_samples, pretrain_summary
    from keras_electra.pretraining.loading import load_run
    from keras_electra.pretraining.run import RunResult

    history = [json.loads(line) for line in open(tiny_run / "metrics.jsonl")]
    chief = RunResult(tiny_run, 4, history, model=None, tokenizer=None)
    said = pretrain_summary(chief)
    assert f"Run directory: {tiny_run}  (step 4)" in said and "\nLast window: " in said
    assert f"Next: keras-electra report {tiny_run} " in said
    worker = RunResult(tiny_run, 4, history, model=None, tokenizer=None, chief=False)
    assert pretrain_summary(worker) == (
        f"\nWorker finished at step 4; the chief wrote the run to {tiny_run}."
    )
    # --sample's scores too: the chief's, once for the cluster.
    model, tokenizer, _ = load_run(tiny_run)
    chief = RunResult(tiny_run, 4, history, model=model, tokenizer=tokenizer)
    assert "Discriminator: probability that each token was replaced" in pretrain_samples(
        chief, ["the king"]
    )
    worker = RunResult(tiny_run, 4, history, model=model, tokenizer=tokenizer, chief=False)
    assert pretrain_samples(worker, ["the king"]) == ""
