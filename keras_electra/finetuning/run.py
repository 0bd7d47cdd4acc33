"""Fine-tune a pretrained ELECTRA discriminator (:func:`finetune`), and predict with the
result (:func:`predict_file`); a stop by signal resumes (docs/reliability.md)."""

from __future__ import annotations

import hashlib
import json
import math
import os
import shutil
import sys
from contextlib import nullcontext
from dataclasses import asdict
from pathlib import Path

import keras
import numpy as np
import tensorflow as tf

from keras_electra import kernels
from keras_electra.atomic import check_writable, write_json
from keras_electra.convert.hub import local_init
from keras_electra.data import fit_options
from keras_electra.data.pretraining import no_autograph
from keras_electra.errors import ConfigError, TrainingDiverged, TrainingInterrupted, read_json
from keras_electra.finetuning.layerwise import create_finetune_optimizer
from keras_electra.finetuning.plan import FinetunePlan
from keras_electra.finetuning.saved import (
    FinetunedModel,
    check_output_dir,
    load_finetuned,
    save_finetuned,
)
from keras_electra.finetuning.settings import FinetuneSettings, infer_preset
from keras_electra.finetuning.source import read_source, restore_backbone
from keras_electra.finetuning.tasks import get_task
from keras_electra.limits import MAX_BATCH_SIZE
from keras_electra.run_directory import RunDirectory
from keras_electra.scoring import find_export, latest_version_dir, score_with_saved_model
from keras_electra.serving.warmup import ASSETS_EXTRA
from keras_electra.settings import FinetuneOptions, check_task, with_options
from keras_electra.training.callbacks import (
    CheckpointEvery,
    plan_windows,
    progress_bar,
    read_metrics_records,
    truncate_metrics_log,
)
from keras_electra.training.checkpoints import RunCheckpoints
from keras_electra.training.optimizer import AdamW, adamw_arguments
from keras_electra.training.preemption import StopOnSignal, StopRequest


