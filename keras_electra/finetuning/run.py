"""Fine-tune a pretrained ELECTRA discriminator end to end, and load the result.

:func:`finetune` writes ``OUTPUT_DIR`` with everything needed to predict and to
export:

- ``config.json``, ``vocab.txt``: the backbone's configuration and vocabulary;
- ``finetune.json``: the task, labels, columns and settings
  (:class:`~keras_electra.finetuning.settings.FinetuneSettings`);
- ``labels.txt``: one class (or tag) name per line, in output order;
- ``checkpoints/``: the fine-tuned weights, keyed by variable path;
- ``eval_metrics.json``: metric name -> value on the ``--eval`` file;
- ``metrics.jsonl``: the training loss and metrics of each epoch.

Example:
    >>> result = finetune("runs/demo", "classify", "train.tsv", "dev.tsv",
    ...                   "runs/sst2", text_column="sentence")  # doctest: +SKIP
    >>> result.metrics["accuracy"]  # doctest: +SKIP
    0.81
"""

from __future__ import annotations

import json
import math
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import keras

from keras_electra.config import ElectraConfig
from keras_electra.data import ElectraTokenizer
from keras_electra.errors import ConfigError
from keras_electra.finetuning.layerwise import create_finetune_optimizer
from keras_electra.finetuning.settings import (
    FINETUNE_FILE,
    TASK_EPOCHS,
    FinetuneSettings,
    check_task,
    infer_preset,
    recipe_defaults,
)
from keras_electra.finetuning.source import load_backbone, read_source
from keras_electra.finetuning.tasks import Task, get_task
from keras_electra.layers.backbone import ElectraBackbone
from keras_electra.training.checkpoints import RunCheckpoints


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

    def predict_examples(self, examples: list, batch_size: int = 64) -> list[dict]:
        """Predictions for examples read with ``self.task.read(..., labelled=False)``."""
        return self.task.predict(self.model, examples, self.tokenizer, self.settings, batch_size)


def _source_preset(source: Path, config: ElectraConfig) -> str:
    run = source / "run.json"
    if run.is_file():
        preset = json.loads(run.read_text(encoding="utf-8")).get("preset")
        if preset:
            return preset
    if (source / FINETUNE_FILE).is_file():
        preset = FinetuneSettings.load(source / FINETUNE_FILE).training.get("preset")
        if preset:
            return preset
    return infer_preset(config)


def _positive(name: str, value: float) -> None:
    if value is None or value <= 0:
        raise ConfigError(f"--{name.replace('_', '-')} must be positive, got {value}.")


