"""The layout of a run directory, owned in one place.

Pretraining (``keras-electra pretrain --output``), fine-tuning, ``convert`` and the
exports all read and write the same kind of directory, whose files :class:`RunDirectory`
names (its constants list them; docs/pretraining.md#the-run-directory describes them). It
writes the ones other code reads back atomically (a kill leaves the old file or the new
one, never a prefix), checks that ``config.json`` and ``vocab.txt`` belong together, and
opens the checkpoints. No other module spells a run-directory file name.

Examples:
    >>> import tempfile
    >>> run = RunDirectory(tempfile.mkdtemp())
    >>> run.has_model_files()
    False
    >>> run.write_settings({"preset": "tiny"}).name
    'run.json'
    >>> run.settings()
    {'preset': 'tiny'}
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from pathlib import Path

from keras_electra.atomic import held_directory, write_json
from keras_electra.config import OBJECTIVE_FIELDS, ElectraConfig
from keras_electra.data.vocab import load_vocab, save_vocab
from keras_electra.errors import ConfigError, read_json
from keras_electra.training.checkpoints import RunCheckpoints, latest_checkpoint, stored_layers


def _read_json(path: Path, missing):
    return read_json(path, "restore it from a copy, or start a new output directory", missing)


class _Entry:
    """A file or directory inside a run directory, read as an attribute of one."""

    def __init__(self, name: str):
        self.name = name

    def __get__(self, run: RunDirectory | None, owner=None) -> Path:
        return self if run is None else run.path / self.name


class RunDirectory:
    """One run, init or fine-tuned directory.

    Args:
        path: the directory (it need not exist yet).
    """

    CONFIG = "config.json"  # the ElectraConfig
    VOCAB = "vocab.txt"  # the WordPiece vocabulary (ids = line numbers)
    SETTINGS = "run.json"  # pretraining settings (preset, objective, seed, vocab_sha256, ...)
    FINETUNE = "finetune.json"  # fine-tuned directories only: the task, labels and settings
    LABELS = "labels.txt"  # fine-tuned directories: the label names, one per line
    METRICS = "metrics.jsonl"  # one JSON object per logging window (or epoch)
    EVAL_METRICS = "eval_metrics.json"  # fine-tuned directories: the evaluation set's metrics
    CHECKPOINTS = "checkpoints"  # model (+ optimizer) checkpoints: training/checkpoints.py
    LOGS = "logs"  # TensorBoard summaries
    RESUME = "resume"  # an interrupted fine-tuning: its own checkpoints/ and metrics.jsonl
    STATE = "state.json"  # in resume/: the interrupted fine-tuning's identity, written first
    CONVERT = "convert.json"  # directories `keras-electra convert` wrote: source and notes
    STOPPED = "stopped.json"  # a pretraining that diverged or was stopped: why, until it resumes
    SAVED_BY = "keras_electra.pretraining.save_run"  # run.json's saved_by, of save_run's

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)

    def __repr__(self) -> str:
        return f"RunDirectory('{self.path}')"

    def __fspath__(self) -> str:
        return os.fspath(self.path)

    # --- where things are: run.config_file is run.path / "config.json", and so on ---

    config_file = _Entry(CONFIG)
    vocab_file = _Entry(VOCAB)
    settings_file = _Entry(SETTINGS)
    finetune_file = _Entry(FINETUNE)
    labels_file = _Entry(LABELS)
    metrics_file = _Entry(METRICS)
    eval_metrics_file = _Entry(EVAL_METRICS)
    stopped_file = _Entry(STOPPED)
    checkpoint_dir = _Entry(CHECKPOINTS)
    logs_dir = _Entry(LOGS)
    state_file = _Entry(STATE)

    @property
    def resume_dir(self) -> RunDirectory:
        """``resume/``: an interrupted fine-tuning's checkpoints and metrics."""
        return RunDirectory(self.path / self.RESUME)

    def interrupted_finetuning(self) -> bool:
        """Whether ``resume/`` holds a fine-tuning (or its save) that was cut short."""
        return self.resume_dir.state_file.is_file()

    def model_files(self) -> dict[str, Path]:
        """``config.json`` and ``vocab.txt`` by name (what an export carries along)."""
        return {self.CONFIG: self.config_file, self.VOCAB: self.vocab_file}

    @contextmanager
    def claimed(self):
        """Hold the directory (creating it) while this process writes it
        (:func:`~keras_electra.atomic.held_directory`), and remove it afterwards if it was
        created here and nothing was written to it. A URL is not held."""
        if "://" in str(self.path):
            yield
            return
        created = not self.path.exists()
        self.path.mkdir(parents=True, exist_ok=True)
        try:
            with held_directory(self.path):
                yield
        finally:
            if created and self.path.is_dir() and not any(self.path.iterdir()):
                self.path.rmdir()

    # --- what is there ---

    def has_config(self) -> bool:
        return self.config_file.is_file()

    def require_config(self, what: str, fix: str) -> None:
        """Raise ``ConfigError("{what} (no config.json); {fix}.")`` if there is no config."""
        if not self.has_config():
            raise ConfigError(f"{what} ({self.lacks(self.CONFIG)}); {fix}.")

    def lacks(self, name: str) -> str:
        """Why a file ``name`` is not in the directory, as a message says it: ``no NAME``, or
        that the directory itself does not exist (a mistyped path) or is a file."""
        if self.path.is_dir():
            return f"no {name}"
        return "it is a file, not a directory" if self.path.exists() else "it does not exist"

    def has_model_files(self) -> bool:
        """Both ``config.json`` and ``vocab.txt`` exist."""
        return self.has_config() and self.vocab_file.is_file()

    def is_finetuned(self) -> bool:
        return self.finetune_file.is_file()

    def holds_exports(self) -> bool:
        """The directory is a SavedModel or a model's base folder of numbered SavedModel
        versions (what ``keras-electra export`` writes), not a place for a run."""
        if (self.path / "saved_model.pb").is_file():
            return True
        found = self.path.iterdir() if self.path.is_dir() else ()
        return any(p.name.isdigit() and (p / "saved_model.pb").is_file() for p in found)

    def refuse_exports(self, what: str) -> None:
        """Raise ``ConfigError`` when the directory holds exports (:meth:`holds_exports`):
        ``what`` (a run, a fine-tuned model) is not written among them."""
        if self.holds_exports():
            raise ConfigError(
                f"'{self.path}' holds exports (saved_model.pb), where TF Serving reads its "
                f"versions; choose a new --output for {what}."
            )

    def is_converted(self) -> bool:
        """Written by ``keras-electra convert --from`` (or ``--init hf:ORG/NAME``)."""
        return (self.path / self.CONVERT).is_file()

    def is_saved_from_python(self) -> bool:
        """Written by :func:`~keras_electra.pretraining.save_run` from a user's own script."""
        return self.settings().get("saved_by") == self.SAVED_BY

    def has_checkpoint(self) -> bool:
        return latest_checkpoint(self.checkpoint_dir) is not None

    def latest_step(self) -> int | None:
        """The step of the latest checkpoint, from its name (None without one)."""
        latest = latest_checkpoint(self.checkpoint_dir)
        return None if latest is None else int(latest.rsplit("-", 1)[-1])

    # --- reading ---

    def config_and_vocab(self) -> tuple[ElectraConfig, list[str]]:
        """``config.json`` and the ``vocab.txt`` tokens, checked against each other.

        Raises:
            ConfigError: when they disagree (one sentence naming the directory).
        """
        config = ElectraConfig.load(self.config_file)
        tokens = load_vocab(str(self.vocab_file))
        if len(tokens) != config.vocab_size:
            raise ConfigError(
                f"{self.vocab_file} has {len(tokens)} tokens but {self.CONFIG} says vocab_size "
                f"{config.vocab_size}; restore the directory's original files."
            )
        return config, tokens

    def settings(self) -> dict:
        """``run.json`` as a dict ({} when the directory has none)."""
        return _read_json(self.settings_file, {})

    def stored_hyperparameters(self) -> dict:
        """The objective's hyperparameters the run trained with: ``run.json``'s; for a run
        from before they were the objective's, the ones its ``config.json`` held; else
        none (the objective's defaults). A converted directory records none."""
        stored = self.settings().get("hyperparameters")
        if stored is not None:
            return dict(stored)
        config = _read_json(self.config_file, {})
        return {k: config[k] for k in OBJECTIVE_FIELDS if k in config}

    def eval_metrics(self) -> dict | None:
        """``eval_metrics.json`` (None when there is none)."""
        return _read_json(self.eval_metrics_file, None)

    def stopped(self) -> str | None:
        """Why the pretraining last ended before its ``--steps`` (the sentence it printed:
        diverged, stopped by a signal, a worker lost), None if it did not."""
        return _read_json(self.stopped_file, {}).get("message")

    # --- writing (atomically, the files other code reads back) ---

    def write_model_files(self, config: ElectraConfig, tokens: list[str]) -> None:
        """Create the directory and write ``vocab.txt`` and ``config.json``."""
        self.path.mkdir(parents=True, exist_ok=True)
        save_vocab(tokens, self.vocab_file)
        config.save(self.config_file)

    def write_settings(self, settings: dict) -> Path:
        return write_json(self.settings_file, settings)

    def write_eval_metrics(self, metrics: dict) -> Path:
        return write_json(self.eval_metrics_file, metrics)

    def record_stop(self, message: str) -> None:
        """Keep the sentence a pretraining ended with before its ``--steps`` (best effort:
        a full disk keeps the error the run raises, not this note)."""
        try:
            write_json(self.stopped_file, {"message": message})
        except OSError:
            pass

    def clear_stop(self) -> None:
        """The run trains again: an earlier stop's note no longer holds."""
        self.stopped_file.unlink(missing_ok=True)

    # --- checkpoints ---

    def checkpoints(self, model, optimizer=None, **kwargs) -> RunCheckpoints:
        """A :class:`~keras_electra.training.checkpoints.RunCheckpoints` on ``checkpoints/``."""
        return RunCheckpoints(self.checkpoint_dir, model, optimizer, **kwargs)

    def stored_objective(self) -> str | None:
        """What the latest checkpoint holds: a pretrainer of that objective (``electra``,
        ``mlm``, ``electric``), or ``None`` for the discriminator backbone alone.

        ``run.json`` records it (``pretrain`` and ``convert`` write it). Only for a
        directory without one (written before ``run.json`` existed, or by hand) is it
        guessed from the checkpoint's variable names: the cloze model's towers only
        ``electric`` has, the generator's tower only ``electra``, the heads under the
        pretrainer's name ``mlm`` too.

        Raises:
            ConfigError: when there is no checkpoint yet.
        """
        objective = self.settings().get("objective")
        if objective is not None:
            return objective
        latest = latest_checkpoint(self.checkpoint_dir)
        if latest is None:
            raise ConfigError(
                f"The directory '{self.path}' has no checkpoint yet; pretrain it first."
            )
        layers = stored_layers(latest)
        if "generator_left_to_right" in layers:  # Electric's cloze model
            return "electric"
        if "generator" in layers:
            return "electra"
        return "mlm" if "electra_pretrainer" in layers else None

    def restore_latest(self, model, what: str = "run directory") -> int:
        """Restore the latest checkpoint into ``model`` (no optimizer); return its step.

        Raises:
            ConfigError: when there is no checkpoint yet, or it does not match ``model``.
        """
        checkpoints = self.checkpoints(model)
        if checkpoints.latest is None:
            raise ConfigError(f"The {what} '{self.path}' has no checkpoint yet; pretrain it first.")
        return checkpoints.restore_latest()