def finetune(
    source: str | Path,
    task: str,
    train: str | Path,
    eval: str | Path | None = None,  # noqa: A002 - the command's flag name
    output_dir: str | Path | None = None,
    *,
    options: FinetuneOptions | None = None,
    stop_on_signals: bool = True,
    **keywords,
) -> FinetunedModel | FinetunePlan:
    """Fine-tune a pretrained discriminator on a task; evaluate and save it.

    The options are the fields of :class:`~keras_electra.settings.FinetuneOptions`,
    given as keywords or as one ``options`` object (``keras-electra finetune``'s flags
    are generated from it). Unset hyperparameters take the paper's defaults for the
    source's model size (:func:`~keras_electra.settings.recipe_defaults`).

    Args:
        source: a pretraining run (or init) directory, or a Hugging Face model
            (``hf:ORG/NAME``, fetched and converted once: :mod:`keras_electra.convert.hub`).
        task: ``classify``, ``regress``, ``tag`` or ``qa``.
        train: training file (TSV/CSV/JSONL for classify/regress, CoNLL for tag,
            SQuAD JSON for qa).
        eval: evaluation file in the same format; its metrics go to
            ``eval_metrics.json``.
        output_dir: where to write the fine-tuned model (None: do not save).
        options: the run's options (default: ``FinetuneOptions(**keywords)``).
        stop_on_signals: with an ``output_dir``, SIGTERM and SIGINT finish the
            step and save it to ``output_dir/resume/``; the same call resumes there.
        **keywords: options by name (``epochs=3``, ``text_column="sentence"``, ...);
            with ``options``, they replace its fields.

    Raises:
        TrainingInterrupted: stopped by SIGTERM/SIGINT; the same call resumes.
        TrainingDiverged: the loss became NaN or infinite (nothing is saved).

    Returns:
        A :class:`FinetunedModel` with the trained model and ``metrics``; with
        ``dry_run=True``, the :class:`~keras_electra.finetuning.plan.FinetunePlan`
        (the checks of a run before it trains; nothing trained or written).

    Examples:
        >>> result = finetune("runs/demo", "classify", "train.csv", "dev.csv", "runs/cls",
        ...                   epochs=3)  # doctest: +SKIP
    """
    options = with_options("finetune", FinetuneOptions, options, **keywords)
    for name, value in (("source", source), ("train", train), ("eval", eval)):
        if not (value is None and name == "eval") and not isinstance(value, str | os.PathLike):
            raise TypeError(
                f"finetune's {name} is one path (a str or Path), not a {type(value).__name__}."
            )
    check_task(task)
    kernels.requested()  # a bad KERAS_ELECTRA_KERNELS fails before any work
    replaces = False
    if output_dir is not None:  # before any work: a run there would be refused once trained
        replaces = check_output_dir(output_dir).is_finetuned()
    named = str(source)  # recorded as given: a directory, or hf:ORG/NAME
    source = Path(local_init(source))
    config, tokenizer = read_source(source)
    run = RunDirectory(source)  # its preset: run.json's, a fine-tuned source's, else inferred
    if not run.has_checkpoint():
        raise ConfigError(
            f"The source directory '{named}' has no checkpoint yet; pretrain it first."
        )
    preset = run.settings().get("preset")
    if not preset and run.is_finetuned():
        preset = FinetuneSettings.load(run.finetune_file).training.get("preset")
    preset = preset or infer_preset(config)
    options = options.resolved(preset, task, config.max_position_embeddings)
    hyper = {**options.hyperparameters(), "bias_correction": options.bias_correction}
    seed = options.seed
    settings = FinetuneSettings.from_options(
        task, options, training={**hyper, "preset": preset, "seed": seed}, source=named
    )
    handler = get_task(task)

    # Read and check all data before any training starts.
    train_examples = handler.read(train, settings)
    eval_examples = handler.read(eval, settings) if eval is not None else None
    handler.set_labels(train_examples, settings)
    x, y, extra = handler.encode(train_examples, tokenizer, settings)
    note = handler.encoding_note(train_examples, y, extra)
    if eval_examples is not None:
        handler.encode(eval_examples, tokenizer, settings)  # unseen labels fail here
    rows = len(next(iter(x.values())))
    steps_per_epoch = math.ceil(rows / hyper["batch_size"])
    steps = steps_per_epoch * hyper["epochs"]
    fingerprint = _fingerprint(settings, source, x, y)
    if options.dry_run:
        resume_step = 0
        if output_dir is not None:
            check_writable(output_dir)
            resume_step = _resumable_step(RunDirectory(output_dir).resume_dir, fingerprint)
        return FinetunePlan(
            source=named,
            output_dir=None if output_dir is None else Path(output_dir),
            config=config,
            preset=preset,
            options=options,
            settings=settings,
            train_examples=len(train_examples),
            train_rows=rows,
            eval_examples=None if eval_examples is None else len(eval_examples),
            steps=steps,
            steps_per_epoch=steps_per_epoch,
            resume_step=resume_step,
            replaces=replaces,
            note=note,
        )

    # The output is held until the model is saved: a second fine-tuning on it is refused.
    with RunDirectory(output_dir).claimed() if output_dir is not None else nullcontext():
        if note:
            print(f"Warning: {note}", file=sys.stderr, flush=True)
        chosen = kernels.choose()
        keras.utils.set_random_seed(seed)
        if options.dropout is not None:
            config = config.replace(dropout=options.dropout)
        backbone = restore_backbone(source, config)  # the config and tokenizer read above
        model = handler.build_model(backbone, settings)
        if hyper["probe_epochs"]:
            probe_head(model, backbone, handler.loss(settings), x, y, hyper, seed)
        # The rates, warm-up and decays: the hyperparameters but the epochs and batch size.
        shape = ("epochs", "batch_size", "probe_epochs")
        rates = {k: v for k, v in hyper.items() if k not in shape}
        optimizer = create_finetune_optimizer(model, backbone, total_steps=steps, **rates)
        model.compile(optimizer=optimizer, loss=handler.loss(settings), jit_compile=False)
        batches = training_batches(x, y, hyper["batch_size"], hyper["epochs"], seed)
        resume = None
        if output_dir is not None:
            resume = _Resume(RunDirectory(output_dir).resume_dir, fingerprint)
        # Recorded in finetune.json, not in the fingerprint: a resume may run on other kernels.
        settings.training["kernels"] = f"{chosen.backend}: {chosen.reason}"
        if options.progress:
            print(chosen.describe(), flush=True)
            if replaces:
                print(f"The fine-tuned model in '{output_dir}' is replaced when this one is done.")
        signals = resume is not None and stop_on_signals
        with StopRequest() if signals else nullcontext(StopRequest()) as stop:
            records = _train(
                model,
                optimizer,
                batches,
                steps,
                (steps_per_epoch, hyper["batch_size"], rows),
                resume,
                stop,
                options.progress,
            )
        if _diverged(records):
            raise TrainingDiverged(
                f"Fine-tuning diverged at step {records[-1]['step']} of {steps}: the loss became "
                f"NaN or infinite, so nothing was saved; lower --learning-rate (now "
                f"{hyper['learning_rate']:g}) and run the command again."
            )
        history: dict[str, list[float]] = {}
        for record in records:
            for k, v in record.items():
                if k not in ("step", "epoch"):
                    history.setdefault(k, []).append(v)
        result = FinetunedModel(
            model, tokenizer, settings, handler, config, history=history, records=records
        )
        if eval_examples is not None:
            result.metrics = handler.evaluate(model, eval_examples, tokenizer, settings)
        if output_dir is not None:
            result.output_dir = save_finetuned(result, output_dir, steps)
            if resume is not None:
                shutil.rmtree(resume.directory, ignore_errors=True)
        return result


