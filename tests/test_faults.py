"""Faults a cluster inflicts on a pretraining run, done for real: each run resumes or refuses.

- SIGTERM to a running ``keras-electra pretrain`` (a subprocess) at random steps;
- a learning rate that diverges (``--on-nan stop`` and ``skip``);
- a full disk (a small tmpfs mounted by the test; without the privilege to mount,
  an injected ``OSError(ENOSPC)`` at the write), a read-only disk, a checkpoint
  directory removed during the run;
- a truncated TFRecord shard, a changed vocabulary, a metrics line cut short (with the
  full disk: the resumed run drops it).

docs/reliability.md's table points here.
"""

from __future__ import annotations

import errno
import importlib.util
import json
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf
from conftest import REPO

from keras_electra.cli import main
from keras_electra.data import learn_vocab, save_vocab, write_pretraining_tfrecords
from keras_electra.data.tokenizer import ElectraTokenizer
from keras_electra.errors import ConfigError, StorageError, TrainingDiverged
from keras_electra.pretraining import run as run_module
from keras_electra.pretraining.run import load_run, pretrain
from keras_electra.run_directory import RunDirectory
from keras_electra.training.callbacks import plan_windows

# A one-layer model on 8 x 32-token batches; no health probe (the SIGTERM trials keep it).
FAST = dict(
    batch_size=8,
    max_seq_length=32,
    progress=False,
    health=False,
    config_overrides={"num_layers": 1},
)


