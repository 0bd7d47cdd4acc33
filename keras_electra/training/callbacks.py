"""Callbacks of a training run: metrics log (JSON lines + TensorBoard), checkpoints."""

from __future__ import annotations

import json
import math
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

import keras
import tensorflow as tf
from tqdm.auto import tqdm

from keras_electra.atomic import write_atomic
from keras_electra.errors import StorageError, TrainingDiverged, storage_reason, storage_remedy
from keras_electra.training.checkpoints import RunCheckpoints


def read_metrics_records(path: str | Path) -> list[dict]:
    """The records of the metrics log ``path`` (none if it does not exist); a line cut
    short by a crash or a full disk, or not UTF-8 (a damaged disk block), is skipped."""
    path = Path(path)
    if not path.exists():
        return []
    records = []
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and isinstance(record.get("step"), int):
            records.append(record)
    return records


def truncate_metrics_log(path: str | Path, last_step: int) -> None:
    """Drop log lines past ``last_step`` (written after the checkpoint a run resumes from),
    and lines cut short by a crash or a full disk; the file is rewritten atomically.

    Raises:
        StorageError: if the file cannot be rewritten.
    """
    path = Path(path)
    if not path.exists():
        return
    kept = [r for r in read_metrics_records(path) if r["step"] <= last_step]
    try:
        write_atomic(path, "".join(json.dumps(r) + "\n" for r in kept))
    except OSError as e:
        raise StorageError(
            f"Could not rewrite '{path}' ({storage_reason(e)}); "
            f"{storage_remedy(e, path.parent)}, then rerun the same command."
        ) from None


def truncate_tensorboard_logs(directory: str | Path, last_step: int) -> None:
    """Drop the TensorBoard scalars past ``last_step`` from the event files under
    ``directory`` (a killed process's windows after the checkpoint a run resumes from:
    TensorBoard would draw two points at their steps, as metrics.jsonl no longer has
    them); a file that changes is rewritten whole, then renamed over the old one.

    Raises:
        StorageError: if a file cannot be rewritten.
    """
    directory = str(directory)
    if not tf.io.gfile.isdir(directory):
        return
    paths = [
        os.path.join(folder, name)
        for folder, _, names in tf.io.gfile.walk(directory)
        for name in names
        if name.startswith("events.out.tfevents.")
    ]
    for path in paths:
        events, dropped = [], False
        try:
            for raw in tf.data.TFRecordDataset(path).as_numpy_iterator():
                event = tf.compat.v1.Event.FromString(raw)
                if event.HasField("summary") and event.step > last_step:
                    dropped = True
                else:
                    events.append(raw)
        except tf.errors.DataLossError:  # the killed process's last record cut short
            dropped = True
        if not dropped:
            continue
        try:
            with tf.io.TFRecordWriter(path + ".tmp") as writer:
                for raw in events:
                    writer.write(raw)
            tf.io.gfile.rename(path + ".tmp", path, overwrite=True)
        except (OSError, tf.errors.OpError) as e:
            raise StorageError(
                f"Could not rewrite '{path}' ({storage_reason(e)}); "
                f"{storage_remedy(e, Path(directory))}, then rerun the same command."
            ) from None


def plan_windows(start: int, steps: int, log_every: int) -> list[tuple[int, int, int]]:
    """The ``fit`` calls ``(first_step, steps_per_window, windows)`` that train steps
    ``start+1 .. steps`` in windows ending at multiples of ``log_every`` (and at ``steps``).

    Examples:
        >>> plan_windows(0, 25, 10)
        [(0, 10, 2), (20, 5, 1)]
        >>> plan_windows(47, 125, 10)
        [(47, 3, 1), (50, 10, 7), (120, 5, 1)]
    """
    plan = []
    step = start
    if step % log_every and step < steps:
        head = min(log_every - step % log_every, steps - step)
        plan.append((step, head, 1))
        step += head
    full = (steps - step) // log_every
    if full > 0:
        plan.append((step, log_every, full))
        step += full * log_every
    if step < steps:
        plan.append((step, steps - step, 1))
    return plan