def probe_head(model: keras.Model, backbone, loss, x, y, hyper: dict, seed: int) -> None:
    """LP-FT's first phase (Kumar et al., 2022): ``hyper["probe_epochs"]`` passes that train
    the head alone, the backbone frozen, at 10x the fine-tuning rate."""
    batch_size, epochs = hyper["batch_size"], hyper["probe_epochs"]
    steps = math.ceil(len(next(iter(x.values()))) / batch_size) * epochs
    rate = adamw_arguments(
        10 * hyper["learning_rate"],
        steps,
        int(0.1 * steps),
        0.0,
        1.0,
        hyper.get("bias_correction", True),  # a caller's hyper without it: the default
    )
    backbone.trainable = False
    try:
        model.compile(optimizer=AdamW(**rate), loss=loss, jit_compile=False)
        batches = training_batches(x, y, batch_size, epochs, seed + 7919)
        model.fit(batches, epochs=1, steps_per_epoch=steps, shuffle=False, verbose=0)
    finally:
        backbone.trainable = True


def training_batches(x, y, batch_size: int, epochs: int, seed: int) -> tf.data.Dataset:
    """``(x, y)`` batches of every epoch in a row, epoch ``e`` in
    ``numpy.random.default_rng([seed, e])``'s order, so ``skip(n)`` resumes at step ``n``."""
    rows = len(next(iter(tf.nest.flatten(x))))
    order = np.stack([np.random.default_rng([seed, e]).permutation(rows) for e in range(epochs)])
    order = tf.constant(order, tf.int64)
    data = tf.nest.map_structure(tf.constant, (x, y))

    def epoch_batches(epoch):
        return tf.data.Dataset.from_tensor_slices(tf.gather(order, epoch)).batch(batch_size)

    def gather(indices):
        return tf.nest.map_structure(lambda t: tf.gather(t, indices), data)

    batches = tf.data.Dataset.range(epochs).flat_map(no_autograph(epoch_batches))
    batches = batches.map(no_autograph(gather)).prefetch(2)
    return batches.with_options(fit_options())  # no wait for tf.data's autotuner at the end