def _load_trials_script():
    spec = importlib.util.spec_from_file_location(
        "sigterm_trials", REPO / "benchmarks" / "sigterm_trials.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def read_metrics(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def last_sentence(err: str) -> str:
    """The error line of the command's stderr: no traceback, one sentence."""
    assert "Traceback" not in err, err
    lines = [line for line in err.strip().splitlines() if line.strip()]
    assert lines, "nothing on stderr"
    return lines[-1]


def checkpoint_steps(run_dir: Path) -> list[int]:
    return sorted(int(p.name[5:-6]) for p in (run_dir / "checkpoints").glob("ckpt-*.index"))


def nonfinite_variables(prefix: str) -> list[str]:
    """Names of the float variables in a checkpoint that hold NaN or infinity."""
    bad = []
    for name, _ in tf.train.list_variables(prefix):
        value = tf.train.load_variable(prefix, name)
        if isinstance(value, np.ndarray) and value.dtype.kind == "f":
            if not np.isfinite(value).all():
                bad.append(name)
    return bad


@pytest.fixture(scope="module")
def vocab_file(small_corpus, tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("vocab") / "vocab.txt"
    save_vocab(learn_vocab([str(small_corpus)], 2000), str(path))
    return path


@pytest.fixture(scope="module")
def base_run(small_corpus, vocab_file, tmp_path_factory) -> Path:
    """A finished 4-step run (checkpoints at 2 and 4) for the tests to copy and damage."""
    run_dir = tmp_path_factory.mktemp("base") / "run"
    pretrain(
        [str(small_corpus)],
        run_dir,
        steps=4,
        log_every=2,
        checkpoint_every=2,
        vocab=str(vocab_file),
        **FAST,
    )
    return run_dir


# === Preemption ===


# Each trial is a process; the second stops a resumed one (slow: make test-all).
@pytest.mark.parametrize("count", [1, pytest.param(2, marks=pytest.mark.slow)])
def test_sigterm_at_random_steps_exits_75_and_resumes_to_the_uninterrupted_weights(
    count, small_corpus, vocab_file, tmp_path
):
    """SIGTERMs to real `keras-electra pretrain` processes at random steps, then a rerun
    of the same command to the end: the weights equal an uninterrupted run's.

    (``python benchmarks/sigterm_trials.py`` runs ten; docs/reliability.md gives the figures.)
    """
    trials = _load_trials_script()
    result = trials.run_trials(count, tmp_path, small_corpus, vocab_file, steps=100, seed=1)
    assert len(result["trials"]) == count
    for trial in result["trials"]:
        assert trials.trial_ok(trial), trial
        assert trial["exit_seconds"] < 30
    reached = [t["reported_step"] for t in result["trials"]]
    assert reached == sorted(set(reached)), reached
    assert result["final_exit_code"] == 0, result["final_stderr"]
    assert result["final_step"] == result["reference_step"] == 100
    assert result["stop_kept_at_the_end"] is None  # the report no longer calls it stopped
    # Each stop wrote its partial window's line; the windows after it stay aligned.
    steps = result["metrics_steps"]
    assert steps == sorted(set(steps)), steps
    assert set(steps) == set(range(10, 101, 10)) | set(reached)
    assert result["max_abs_diff"] <= 1e-5


def test_sigterm_before_training_starts_exits_75_at_once(
    small_corpus, vocab_file, tmp_path, monkeypatch, capsys
):
    """During setup (here: reading the vocabulary) there is nothing to save: stop at once."""
    real = run_module._vocabulary

    def slow_setup(*args, **kwargs):
        os.kill(os.getpid(), signal.SIGTERM)
        return real(*args, **kwargs)

    monkeypatch.setattr(run_module, "_vocabulary", slow_setup)
    out = tmp_path / "run"
    args = ["pretrain", "--corpus", str(small_corpus), "--vocab", str(vocab_file)]
    assert main([*args, "--output", str(out), "--steps", "4", "--no-progress"]) == 75
    assert "Stopped by SIGTERM before training started" in last_sentence(capsys.readouterr().err)
    assert not (out / "checkpoints").exists()
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # the handler is gone again


def test_sigterm_while_the_command_loads_is_one_sentence_and_75(small_corpus, tmp_path):
    """A SIGTERM in the first seconds (TensorFlow loading) ended the command with the
    default's 143 and nothing on stderr."""
    import sys
    import time

    out = tmp_path / "run"
    command = [sys.executable, "-m", "keras_electra.cli", "pretrain", "--corpus"]
    command += [str(small_corpus), "--output", str(out), "--steps", "4"]
    process = subprocess.Popen(command, stderr=subprocess.PIPE, text=True)
    status = Path(f"/proc/{process.pid}/status")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # until the command's handler is in place
        caught = [line for line in status.read_text().splitlines() if line.startswith("SigCgt")]
        if caught and int(caught[0].split()[1], 16) & (1 << (signal.SIGTERM - 1)):
            break
        time.sleep(0.01)
    process.send_signal(signal.SIGTERM)
    _, err = process.communicate(timeout=120)
    assert process.returncode == 75, err
    assert (
        err.strip().splitlines()[-1]
        == (
            "keras-electra pretrain: Stopped by SIGTERM while the command loaded; nothing was "
            "done: run the same command again."
        )
        or "Stopped by SIGTERM before training started" in err
    ), err
    assert not (out / "checkpoints").exists()


def test_ctrl_c_while_the_command_loads_tensorflow_is_one_sentence(
    small_corpus, tmp_path, monkeypatch, capsys
):
    """The first seconds of every command load TensorFlow, outside the run's own signal
    handling: a Ctrl-C there printed KeyboardInterrupt's traceback through TF's modules."""
    from keras_electra import cli

    def interrupted() -> None:
        # What Python's default SIGINT handler raises (an xdist worker ignores SIGINT
        # itself, so the signal cannot stand in for it here).
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "_import_tensorflow_quietly", interrupted)
    out = tmp_path / "run"
    argv = ["pretrain", "--corpus", str(small_corpus), "--output", str(out), "--steps", "4"]
    assert main(argv) == 130
    err = capsys.readouterr().err
    assert err == (
        "keras-electra pretrain: interrupted; run the command again (pretrain and finetune "
        "resume from their last checkpoint, prepare keeps the shards it finished).\n"
    )
    assert not out.exists()


def test_sigterm_during_finetune_saves_the_step_and_the_rerun_ends_as_an_uninterrupted_one(
    base_run, tmp_path, monkeypatch, capsys
):
    """`keras-electra finetune` stopped by SIGTERM at step 4 of 6 exits 75 with the step in
    OUT/resume/; the same command then finishes with an uninterrupted run's weights."""
    from keras_electra.finetuning import run as finetune_module

    train = tmp_path / "train.csv"
    rows = [
        f"{'good' if i % 2 else 'bad'} {w} day,{'pos' if i % 2 else 'neg'}"
        for i, w in enumerate(["king", "queen", "sword", "horse", "river", "castle"] * 8)
    ]
    train.write_text("sentence,label\n" + "\n".join(rows) + "\n", encoding="utf-8")
    args = ["finetune", "--run", str(base_run), "--task", "classify", "--train", str(train),
            "--text-column", "sentence", "--epochs", "2", "--batch-size", "16",
            "--max-seq-length", "16", "--quiet"]  # fmt: skip
    assert main([*args, "--output", str(tmp_path / "straight")]) == 0

    class SignalledAtStep4(finetune_module._EpochLog):
        def on_train_batch_end(self, batch, logs=None):
            super().on_train_batch_end(batch, logs)
            if self.step == 4:
                os.kill(os.getpid(), signal.SIGTERM)

    out = tmp_path / "interrupted"
    monkeypatch.setattr(finetune_module, "_EpochLog", SignalledAtStep4)
    capsys.readouterr()
    assert main([*args, "--output", str(out)]) == 75
    sentence = last_sentence(capsys.readouterr().err)
    assert "Stopped by SIGTERM at step 4 of 6" in sentence, sentence
    assert checkpoint_steps(out / "resume") == [4]
    assert [r["step"] for r in read_metrics(out / "resume")] == [3, 4]
    monkeypatch.undo()

    # The rerun says that it resumes, and where from (--quiet only drops the epoch lines
    # and the bar, and is no part of what a resume must match).
    loud = [arg for arg in args if arg != "--quiet"]
    assert main([*loud, "--output", str(out)]) == 0
    said = capsys.readouterr().out
    resuming = f"Resuming the interrupted fine-tuning at step 4 of 6 (saved in '{out / 'resume'}"
    assert resuming in said, said
    assert not (out / "resume").exists()
    assert [r["step"] for r in read_metrics(out)] == [3, 4, 6]
    straight = finetune_module.load_finetuned(tmp_path / "straight").model
    resumed = finetune_module.load_finetuned(out).model
    for a, b in zip(straight.weights, resumed.weights, strict=True):
        np.testing.assert_allclose(a.numpy(), b.numpy(), atol=1e-6, err_msg=a.path)


def test_a_resumed_fine_tuning_logs_the_epoch_loss_of_an_uninterrupted_one(
    base_run, tmp_path, monkeypatch, capsys
):
    """The epoch's loss in metrics.jsonl was the mean of the steps after the resume only
    (the resumed fit's own): SIGTERM at steps 4 and 5 of 6 (epochs of 3 steps, the last
    of 12 rows, not 16) and two reruns now log each epoch as the uninterrupted run."""
    from keras_electra.finetuning import run as finetune_module

    train = tmp_path / "train.csv"
    rows = [
        f"{'good' if i % 2 else 'bad'} {w} day,{'pos' if i % 2 else 'neg'}"
        for i, w in enumerate(["king", "queen", "sword", "horse", "river", "castle"] * 8)
    ]
    train.write_text("sentence,label\n" + "\n".join(rows[:44]) + "\n", encoding="utf-8")
    args = ["finetune", "--run", str(base_run), "--task", "classify", "--train", str(train),
            "--text-column", "sentence", "--epochs", "2", "--batch-size", "16",
            "--max-seq-length", "16", "--quiet"]  # fmt: skip
    assert main([*args, "--output", str(tmp_path / "straight")]) == 0
    straight = read_metrics(tmp_path / "straight")
    assert [r["step"] for r in straight] == [3, 6]

    class SignalledAtSteps4And5(finetune_module._EpochLog):
        def on_train_batch_end(self, batch, logs=None):
            super().on_train_batch_end(batch, logs)
            if self.step in (4, 5):
                os.kill(os.getpid(), signal.SIGTERM)

    out = tmp_path / "interrupted"
    monkeypatch.setattr(finetune_module, "_EpochLog", SignalledAtSteps4And5)
    assert main([*args, "--output", str(out)]) == 75
    assert main(["report", str(out), "--output", str(tmp_path / "report")]) == 0
    unfinished = "  unfinished: the fine-tuning is interrupted or still running"
    assert unfinished in capsys.readouterr().out
    assert main([*args, "--output", str(out)]) == 75
    monkeypatch.undo()
    assert main([*args, "--output", str(out)]) == 0
    resumed = read_metrics(out)
    assert [r["step"] for r in resumed] == [3, 4, 5, 6]
    # The weights are bit-exact; the means differ by Keras' float32 sums (1.5e-8 relative
    # here), the old ones (step 6: the mean of step 6 alone) by 4.7e-2.
    for a, b in ((straight[0], resumed[0]), (straight[1], resumed[3])):
        assert a.keys() == b.keys() and a["epoch"] == b["epoch"]
        for k in a.keys() - {"step", "epoch"}:
            np.testing.assert_allclose(b[k], a[k], rtol=1e-6, err_msg=k)


def test_windows_after_a_resume_between_window_ends_stay_aligned():
    assert plan_windows(0, 100, 10) == [(0, 10, 10)]
    assert plan_windows(37, 100, 10) == [(37, 3, 1), (40, 10, 6)]
    assert plan_windows(40, 125, 10) == [(40, 10, 8), (120, 5, 1)]
    assert plan_windows(121, 125, 10) == [(121, 4, 1)]
    assert plan_windows(125, 125, 10) == []


# === A diverging learning rate ===


def test_diverging_learning_rate_stops_with_one_sentence_and_finite_checkpoints(
    small_corpus, vocab_file, tmp_path, capsys
):
    out = tmp_path / "diverged"
    code = main(
        [
            "pretrain",
            "--corpus",
            str(small_corpus),
            "--vocab",
            str(vocab_file),
            "--output",
            str(out),
            "--steps",
            "30",
            "--batch-size",
            "8",
            "--max-seq-length",
            "32",
            "--log-every",
            "5",
            "--checkpoint-every",
            "5",
            "--learning-rate",
            "1000",
            "--warmup-steps",
            "0",
            "--no-progress",
        ]
    )
    assert code == 2
    sentence = last_sentence(capsys.readouterr().err)
    assert "Training diverged at step" in sentence, sentence
    assert "--learning-rate" in sentence and "--on-nan skip" in sentence
    saved = checkpoint_steps(out)
    if saved:  # it diverged after a checkpoint: that one is named, untouched and finite
        assert f"last checkpoint (step {saved[-1]}) is untouched" in sentence
        _, _, step = load_run(out)
        assert step == saved[-1]
    for step in saved:
        assert nonfinite_variables(str(out / "checkpoints" / f"ckpt-{step}")) == []
    # The window the refused step cut short is recorded up to the step before it, with its
    # gradient norms: the records stopped at the last whole window.
    refused = int(re.search(r"diverged at step (\d+)", sentence).group(1))
    if (refused - 1) % 5:  # a step of its window trained before it
        records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
        assert records[-1]["step"] == refused - 1 and "grad_norm" in records[-1], records[-1]
    # The report says so: it said nothing of a diverged pretraining (or, before its first
    # window, to wait for one).
    code = main(["report", str(out), "--output", str(tmp_path / "report")])
    said = capsys.readouterr()
    assert sentence.split("error: ", 1)[1] in said.out + said.err
    assert code == (0 if (out / "metrics.jsonl").exists() else 2)


def test_on_nan_skip_counts_skipped_steps_and_keeps_checkpoints_finite(
    small_corpus, vocab_file, tmp_path
):
    out = tmp_path / "skipping"
    kwargs = dict(steps=15, log_every=5, checkpoint_every=5, learning_rate=1000.0, warmup_steps=0)
    try:
        pretrain([str(small_corpus)], out, vocab=str(vocab_file), on_nan="skip", **kwargs, **FAST)
    except TrainingDiverged as e:  # only once a whole window was skipped
        assert "every step of the window" in str(e) and "skipped" in str(e)
    records = read_metrics(out)
    assert all("skipped_steps" in r for r in records)
    assert sum(r["skipped_steps"] for r in records) > 0, records
    assert all(np.isfinite(r["loss"]) for r in records)
    assert checkpoint_steps(out)
    for step in checkpoint_steps(out):
        assert nonfinite_variables(str(out / "checkpoints" / f"ckpt-{step}")) == []
    assert json.loads((out / "run.json").read_text())["on_nan"] == "skip"


def test_a_checkpoint_is_never_written_from_weights_that_are_not_finite(base_run, tmp_path):
    """The last guard (float16 runs have no in-graph check): the previous checkpoint stays."""
    from keras_electra.training.callbacks import CheckpointEvery
    from keras_electra.training.checkpoints import RunCheckpoints

    run_dir = tmp_path / "run"
    shutil.copytree(base_run, run_dir)
    model, _, step = load_run(run_dir)
    checkpoints = RunCheckpoints(run_dir / "checkpoints", model, optimizer=None)
    saver = CheckpointEvery(checkpoints, 2, 6, initial_step=step)
    saver.set_model(model)
    kernel = next(v for v in model.trainable_variables if v.path.endswith("query/kernel"))
    kernel.assign(np.full(kernel.shape, np.nan, "float32"))
    saver.on_train_batch_end(0)
    saver.on_train_batch_end(1)
    with pytest.raises(TrainingDiverged, match=r"not finite at step 6 \(first: .*query/kernel\)"):
        saver.on_epoch_end(0)
    assert checkpoint_steps(run_dir) == [2, 4]


# === Storage ===


def _mount_tmpfs(path: Path, size: str) -> bool:
    """Mount a tmpfs of ``size`` at ``path``; False where this process may not mount."""
    path.mkdir(parents=True, exist_ok=True)
    if shutil.which("mount") is None:
        return False
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
        capture_output=True,
    )
    return done.returncode == 0