class MetricsLogger(keras.callbacks.Callback):
    """Writes one JSON object per logging window (an epoch of ``fit``) to ``path`` (None:
    in memory only, a non-chief worker) and TensorBoard; a loss that is not finite stops
    the run.

    ``measure`` is called at every window's end for more metrics (the run-health probe;
    its time is ``health_seconds``); ``warnings`` maps the records so far to warnings
    (``step``, ``message``), and those of this window's step are printed and recorded.
    """

    def __init__(
        self,
        path: str | Path | None,
        tensorboard_dir: str | Path | None,
        tokens_per_step: int,
        total_steps: int,
        initial_step: int = 0,
        progress: bool = True,
        measure: Callable[[], dict] | None = None,
        warnings: Callable[[list[dict]], list[dict]] | None = None,
    ):
        super().__init__()
        self.measure = measure
        self.warnings = warnings
        self.path = Path(path) if path is not None else None
        self.tokens_per_step = tokens_per_step
        self.writer = None
        self.tensorboard_dir = tensorboard_dir
        if tensorboard_dir:
            self.writer = tf.summary.create_file_writer(str(tensorboard_dir))
        self.step = initial_step
        # A resumed run's records so far (truncate_metrics_log kept those up to its
        # checkpoint): the collapse rules count windows across the restart, as the report does.
        resumed = initial_step and self.path is not None
        self.history: list[dict] = read_metrics_records(self.path) if resumed else []
        # A resumed process's first window traces again: its record says it restarted.
        self._restarted = bool(initial_step)
        self._cut_short = False  # recording a window a refused step ended (record_cut_short)
        self._bar = progress_bar("pretrain", total_steps, initial_step, progress)

    def on_train_begin(self, logs=None):
        # A fit's first execution traces (and compiles) the step function: seconds that are
        # not throughput. Its window's rate is measured from the end of that execution (its
        # steps_per_execution steps, replayed one by one: training/per_step.py).
        self._tracing = getattr(self.model, "steps_per_execution", 1)

    def on_epoch_begin(self, epoch, logs=None):
        self._window_start = time.perf_counter()
        self._window_steps = 0
        self._after_trace: tuple[float, int] | None = None

    def on_train_batch_end(self, batch, logs=None):
        self._window_steps += 1
        self._bar.update(1)
        if getattr(self, "_tracing", 0):
            self._tracing -= 1
            if not self._tracing:
                self._after_trace = (time.perf_counter(), self._window_steps)

    def on_epoch_end(self, epoch, logs=None):
        now = time.perf_counter()
        elapsed = now - self._window_start
        self.step += self._window_steps
        record = {"step": self.step}
        start, done = self._window_start, 0
        if self._after_trace is not None and self._window_steps > self._after_trace[1]:
            start, done = self._after_trace  # the steps after the traced one
        rate = self.tokens_per_step * (self._window_steps - done) / max(now - start, 1e-9)
        record["tokens_per_sec"] = round(rate, 1)
        record.update({k: float(v) for k, v in (logs or {}).items()})
        record["learning_rate"] = float(self.model.optimizer.learning_rate)
        if self.measure is not None:
            start = time.perf_counter()
            record.update(self.measure())
            record["health_seconds"] = round(time.perf_counter() - start, 4)
            record["window_seconds"] = round(elapsed, 4)
        if self._restarted:
            record["resumed"] = True
            self._restarted = False
        # A window a refused step cut short is recorded as it is: that step stopped the run.
        diverged = None if self._cut_short else self._divergence(record)
        if diverged is None and self.warnings is not None:
            raised = [w for w in self.warnings(self.history + [record]) if w["step"] == self.step]
            if raised:
                record["warnings"] = [w["message"] for w in raised]
                for w in raised:
                    self._bar.write(f"WARNING (step {self.step}): {w['message']}", file=sys.stderr)
        if self.path is not None:
            self._append(record)
        if self.writer is not None:
            try:
                with self.writer.as_default():
                    for name, value in record.items():
                        plain = isinstance(value, float | int) and not isinstance(value, bool)
                        if name != "step" and plain:
                            tf.summary.scalar(name, value, step=self.step)
                self.writer.flush()
            except tf.errors.OpError as e:
                what = "write the TensorBoard summaries"
                raise self._write_failed(what, self.tensorboard_dir, e) from None
        if diverged is not None:  # its window recorded first: the gradient norms that led there
            raise TrainingDiverged(diverged)
        self.history.append(record)
        shown = {k: f"{record[k]:.3f}" for k in ("loss", "disc_auc", "mlm_accuracy") if k in record}
        self._bar.set_postfix(shown, refresh=False)

    def _divergence(self, record: dict) -> str | None:
        """The sentence that stops a run whose window ``record`` diverged, else None."""
        # The fix: a lower rate, or float32 for a run in a mixed precision.
        mixed = self.model.dtype_policy.name != "float32"
        fix = "lower --learning-rate" + (" or use --precision float32" if mixed else "")
        fix += ", then run the command again with the new flag to resume from the last checkpoint"
        if not math.isfinite(record.get("loss", 0.0)):
            return (
                f"Training diverged in the window ending at step {self.step} (its mean loss is "
                f"{record['loss']}), so no checkpoint was written; {fix}."
            )
        if record.get("skipped_steps", 0) >= self._window_steps:
            return (
                f"Training diverged: every step of the window ending at step {self.step} had a "
                f"non-finite loss or gradient norm and was skipped, so no checkpoint was "
                f"written; {fix}."
            )
        return None

    def record_cut_short(self) -> None:
        """Record the window a refused step cut short (a non-finite loss or gradient norm
        under ``--on-nan stop``): its steps before that one, with the metrics they reached,
        so the run's records show what led there. Nothing when no step of it trained."""
        if not getattr(self, "_window_steps", 0):  # set by the window's first batch
            return
        self._cut_short = True
        try:
            self.on_epoch_end(0, self.model.get_metrics_result())
        finally:
            self._cut_short = False

    def _append(self, record: dict) -> None:
        """Append one line and sync it; a line cut short (full disk, crash) is dropped on resume."""
        try:
            with self.path.open("a", encoding="utf-8") as f:
                f.write(json.dumps(record) + "\n")
                f.flush()
                os.fsync(f.fileno())
        except OSError as e:
            raise self._write_failed("append the metrics", self.path, e) from None

    def _write_failed(self, what: str, where, error: BaseException) -> StorageError:
        return StorageError(
            f"Could not {what} of step {self.step} to '{where}' ({storage_reason(error)}); free "
            "space or fix the permissions there, then rerun the same command to resume from the "
            "last checkpoint."
        )

    def close(self) -> None:
        self._bar.close()