def _train(
    model: keras.Model,
    optimizer,
    batches: tf.data.Dataset,
    steps: int,
    epoch: tuple[int, int, int],
    resume: _Resume | None,
    stop: StopRequest,
    progress: bool,
) -> list[dict]:
    """Fit from the resumed step (0 without one) to ``steps``; return the epoch records.
    ``epoch`` is ``(steps_per_epoch, batch_size, rows)``: an epoch's steps, of
    ``batch_size`` rows but the last, ``rows`` in all."""
    steps_per_epoch = epoch[0]
    start, records, checkpoints = 0, [], None
    if resume is not None:
        optimizer.build(model.trainable_variables)  # its slots must exist to be checkpointed
        checkpoints = resume.open(model, optimizer)
        start = checkpoints.restore_latest()
        records = resume.records(start)
        if start and progress:
            print(
                f"Resuming the interrupted fine-tuning at step {start} of {steps} (saved in "
                f"'{resume.directory}').",
                flush=True,
            )
    stopper = StopOnSignal(stop)
    bar = progress_bar("finetune", steps, start, progress)
    logger = _EpochLog(records, epoch, start, resume, bar)
    callbacks: list = [logger]
    if checkpoints is not None:
        saver = CheckpointEvery(
            checkpoints, None, steps + 1, start, stopping=lambda: stopper.stopping
        )
        callbacks.append(saver)
    callbacks.append(stopper)
    stop.arm()
    try:
        for first, window, count in plan_windows(start, steps, steps_per_epoch):
            if (stopper.stopping and logger.step > start) or _diverged(records):
                break
            model.fit(
                batches.skip(first),
                epochs=count,
                steps_per_epoch=window,
                callbacks=callbacks,
                shuffle=False,  # the batches come in their seeded order
                verbose=0,
            )
    finally:
        logger.bar.close()
    if stopper.stopping and logger.step < steps:
        saved = "; nothing was saved (no output directory)."
        if checkpoints is not None:
            saver.save()
            saved = (
                f": checkpoint saved in '{checkpoints.directory}'; run the same command again "
                f"to resume from step {logger.step}."
            )
        raise TrainingInterrupted(
            f"Stopped by {stop.signal_name} at step {logger.step} of {steps}{saved}",
            step=logger.step,
            signal_name=stop.signal_name,
        )
    return records


def _diverged(records: list[dict]) -> bool:
    """The last epoch's loss is NaN or infinite (:class:`_EpochLog` stopped the fit there)."""
    return bool(records) and not math.isfinite(records[-1].get("loss", 0.0))