@pytest.fixture
def small_disk(tmp_path):
    """A 64 MB tmpfs of our own (unmounted afterwards), or None without the privilege."""
    disk = tmp_path / "disk"
    mounted = _mount_tmpfs(disk, "64m")
    yield disk if mounted else None
    if mounted:
        subprocess.run(["umount", "-l", str(disk)], capture_output=True)


def _fill(disk: Path, leave: int) -> Path:
    """Write a file that leaves only ``leave`` bytes free on ``disk``."""
    filler = disk / "filler"
    free = shutil.disk_usage(disk).free
    with open(filler, "wb") as f:
        remaining = max(0, free - leave)
        chunk = b"\0" * (1 << 20)
        while remaining > 0:
            remaining -= f.write(chunk[: min(len(chunk), remaining)])
    return filler


def test_no_space_during_a_checkpoint_keeps_the_previous_one_and_names_the_need(
    small_corpus, vocab_file, base_run, small_disk, tmp_path, monkeypatch
):
    """A full disk at checkpoint 6: one sentence (directory, space needed), checkpoint 4 still
    loads, no partial files; with room again the same call resumes from 4 and finishes, and
    drops the metrics line a crash cut short."""
    root = small_disk if small_disk is not None else tmp_path / "plain"
    run_dir = root / "run"
    shutil.copytree(base_run, run_dir)  # checkpoints at steps 2 and 4
    kwargs = dict(steps=6, log_every=2, checkpoint_every=2, vocab=str(vocab_file), **FAST)
    if small_disk is not None:  # the real thing: leave a third of a checkpoint free
        filler = _fill(small_disk, _checkpoint_bytes(run_dir, 4) // 3)
    else:  # no privilege to mount: fail the checkpoint write as a full disk would
        real_save = tf.train.CheckpointManager.save

        def full_disk(self, *args, **kwargs):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(run_dir / "checkpoints"))

        monkeypatch.setattr(tf.train.CheckpointManager, "save", full_disk)
    with pytest.raises(StorageError) as caught:
        pretrain([str(small_corpus)], run_dir, **kwargs)
    message = str(caught.value)
    assert message.startswith(f"Could not write checkpoint 6 to '{run_dir / 'checkpoints'}'")
    assert "(no space left on the device)" in message
    assert "a checkpoint needs about" in message and " MB" in message
    assert "previous checkpoint (step 4) is intact" in message
    assert "\n" not in message
    assert not list((run_dir / "checkpoints").glob("ckpt-6*"))
    assert load_run(run_dir)[2] == 4

    if small_disk is not None:
        filler.unlink()
    else:
        monkeypatch.setattr(tf.train.CheckpointManager, "save", real_save)
    with open(run_dir / "metrics.jsonl", "a", encoding="utf-8") as f:
        f.write('{"step": 6, "loss": 12.')  # a crash mid-write: no newline
    result = pretrain([str(small_corpus)], run_dir, **kwargs)
    assert result.step == 6 and checkpoint_steps(run_dir) == [2, 4, 6]
    assert [r["step"] for r in read_metrics(run_dir)] == [2, 4, 6]