def progress_bar(name: str, total: int, initial: int, show: bool) -> tqdm:
    """A run's progress bar on stderr: steps done of ``total``, steps/s and the time
    left; on a terminal it redraws often, in a log file it adds a line every 30 s."""
    return tqdm(
        total=total,
        initial=initial,
        desc=name,
        unit="step",
        disable=not show,
        dynamic_ncols=True,
        mininterval=0.1 if sys.stderr.isatty() else 30.0,
    )


class CheckpointEvery(keras.callbacks.Callback):
    """Saves a checkpoint every ``every`` steps (None: never; checked at window ends), at
    ``final_step``, and at the end of a window cut short once ``stopping()`` is True.

    Steps count batches trained, not optimizer updates (a skipped float16 step still uses
    its batch). Weights that are not finite are never saved: that raises
    :class:`~keras_electra.errors.TrainingDiverged` and keeps the previous checkpoint.
    """

    def __init__(
        self,
        checkpoints: RunCheckpoints,
        every: int | None,
        final_step: int,
        initial_step: int = 0,
        stopping: Callable[[], bool] | None = None,
    ):
        super().__init__()
        self.checkpoints = checkpoints
        self.every = every
        self.final_step = final_step
        self.step = initial_step
        self.saved_step = initial_step
        self.stopping = stopping or (lambda: False)

    def on_train_batch_end(self, batch, logs=None):
        self.step += 1

    def on_epoch_end(self, epoch, logs=None):
        every = self.every is not None and self.step % self.every == 0
        if every or self.step >= self.final_step or self.stopping():
            self.save()

    def save(self) -> None:
        """Save at the current step (once)."""
        if self.saved_step == self.step and self.checkpoints.latest is not None:
            return
        bad = [
            v.path
            for v in self.model.variables
            if v.dtype.startswith("float") and not bool(tf.reduce_all(tf.math.is_finite(v)))
        ]
        if bad:
            raise TrainingDiverged(
                f"The weights are not finite at step {self.step} (first: {bad[0]}), so no "
                "checkpoint was written and the last one is kept; lower --learning-rate or use "
                "--precision float32, then rerun to resume from it."
            )
        self.checkpoints.save(self.step)
        self.saved_step = self.step