class _EpochLog(keras.callbacks.Callback):
    """One record per epoch end (or per stop): step, epoch (a fraction when cut), metrics;
    ``bar`` shows the steps and prints each epoch's line.

    ``epoch`` is ``(steps_per_epoch, batch_size, rows)``. A record's metrics are means over
    its epoch's steps so far, weighted by their rows as Keras weighs a batch. A ``fit`` that
    resumes mid-epoch averages only the steps it trains, so the record of the stop that
    cut the epoch (the last of ``records``, at ``start``) is combined with them.
    """

    def __init__(
        self,
        records: list,
        epoch: tuple[int, int, int],
        start: int,
        resume: _Resume | None,
        bar,
    ):
        super().__init__()
        self.steps_per_epoch, self.batch_size, self.rows = epoch
        self.records, self.step, self.first = records, start, start
        self.resume, self.bar = resume, bar
        # The epoch so far, where a resume cut it: the stop's record.
        cut = bool(records) and records[-1]["step"] == start and start % self.steps_per_epoch
        self.so_far: dict | None = records[-1] if cut else None

    def rows_through(self, step: int) -> int:
        """The rows of the steps of ``step``'s epoch up to ``step`` (the last batch of an
        epoch may be short)."""
        done = step - (step - 1) // self.steps_per_epoch * self.steps_per_epoch
        return min(done * self.batch_size, self.rows)

    def on_epoch_begin(self, epoch, logs=None):
        self.first = self.step  # the fit's epoch trains the steps after this one

    def on_train_batch_end(self, batch, logs=None):
        self.step += 1
        self.bar.update(1)
        if logs and "loss" in logs:
            loss = float(logs["loss"])
            self.bar.set_postfix(loss=f"{loss:.4f}", refresh=False)
            if not math.isfinite(loss):  # the epoch ends here; its record has the loss
                self.model.stop_training = True

    def on_epoch_end(self, epoch, logs=None):
        done = self.step / self.steps_per_epoch
        values = {k: float(v) for k, v in (logs or {}).items()}
        before = self.so_far
        if before is not None and before["step"] == self.first and self.step > self.first:
            old = self.rows_through(self.first)
            new = self.rows_through(self.step) - old
            values = {
                k: (before[k] * old + v * new) / (old + new) if _is_number(before.get(k)) else v
                for k, v in values.items()
            }
        record = {"step": self.step, "epoch": int(done) if done.is_integer() else round(done, 4)}
        record.update(values)
        self.so_far = None if done.is_integer() else record
        self.records.append(record)
        if self.resume is not None:
            self.resume.append(record)
        if not self.bar.disable:
            shown = ", ".join(
                f"{k}={v:.4g}" for k, v in record.items() if k not in ("step", "epoch")
            )
            self.bar.write(f"epoch {record['epoch']} (step {self.step}): {shown}")


def _is_number(value) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


class _Resume:
    """``OUTPUT_DIR/resume/``: an interrupted fine-tuning's checkpoint, records and identity."""

    def __init__(self, run: RunDirectory, fingerprint: str):
        self.run, self.directory, self.fingerprint = run, run.path, fingerprint
        if not _resumable_step(run, fingerprint):
            shutil.rmtree(run.path, ignore_errors=True)  # nothing saved: nothing to resume

    def open(self, model: keras.Model, optimizer) -> RunCheckpoints:
        self.directory.mkdir(parents=True, exist_ok=True)
        write_json(self.run.state_file, {"fingerprint": self.fingerprint}, indent=None)
        return self.run.checkpoints(model, optimizer, max_to_keep=1)

    def records(self, start: int) -> list[dict]:
        path = self.run.metrics_file
        truncate_metrics_log(path, start)
        return read_metrics_records(path)

    def append(self, record: dict) -> None:
        with self.run.metrics_file.open("a", encoding="utf-8") as f:
            f.write(json.dumps(record) + "\n")


def _resumable_step(run: RunDirectory, fingerprint: str) -> int:
    """The step the interrupted fine-tuning in ``run`` (``OUTPUT_DIR/resume/``) resumes
    at, 0 for none; raises if it was started with other settings or training data."""
    step = run.latest_step() or 0
    if step and run.state_file.exists():
        stored = read_json(run.state_file, f"delete '{run.path}' to start the fine-tuning afresh")
        stored = stored.get("fingerprint")
        if stored != fingerprint:
            raise ConfigError(
                f"'{run.path.parent}' holds a fine-tuning interrupted with other settings "
                f"or training data; rerun that command to finish it, delete '{run.path}', "
                "or choose a new --output."
            )
    return step


def _fingerprint(settings: FinetuneSettings, source: Path, x, y) -> str:
    """What makes a fine-tuning resumable: its settings, source and encoded training data."""
    digest = hashlib.sha256(json.dumps(asdict(settings), sort_keys=True).encode("utf-8"))
    digest.update(str(source.resolve()).encode("utf-8"))
    for array in tf.nest.flatten((x, y)):
        array = np.ascontiguousarray(array)
        digest.update(f"{array.dtype}{array.shape}".encode())
        digest.update(array.tobytes())
    return digest.hexdigest()[:16]