def _checkpoint_bytes(run_dir: Path, step: int) -> int:
    """Bytes of the files of checkpoint ``step``."""
    return sum(p.stat().st_size for p in (run_dir / "checkpoints").glob(f"ckpt-{step}.*"))


def test_read_only_disk_is_one_sentence_naming_the_run_directory(
    small_corpus, vocab_file, small_disk, base_run
):
    if small_disk is None:
        pytest.skip("needs the privilege to mount a tmpfs (remounted read-only)")
    run_dir = small_disk / "run"
    shutil.copytree(base_run, run_dir)
    kwargs = dict(log_every=2, checkpoint_every=2, vocab=str(vocab_file), **FAST)
    subprocess.run(["mount", "-o", "remount,ro", str(small_disk)], check=True)
    try:
        # Refused before the model is built: the run directory cannot be written.
        with pytest.raises(StorageError, match="is on a read-only file system") as caught:
            pretrain([str(small_corpus)], run_dir, steps=6, **kwargs)
    finally:
        subprocess.run(["mount", "-o", "remount,rw", str(small_disk)], check=True)
    message = str(caught.value)
    assert f"Cannot write --output '{run_dir}'" in message and "remount it writable" in message
    assert "\n" not in message
    assert load_run(run_dir)[2] == 4


def test_checkpoint_directory_removed_during_the_run_is_one_sentence(
    small_corpus, vocab_file, base_run, tmp_path, monkeypatch
):
    run_dir = tmp_path / "run"
    shutil.copytree(base_run, run_dir)

    class RemovedAtStep5(run_module.CheckpointEvery):
        def on_train_batch_end(self, batch, logs=None):
            super().on_train_batch_end(batch, logs)
            if self.step == 5:
                shutil.rmtree(run_dir / "checkpoints")

    monkeypatch.setattr(run_module, "CheckpointEvery", RemovedAtStep5)
    kwargs = dict(log_every=2, checkpoint_every=2, vocab=str(vocab_file), **FAST)
    with pytest.raises(StorageError, match="was removed during the run") as caught:
        pretrain([str(small_corpus)], run_dir, steps=6, **kwargs)
    assert "step 4" in str(caught.value)