def finetune(
    source: str | Path,
    task: str,
    train: str | Path,
    eval: str | Path | None = None,  # noqa: A002 - the command's flag name
    output_dir: str | Path | None = None,
    *,
    text_column: str = "text",
    text_pair_column: str | None = None,
    label_column: str = "label",
    epochs: int | None = None,
    batch_size: int | None = None,
    learning_rate: float | None = None,
    max_seq_length: int = 128,
    layer_decay: float | None = None,
    weight_decay: float | None = None,
    warmup_fraction: float | None = None,
    dropout: float | None = None,
    version_2: bool = False,
    doc_stride: int = 128,
    max_query_length: int = 64,
    max_answer_length: int = 30,
    seed: int = 0,
    progress: bool = True,
) -> FinetunedModel:
    """Fine-tune a pretrained discriminator on a task; evaluate and save it.

    Unset hyperparameters take the paper's defaults for the source's model size
    (see :mod:`keras_electra.finetuning.settings`).

    Args:
        source: a pretraining run (or init) directory.
        task: ``classify``, ``regress``, ``tag`` or ``qa``.
        train: training file (TSV/CSV/JSONL for classify/regress, CoNLL for tag,
            SQuAD JSON for qa).
        eval: evaluation file in the same format; its metrics go to
            ``eval_metrics.json``.
        output_dir: where to write the fine-tuned model (None: do not save).
        text_column, text_pair_column, label_column: table columns (names or indexes).
        epochs, batch_size, learning_rate, layer_decay, weight_decay,
            warmup_fraction, dropout: training hyperparameters.
        max_seq_length: tokens per example, ``[CLS]``/``[SEP]`` included.
        version_2: QA with unanswerable questions (SQuAD 2.0).
        doc_stride, max_query_length, max_answer_length: QA settings.
        seed: seeds the head's initial weights, dropout and the data order.
        progress: print one line per epoch.

    Returns:
        A :class:`FinetunedModel` with the trained model and ``metrics``.

    Example:
        >>> result = finetune("runs/demo", "classify", "train.csv", "dev.csv", "runs/cls",
        ...                   epochs=3)  # doctest: +SKIP
    """
    check_task(task)
    source = Path(source)
    config, tokenizer = read_source(source)
    preset = _source_preset(source, config)
    defaults = recipe_defaults(preset)
    hyper = {
        "epochs": epochs or TASK_EPOCHS.get(task, int(defaults["epochs"])),
        "batch_size": batch_size or int(defaults["batch_size"]),
        "learning_rate": learning_rate or defaults["learning_rate"],
        "layer_decay": defaults["layer_decay"] if layer_decay is None else layer_decay,
        "weight_decay": defaults["weight_decay"] if weight_decay is None else weight_decay,
        "warmup_fraction": defaults["warmup_fraction"]
        if warmup_fraction is None
        else warmup_fraction,
    }
    for name in ("epochs", "batch_size", "learning_rate", "layer_decay"):
        _positive(name, hyper[name])
    dropout = defaults["dropout"] if dropout is None else dropout
    if not 0.0 <= dropout < 1.0:
        raise ConfigError(f"--dropout must be in [0, 1), got {dropout}.")
    if not 8 <= max_seq_length <= config.max_position_embeddings:
        raise ConfigError(
            f"--max-seq-length must be between 8 and {config.max_position_embeddings} (the "
            f"model's position table), got {max_seq_length}."
        )
    settings = FinetuneSettings(
        task=task,
        max_seq_length=max_seq_length,
        text_column=text_column,
        text_pair_column=text_pair_column,
        label_column=label_column,
        dropout=dropout,
        version_2=version_2,
        doc_stride=doc_stride,
        max_query_length=max_query_length,
        max_answer_length=max_answer_length,
        training={**hyper, "preset": preset, "seed": seed},
        source=str(source),
    )
    handler = get_task(task)

    # Read and check all data before any training starts.
    train_examples = handler.read(train, settings)
    eval_examples = handler.read(eval, settings) if eval is not None else None
    handler.set_labels(train_examples, settings)
    x, y, _ = handler.encode(train_examples, tokenizer, settings)
    if eval_examples is not None:
        handler.encode(eval_examples, tokenizer, settings)  # unseen labels fail here

    keras.utils.set_random_seed(seed)
    backbone, tokenizer, config = load_backbone(source, dropout=dropout)
    model = handler.build_model(backbone, settings)
    num_rows = len(next(iter(x.values())))
    steps = math.ceil(num_rows / hyper["batch_size"]) * hyper["epochs"]
    optimizer = create_finetune_optimizer(
        model,
        backbone,
        learning_rate=hyper["learning_rate"],
        total_steps=steps,
        warmup_fraction=hyper["warmup_fraction"],
        layer_decay=hyper["layer_decay"],
        weight_decay=hyper["weight_decay"],
    )
    model.compile(optimizer=optimizer, loss=handler.loss(settings), jit_compile=False)
    history = model.fit(
        x,
        y,
        batch_size=hyper["batch_size"],
        epochs=hyper["epochs"],
        shuffle=True,
        verbose=2 if progress else 0,
    )
    result = FinetunedModel(
        model,
        tokenizer,
        settings,
        handler,
        config,
        history={k: [float(v) for v in values] for k, values in history.history.items()},
    )
    if eval_examples is not None:
        result.metrics = handler.evaluate(model, eval_examples, tokenizer, settings)
    if output_dir is not None:
        result.output_dir = save_finetuned(result, output_dir, steps)
    return result