def predict_file(
    model_dir: str | Path,
    input_path: str | Path,
    output_path: str | Path | None = None,
    *,
    batch_size: int = MAX_BATCH_SIZE,
) -> list[dict]:
    """Run a fine-tuned model on a file (same format and columns as training) to JSON lines.

    ``model_dir`` is a fine-tuned directory or its export (``saved_models/NAME`` or a
    version folder, run in process as ``keras-electra score`` runs it); both write the
    same fields, and a QA export's lines also hold the answer's word span and score.
    Labels in the file are ignored; a tagged sentence longer than the model's length has
    ``"truncated": true`` (its words past it are tagged ``O`` unscored). Returns the
    predictions; writes them to ``output_path`` (one JSON object per line) when given. The
    model runs on ``batch_size`` examples at a time.

    Raises:
        ConfigError: ``model_dir`` is neither, or is a pretrained export; ``batch_size``
            below 1; ``output_path`` is a directory.
        StorageError: ``output_path``'s folder cannot be written (checked before the
            model runs, so that no predictions are lost).

    Examples:
        >>> predict_file("runs/sst2", "test.tsv", "predictions.jsonl")[0]["label"]  # doctest: +SKIP
        '1'
    """
    if output_path is not None:
        if Path(output_path).is_dir():
            raise ConfigError(
                f"--output '{output_path}' is a directory; pass a file for the predictions, "
                "such as predictions.jsonl."
            )
        check_writable(Path(output_path).parent, "the folder of --output")
    run = RunDirectory(model_dir)
    if run.is_finetuned():
        loaded = load_finetuned(model_dir)
        examples = loaded.task.read(input_path, loaded.settings, labelled=False)
        rows = loaded.predict_examples(examples, batch_size)
    elif find_export(model_dir) is not None:
        rows = _predict_with_export(model_dir, input_path, batch_size)
    elif not run.path.exists():
        raise ConfigError(
            f"'{run.path}' does not exist; pass the --output of `keras-electra finetune` or of "
            "`keras-electra export`."
        )
    else:
        raise ConfigError(
            f"'{run.path}' is neither a fine-tuned model directory (no {run.FINETUNE}) nor an "
            "export (no saved_model.pb); pass the --output of `keras-electra finetune` or of "
            "`keras-electra export`."
        )
    if output_path is not None:
        path = Path(output_path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), "utf-8")
    return rows


def _predict_with_export(path: str | Path, input_path: str | Path, batch_size: int) -> list[dict]:
    """:func:`predict_file` with an export, read as its ``finetune.json`` says."""
    if batch_size < 1:
        raise ConfigError(f"--batch-size must be 1 or more, got {batch_size}.")
    directory = Path(latest_version_dir(path))
    settings_file = directory / ASSETS_EXTRA / RunDirectory.FINETUNE
    if not settings_file.is_file():
        raise ConfigError(
            f"The export at '{directory}' holds no fine-tuned model (no {ASSETS_EXTRA}/"
            f"{RunDirectory.FINETUNE}); score a pretrained export with `keras-electra score` "
            "(`--input FILE` for a file of texts, one per line), or pass a fine-tuned "
            "directory or its export."
        )
    settings = FinetuneSettings.load(settings_file)
    task = get_task(settings.task)
    examples = task.read(input_path, settings, labelled=False)
    inputs = task.export_inputs(examples, settings)
    scores = score_with_saved_model(directory, inputs, batch_size=batch_size)
    cut = scores.truncated or [False] * len(scores)  # a tagger's export says; others cannot
    return [
        {
            **task.export_row(example, scores.reader.record(answer)),
            **({"truncated": True} if c else {}),
        }
        for example, answer, c in zip(examples, scores, cut, strict=True)
    ]
