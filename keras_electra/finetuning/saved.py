"""A fine-tuned model directory: a run directory (:mod:`keras_electra.run_directory`)
plus ``finetune.json``, written last so that a directory that has it is complete."""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import keras

from keras_electra.atomic import check_writable, write_atomic
from keras_electra.config import ElectraConfig
from keras_electra.data import ElectraTokenizer
from keras_electra.errors import ConfigError, InputDataError
from keras_electra.finetuning.settings import FinetuneSettings
from keras_electra.finetuning.tasks import Task, get_task
from keras_electra.layers.backbone import ElectraBackbone
from keras_electra.limits import MAX_BATCH_SIZE
from keras_electra.run_directory import RunDirectory


@dataclass
class FinetunedModel:
    """A fine-tuned model with what it needs to read inputs and name outputs."""

    model: keras.Model
    tokenizer: ElectraTokenizer
    settings: FinetuneSettings
    task: Task
    config: ElectraConfig
    output_dir: Path | None = None
    metrics: dict = field(default_factory=dict)
    history: dict = field(default_factory=dict)
    # One record per epoch (and per stretch of one cut by a stop): step, epoch, metrics.
    records: list = field(default_factory=list)

    def predict_examples(self, examples: list, batch_size: int = MAX_BATCH_SIZE) -> list[dict]:
        """Predictions for examples read with ``self.task.read(..., labelled=False)``, the
        model run on ``batch_size`` of them at a time.

        Raises:
            ConfigError: ``batch_size`` is below 1.
        """
        if batch_size < 1:
            raise ConfigError(f"--batch-size must be 1 or more, got {batch_size}.")
        if isinstance(examples, str | bytes | dict):
            raise InputDataError("Pass a list of examples, not one; wrap it: [example].")
        examples = [self.task.example(e, n, self.settings) for n, e in enumerate(examples, 1)]
        if not examples:
            return []  # (Keras' predict fails on no batch)
        return self.task.predict(self.model, examples, self.tokenizer, self.settings, batch_size)


def check_output_dir(output_dir: str | Path) -> RunDirectory:
    """``output_dir`` as a run directory a fine-tuned model may be written to: new, or a
    fine-tuned model's (which it replaces); never a pretraining run, a converted model or
    exports.

    Raises:
        ConfigError: ``output_dir`` holds a model that is not a fine-tuned one, or exports.
        StorageError: ``output_dir`` cannot be written (before any data is read).
    """
    run = RunDirectory(output_dir)
    run.refuse_exports("the fine-tuned model")
    saving = run.interrupted_finetuning()  # a fine-tuning, or its save, cut short
    if run.has_config() and not run.is_finetuned() and not saving:
        raise ConfigError(
            f"'{run.path}' holds a pretraining run; choose a new --output for the fine-tuned model."
        )
    if not run.is_finetuned() and (others := _not_written_by_finetuning(run, saving)):
        shown = ", ".join(others[:3]) + (f" and {len(others) - 3} more" if len(others) > 3 else "")
        raise ConfigError(
            f"--output '{run.path}' holds files fine-tuning did not write ({shown}), which it "
            "could replace or remove; choose a new or empty --output for the fine-tuned model."
        )
    check_writable(run.path)
    return run


# What a fine-tuning writes into its --output (a finished model, or resume/ while it runs).
_FINETUNING_WRITES = {
    RunDirectory.CONFIG,
    RunDirectory.VOCAB,
    RunDirectory.FINETUNE,
    RunDirectory.LABELS,
    RunDirectory.METRICS,
    RunDirectory.EVAL_METRICS,
    RunDirectory.CHECKPOINTS,
    RunDirectory.RESUME,
}


def _not_written_by_finetuning(run: RunDirectory, interrupted: bool) -> list[str]:
    """The entries of ``run``'s directory (not yet a fine-tuned model) that no fine-tuning
    wrote: anything but its own names, and a ``resume/`` or ``checkpoints/`` folder that
    is not an ``interrupted`` fine-tuning's (its ``resume/state.json`` written first)."""
    if not run.path.is_dir():
        return []
    found = sorted(p.name for p in run.path.iterdir())
    others = [
        f"{name}/" if (run.path / name).is_dir() else name
        for name in found
        if name.removesuffix(".tmp") not in _FINETUNING_WRITES  # ".tmp": a killed write's
    ]
    for name in (RunDirectory.RESUME, RunDirectory.CHECKPOINTS):
        folder = run.path / name
        if folder.is_dir() and not interrupted and any(folder.iterdir()):
            others.append(f"{name}/")
    return others


def save_finetuned(result: FinetunedModel, output_dir: str | Path, step: int = 0) -> Path:
    """Write a fine-tuned model's directory; return it."""
    run = check_output_dir(output_dir)
    # finetune.json marks a complete directory: gone until the new one is whole, so a save
    # cut short is never read as a model (old files beside new checkpoints), and the same
    # command finishes it from resume/.
    run.finetune_file.unlink(missing_ok=True)
    run.write_model_files(result.config, result.tokenizer.vocab)
    write_atomic(run.labels_file, "".join(x + "\n" for x in result.settings.labels))
    shutil.rmtree(run.checkpoint_dir, ignore_errors=True)
    run.checkpoints(result.model).save(step)
    _write_history(run.metrics_file, result.history, step, result.records)
    run.write_eval_metrics(result.metrics)
    result.settings.save(run.finetune_file)  # last: its presence marks a complete directory
    return run.path


def _write_history(
    path: Path, history: dict[str, list[float]], steps: int, records: list | None = None
) -> None:
    """One ``metrics.jsonl`` line per epoch: ``records`` as they are, else from ``history``."""
    lines = [json.dumps(record) + "\n" for record in records or []]
    epochs = max((len(v) for v in history.values()), default=0) if not records else 0
    for epoch in range(epochs):
        record = {"step": round(steps * (epoch + 1) / epochs), "epoch": epoch + 1}
        record.update({k: v[epoch] for k, v in history.items() if epoch < len(v)})
        lines.append(json.dumps(record) + "\n")
    write_atomic(path, "".join(lines))


def is_finetuned_dir(path: str | Path) -> bool:
    """Whether ``path`` is a directory written by :func:`~keras_electra.finetuning.finetune`."""
    return RunDirectory(path).is_finetuned()


def load_finetuned(output_dir: str | Path) -> FinetunedModel:
    """Load a fine-tuned model directory written by :func:`~keras_electra.finetuning.finetune`.

    Examples:
        >>> loaded = load_finetuned("runs/sst2")  # doctest: +SKIP
        >>> loaded.settings.labels  # doctest: +SKIP
        ['0', '1']
    """
    run = RunDirectory(output_dir)
    if not run.is_finetuned():
        raise ConfigError(
            f"'{run.path}' is not a fine-tuned model directory ({run.lacks(run.FINETUNE)}); "
            "pass the --output of `keras-electra finetune`."
        )
    settings = FinetuneSettings.load(run.finetune_file)
    config, tokens = run.config_and_vocab()
    tokenizer = ElectraTokenizer(tokens, lowercase=config.lowercase)
    handler = get_task(settings.task)
    model = handler.build_model(ElectraBackbone(config), settings)
    checkpoints = run.checkpoints(model)
    if checkpoints.latest is None:
        raise ConfigError(f"'{run.path}' has no checkpoint; fine-tune again to write one.")
    checkpoints.restore_latest()
    metrics = run.eval_metrics() or {}
    return FinetunedModel(model, tokenizer, settings, handler, config, run.path, metrics)