def test_a_corrupt_checkpoint_file_is_one_sentence_naming_it(base_run, tmp_path):
    run_dir = tmp_path / "run"
    shutil.copytree(base_run, run_dir)
    data = next((run_dir / "checkpoints").glob("ckpt-4.data-*"))
    data.write_bytes(data.read_bytes()[:1000])  # cut short, as a full disk or bad copy leaves it
    with pytest.raises(StorageError, match=r"Checkpoint '.*ckpt-4' cannot be read") as caught:
        load_run(run_dir)
    assert "\n" not in str(caught.value)


def test_a_checkpoint_missing_its_data_file_names_it(base_run, tmp_path):
    # Was: "... cannot be read (the directory was removed); ..." with the directory there.
    run_dir = tmp_path / "run"
    shutil.copytree(base_run, run_dir)
    next((run_dir / "checkpoints").glob("ckpt-4.data-*")).unlink()
    with pytest.raises(StorageError, match=r"ckpt-4' cannot be read \(its data files") as caught:
        load_run(run_dir)
    assert "removed" not in str(caught.value)


@pytest.mark.parametrize("state", ["missing", "empty", "garbled", "names a removed one"])
def test_checkpoints_without_their_state_file_resume_from_the_newest_complete_one(
    base_run, vocab_file, small_corpus, tmp_path, state, capsys
):
    # Was: export said "has no checkpoint yet; pretrain it first" (a missing or garbled
    # 'checkpoint' file; a run killed between its first checkpoint and that file leaves
    # this), an empty one a ValueError traceback, and pretrain started over at step 0,
    # overwriting the trained checkpoints.
    run_dir = tmp_path / "run"
    shutil.copytree(base_run, run_dir)
    checkpoints = run_dir / "checkpoints"
    latest, step = "ckpt-4", 4
    if state == "missing":
        (checkpoints / "checkpoint").unlink()
    elif state == "empty":
        (checkpoints / "checkpoint").write_text("")
    elif state == "garbled":
        (checkpoints / "checkpoint").write_text("garbage {{\n")
    else:
        for file in checkpoints.glob("ckpt-4.*"):
            file.unlink()
        latest, step = "ckpt-2", 2
    capsys.readouterr()
    assert load_run(run_dir)[2] == step  # export and finetune read it
    said = capsys.readouterr().err.strip()
    assert said.startswith(f"'{checkpoints}' has ") and said.endswith(
        f": using {latest}, its newest complete checkpoint; the file now names it."
    ), said
    assert tf.train.latest_checkpoint(str(checkpoints)).endswith(latest)
    kwargs = dict(log_every=2, checkpoint_every=2, vocab=str(vocab_file), **FAST)
    result = pretrain([str(small_corpus)], run_dir, steps=6, **kwargs)
    assert result.step == 6 and RunDirectory(run_dir).latest_step() == 6
    logged = [r["step"] for r in read_metrics(run_dir)]
    assert logged[-2:] == [4, 6] and logged == sorted(set(logged)), logged