def save_finetuned(result: FinetunedModel, output_dir: str | Path, step: int = 0) -> Path:
    """Write a fine-tuned model's directory (see the module docstring); return it."""
    out = Path(output_dir)
    if (out / "config.json").exists() and not (out / FINETUNE_FILE).exists():
        raise ConfigError(
            f"'{out}' holds a pretraining run; choose a new --output for the fine-tuned model."
        )
    out.mkdir(parents=True, exist_ok=True)
    result.config.save(out / "config.json")
    (out / "vocab.txt").write_text(
        "".join(t + "\n" for t in result.tokenizer.vocab), encoding="utf-8"
    )
    (out / "labels.txt").write_text(
        "".join(x + "\n" for x in result.settings.labels), encoding="utf-8"
    )
    shutil.rmtree(out / "checkpoints", ignore_errors=True)
    RunCheckpoints(out / "checkpoints", result.model, optimizer=None).save(step)
    _write_history(out / "metrics.jsonl", result.history, step)
    metrics_path = out / "eval_metrics.json"
    tmp = metrics_path.with_name(metrics_path.name + ".tmp")
    tmp.write_text(json.dumps(result.metrics, indent=2) + "\n", encoding="utf-8")
    tmp.replace(metrics_path)
    result.settings.save(out / FINETUNE_FILE)  # last: its presence marks a complete directory
    return out


def _write_history(path: Path, history: dict[str, list[float]], steps: int) -> None:
    """One ``metrics.jsonl`` line per epoch (``keras-electra report`` draws them)."""
    epochs = max((len(v) for v in history.values()), default=0)
    lines = []
    for epoch in range(epochs):
        record = {"step": round(steps * (epoch + 1) / epochs), "epoch": epoch + 1}
        record.update({k: v[epoch] for k, v in history.items() if epoch < len(v)})
        lines.append(json.dumps(record) + "\n")
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text("".join(lines), encoding="utf-8")
    tmp.replace(path)


def is_finetuned_dir(path: str | Path) -> bool:
    """Whether ``path`` is a directory written by :func:`finetune`."""
    return (Path(path) / FINETUNE_FILE).is_file()


def load_finetuned(output_dir: str | Path) -> FinetunedModel:
    """Load a fine-tuned model directory written by :func:`finetune`.

    Example:
        >>> loaded = load_finetuned("runs/sst2")  # doctest: +SKIP
        >>> loaded.settings.labels  # doctest: +SKIP
        ['0', '1']
    """
    out = Path(output_dir)
    if not is_finetuned_dir(out):
        raise ConfigError(
            f"'{out}' is not a fine-tuned model directory (no {FINETUNE_FILE}); pass the "
            "--output of `keras-electra finetune`."
        )
    settings = FinetuneSettings.load(out / FINETUNE_FILE)
    config, tokenizer = read_source(out)
    handler = get_task(settings.task)
    model = handler.build_model(ElectraBackbone(config), settings)
    checkpoints = RunCheckpoints(out / "checkpoints", model, optimizer=None)
    if checkpoints.latest is None:
        raise ConfigError(f"'{out}' has no checkpoint; fine-tune again to write one.")
    checkpoints.restore_latest()
    metrics = {}
    if (out / "eval_metrics.json").is_file():
        metrics = json.loads((out / "eval_metrics.json").read_text(encoding="utf-8"))
    return FinetunedModel(model, tokenizer, settings, handler, config, out, metrics)


def predict_file(
    model_dir: str | Path,
    input_path: str | Path,
    output_path: str | Path | None = None,
    *,
    batch_size: int = 64,
) -> list[dict]:
    """Run a fine-tuned model on a file (same format and columns as training) to JSON lines.

    Labels in the file are ignored. Returns the predictions; writes them to
    ``output_path`` (one JSON object per line) when given.

    Example:
        >>> predict_file("runs/sst2", "test.tsv", "predictions.jsonl")[0]["label"]  # doctest: +SKIP
        '1'
    """
    loaded = load_finetuned(model_dir)
    examples = loaded.task.read(input_path, loaded.settings, labelled=False)
    rows = loaded.predict_examples(examples, batch_size)
    if output_path is not None:
        path = Path(output_path)
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("w", encoding="utf-8") as f:
            for row in rows:
                f.write(json.dumps(row, ensure_ascii=False) + "\n")
    return rows