def test_a_resume_without_its_state_file_says_so_once(
    base_run, vocab_file, small_corpus, tmp_path, capfd, monkeypatch
):
    # Was: two lines, one from the resume's check of the step reached, one as it restored,
    # and TensorFlow's deprecation warning; a relative run directory's state file was
    # written naming '../../ckpt-4', which the restore then could not find.
    monkeypatch.chdir(tmp_path)
    run_dir = Path("run")
    shutil.copytree(base_run, run_dir)
    (run_dir / "checkpoints" / "checkpoint").unlink()
    kwargs = dict(log_every=2, checkpoint_every=2, vocab=str(vocab_file), **FAST)
    capfd.readouterr()
    assert pretrain([str(small_corpus)], run_dir, steps=6, **kwargs).step == 6
    err = capfd.readouterr().err
    assert "deprecated" not in err
    said = [line for line in err.splitlines() if "newest complete" in line]
    assert said == [
        f"'{run_dir / 'checkpoints'}' has no 'checkpoint' file naming the latest: using "
        "ckpt-4, its newest complete checkpoint; the file now names it."
    ], said


def test_checkpoints_none_of_them_complete_are_one_sentence(base_run, tmp_path):
    run_dir = tmp_path / "run"
    shutil.copytree(base_run, run_dir)
    checkpoints = run_dir / "checkpoints"
    (checkpoints / "checkpoint").unlink()
    for file in checkpoints.glob("ckpt-*.data-*"):
        file.unlink()
    with pytest.raises(StorageError) as caught:
        load_run(run_dir)
    assert str(caught.value) == (
        f"'{checkpoints}' holds checkpoints (ckpt-2, ckpt-4), none with all its files, and "
        "has no 'checkpoint' file naming the latest; restore the files, or start a new "
        "output directory."
    )


# === Data, vocabulary, metrics log ===


def test_truncated_tfrecord_shard_is_one_sentence_naming_it(
    small_corpus, vocab_file, tmp_path, capsys
):
    from keras_electra.data import load_vocab

    records = tmp_path / "records"
    tokenizer = ElectraTokenizer(load_vocab(str(vocab_file)))
    shards = write_pretraining_tfrecords(
        [str(small_corpus)],
        tokenizer,
        str(records),
        max_seq_length=32,
        num_shards=3,
        progress=False,
    )
    shutil.copy(vocab_file, records / "vocab.txt")
    broken = Path(shards[1])
    data = broken.read_bytes()
    broken.write_bytes(data[: len(data) * 2 // 3])  # cut mid-record, as a failed copy would
    # Records whose metadata.json has no shard sizes (written before it recorded them; with
    # them the run stops before it reads: tests/test_dry_run.py): the reader finds the cut.
    metadata = json.loads((records / "metadata.json").read_text())
    del metadata["shard_bytes"]
    (records / "metadata.json").write_text(json.dumps(metadata))
    code = main(
        [
            "pretrain",
            "--corpus",
            str(records),
            "--vocab",
            str(records / "vocab.txt"),
            "--output",
            str(tmp_path / "run"),
            "--steps",
            "4",
            "--batch-size",
            "8",
            "--max-seq-length",
            "32",
            "--log-every",
            "2",
            "--no-progress",
        ]
    )
    assert code == 2
    sentence = last_sentence(capsys.readouterr().err)
    assert f"TFRecord shard '{broken}' is truncated or corrupt" in sentence, sentence
    assert "keras-electra prepare" in sentence
    # The reader's words, without TensorFlow's wrapping ({{function_node ...}}, [Op:...]).
    assert re.search(r"corrupt \(truncated record at \d+: Read less bytes", sentence), sentence
    assert "{{" not in sentence and "[Op:" not in sentence, sentence


def test_a_changed_vocabulary_is_refused_on_resume(small_corpus, vocab_file, base_run, tmp_path):
    run_dir = tmp_path / "run"
    shutil.copytree(base_run, run_dir)
    kwargs = dict(log_every=2, checkpoint_every=2, **FAST)
    # Another --vocab than the run's (same size, two tokens swapped).
    tokens = (run_dir / "vocab.txt").read_text(encoding="utf-8").splitlines()
    tokens[100], tokens[101] = tokens[101], tokens[100]
    other = tmp_path / "other_vocab.txt"
    other.write_text("\n".join(tokens) + "\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="differs from the vocabulary run"):
        pretrain([str(small_corpus)], run_dir, steps=6, vocab=str(other), **kwargs)
    # The run's own vocab.txt edited in place.
    shutil.copy(other, run_dir / "vocab.txt")
    with pytest.raises(ConfigError, match="vocab.txt has changed since the run started"):
        pretrain([str(small_corpus)], run_dir, steps=6, vocab=str(other), **kwargs)
    with pytest.raises(ConfigError, match="vocab.txt has changed"):
        load_run(run_dir)  # export and fine-tuning refuse it too


def test_an_output_inside_a_file_is_refused_before_a_vocabulary_is_learned(
    small_corpus, tiny_run, tmp_path, capsys, monkeypatch
):
    """Was: pretrain learned the vocabulary (minutes on a large corpus) before its first
    write failed, prepare ended in TensorFlow's traceback ("FailedPreconditionError:
    notes.txt is not a directory"), and export and finetune built their model or read
    their data first. Now each refuses the --output at once, in the same sentence."""
    from keras_electra.data import prepare as prepare_module

    def no_learning(*args, **kwargs):
        raise AssertionError("a vocabulary was learned for an output that cannot be written")

    monkeypatch.setattr(run_module, "learn_vocab", no_learning)
    monkeypatch.setattr(prepare_module, "learn_vocab", no_learning)
    (tmp_path / "notes.txt").write_text("not a folder\n")
    output = tmp_path / "notes.txt" / "run"
    train = tmp_path / "train.csv"
    train.write_text("text,label\nthe king,a\nthe queen,b\n", encoding="utf-8")
    for argv in (
        ["pretrain", "--preset", "tiny", "--corpus", small_corpus, "--steps", "2"],
        ["prepare", "--corpus", small_corpus, "--max-seq-length", "32"],
        ["export", "--run", tiny_run],
        ["finetune", "--run", tiny_run, "--task", "classify", "--train", train],
    ):
        status = main([str(a) for a in [*argv, "--output", output]])
        err = capsys.readouterr().err
        lines = err.strip().splitlines()
        assert status == 2 and len(lines) == 1 and "Traceback" not in err, err
        assert f"Cannot write --output '{output}'" in lines[0], err
        assert "is a file, not a folder; pass a path whose every part is a folder." in err
    assert (tmp_path / "notes.txt").read_text() == "not a folder\n"
    # predict writes its file once every prediction is made: its --output is checked first.
    for target, said in (
        (output / "p.jsonl", f"Cannot write the folder of --output '{output}': "),
        (tmp_path, f"--output '{tmp_path}' is a directory; pass a file for the predictions"),
    ):
        status = main(["predict", "--model", str(tiny_run), "--input", str(train), "--output",
                       str(target)])  # fmt: skip
        err = capsys.readouterr().err
        assert status == 2 and err.count("\n") == 1 and said in err, err


@pytest.mark.parametrize(
    "error, remedy",
    [
        (OSError(errno.ENOSPC, "No space left on device"), "free space on the disk that holds"),
        (OSError(errno.EDQUOT, "Disk quota exceeded"), "free space on the disk that holds"),
        (OSError(errno.EACCES, "Permission denied"), "fix the permissions of"),
        (OSError(errno.EROFS, "Read-only file system"), "remount the file system that holds"),
        (OSError(errno.ENOTDIR, "Not a directory"), "pass another path than"),
        (FileExistsError(errno.EEXIST, "File exists"), "pass another path than"),  # mkdir on a file
        (
            tf.errors.FailedPreconditionError(None, None, "x is not a directory"),
            "pass another path",
        ),
        (tf.errors.ResourceExhaustedError(None, None, "No space left on device"), "free space"),
        (OSError(errno.ENOENT, "No such file or directory"), "put 'runs/a' back"),
        (tf.errors.NotFoundError(None, None, "runs/a/x; No such file or directory"), "put "),
        (OSError(errno.EIO, "Input/output error"), "free space or fix the permissions of"),
    ],
)
def test_a_failed_write_names_the_remedy_for_its_reason(error, remedy):
    """Was: every failed write said "free space or fix the permissions", also for a path
    through a file or a read-only disk."""
    from keras_electra.errors import storage_remedy

    assert storage_remedy(error, "runs/a").startswith(remedy)
    assert "'runs/a'" in storage_remedy(error, "runs/a")


_UNRESTORED_AT_EXIT = """
import sys, tensorflow as tf
import keras_electra.cli as cli
path = tf.train.Checkpoint(a=tf.Variable(1.0), b=tf.Variable(2.0)).save(sys.argv[1] + "/ck")
def interrupted(args):  # a Ctrl-C while a checkpoint is half restored (export's load)
    global pending
    pending = tf.train.Checkpoint(a=tf.Variable(0.0))
    pending.restore(path)
    raise KeyboardInterrupt
parse = cli.parse_arguments
cli.parse_arguments = lambda argv=None: setattr(a := parse(argv), "func", interrupted) or a
sys.exit(cli.main(["report", sys.argv[1]]))
"""


def test_the_interrupted_sentence_is_the_last_line(tmp_path):
    # After Ctrl-C during export, TensorFlow's "being deleted with unrestored values"
    # warnings followed the sentence as the process ended.
    done = subprocess.run(
        [sys.executable, "-c", _UNRESTORED_AT_EXIT, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 130, done.stderr[-2000:]
    assert done.stderr.rstrip().splitlines()[-1] == (
        "keras-electra report: interrupted; run the command again (pretrain and finetune "
        "resume from their last checkpoint, prepare keeps the shards it finished)."
    ), done.stderr[-2000:]


@pytest.mark.parametrize("stop", ["sigterm", "ctrl-c"])
def test_a_stop_that_breaks_the_code_it_lands_in_is_still_a_stop(stop, monkeypatch, capsys):
    # A SIGTERM during prepare landed in a thread pool starting a thread, whose clean-up
    # then failed ("KeyError: <Thread(ThreadPoolExecutor-35_0 ...)>"): a traceback and
    # exit 1 instead of the stop's sentence and 75 (one try in twelve).
    from keras_electra import cli, errors

    def interrupted(args):
        try:
            if stop == "ctrl-c":
                raise KeyboardInterrupt
            raise errors.TrainingInterrupted("Stopped by SIGTERM.", 0, "SIGTERM")
        except BaseException:
            raise KeyError("<Thread(ThreadPoolExecutor-35_0, started)>") from None

    help_, description, flags, _ = cli.COMMANDS["report"]
    monkeypatch.setitem(cli.COMMANDS, "report", (help_, description, flags, interrupted))
    status = cli.main(["report", "somewhere"])
    err = capsys.readouterr().err
    assert "Traceback" not in err and "KeyError" not in err
    if stop == "ctrl-c":
        assert status == 130 and err.startswith("keras-electra report: interrupted;")
    else:
        assert status == 75 and err == "keras-electra report: Stopped by SIGTERM.\n"

    # An error with no stop behind it is not taken for one.
    def broken(args):
        raise KeyError("a bug")

    monkeypatch.setitem(cli.COMMANDS, "report", (help_, description, flags, broken))
    with pytest.raises(KeyError):
        cli.main(["report", "somewhere"])
