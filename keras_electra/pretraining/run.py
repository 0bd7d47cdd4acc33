"""A pretraining run: corpus in, run directory out, resumable.

``RUN_DIR`` holds everything a run needs to continue or be exported:

- ``config.json``: the :class:`~keras_electra.config.ElectraConfig`;
- ``vocab.txt``: the WordPiece vocabulary (learned from the corpus or given);
- ``run.json``: the training settings (preset, objective, batch, corpus, seed);
- ``checkpoints/``: model + optimizer + step, written atomically;
- ``logs/``: TensorBoard summaries; ``metrics.jsonl``: one JSON line per window.

Calling :func:`pretrain` again on the same directory resumes from the latest
checkpoint: same step, optimizer state, masking and dropout random streams and
data position (the deterministic input pipeline is advanced past the batches
already seen).

Faults (the README's "Reliability" section lists them with their tests): SIGTERM
or SIGINT finishes the step, saves a checkpoint at it and raises
:class:`~keras_electra.errors.TrainingInterrupted`; a step whose loss or gradient
norm is not finite stops the run or is skipped (``on_nan``); a failed write
raises :class:`~keras_electra.errors.StorageError` and keeps the previous
checkpoint; an unreadable TFRecord shard or a changed vocabulary is named in one
sentence.
"""

from __future__ import annotations

import hashlib
import zlib
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path

import keras
import tensorflow as tf

from keras_electra.config import TRAINING_DEFAULTS, ElectraConfig
from keras_electra.data import (
    ElectraTokenizer,
    check_corpus_has_text,
    is_tfrecord_input,
    learn_vocab,
    load_pretraining_data,
    load_vocab,
    resolve_corpus_files,
)
from keras_electra.data.tfrecords import unreadable_tfrecord
from keras_electra.errors import (
    ConfigError,
    InputDataError,
    StorageError,
    TrainingDiverged,
    TrainingInterrupted,
    storage_reason,
)
from keras_electra.pretraining.health import HealthProbe, collapse_warnings
from keras_electra.pretraining.pretrainer import (
    NONFINITE_MESSAGE,
    OBJECTIVES,
    ON_NAN,
    ElectraPretrainer,
    transfer_weights,
)
from keras_electra.run_directory import RunDirectory
from keras_electra.training.callbacks import (
    CheckpointEvery,
    MetricsLogger,
    plan_windows,
    truncate_metrics_log,
)
from keras_electra.training.checkpoints import RunCheckpoints
from keras_electra.training.optimizer import OPTIMIZERS, create_optimizer
from keras_electra.training.per_step import PerStepCallbacks
from keras_electra.training.precision import dtype_policy, needs_loss_scaling
from keras_electra.training.preemption import ClusterStopOnSignal, StopOnSignal, StopRequest
from keras_electra.training.strategy import (
    check_workers_agree,
    is_chief,
    is_multi_worker,
    prepare_multi_worker_fit,
    resolve_strategy,
)

# Sequences in the run-health probe batch.
PROBE_SEQUENCES = 32


@dataclass
class RunSettings:
    """Training settings of a run, saved as ``run.json``."""

    preset: str = "tiny"
    objective: str = "electra"
    corpus: list[str] = field(default_factory=list)
    steps: int = 1000
    batch_size: int = 32
    max_seq_length: int = 128
    learning_rate: float = 1e-3
    warmup_steps: int = 100
    seed: int = 0
    log_every: int = 50
    checkpoint_every: int = 500
    precision: str = "float32"
    strategy: str = "auto"
    optimizer: str = "adamw"
    xla: bool = False
    steps_per_execution: int = 1
    grad_accumulation: int = 1
    validation: list[str] = field(default_factory=list)
    # A copy of config.json's ElectraConfig.embedding_sharing, for the record.
    embedding_sharing: str = "all"
    on_nan: str = "stop"
    # A checksum of the vocabulary: a run refuses to resume on a changed one.
    vocab_sha256: str = ""

    # Settings that fix the data order and the model: a resumed run must keep them.
    # (The optimizer too: the checkpoint holds its state.)
    FIXED = (
        "preset",
        "objective",
        "batch_size",
        "max_seq_length",
        "seed",
        "precision",
        "optimizer",
    )


@dataclass
class RunResult:
    run_dir: Path
    step: int
    history: list[dict]
    model: ElectraPretrainer
    tokenizer: ElectraTokenizer

    @property
    def final_metrics(self) -> dict:
        return self.history[-1] if self.history else {}


def pretrain(
    corpus: list[str],
    output_dir: str | Path,
    *,
    preset: str | None = None,
    objective: str = "electra",
    steps: int | None = None,
    batch_size: int | None = None,
    max_seq_length: int | None = None,
    learning_rate: float | None = None,
    warmup_steps: int | None = None,
    vocab: str | None = None,
    vocab_size: int | None = None,
    lowercase: bool = True,
    log_every: int = 50,
    checkpoint_every: int | None = None,
    seed: int = 0,
    config_overrides: dict | None = None,
    progress: bool = True,
    precision: str = "float32",
    strategy: str = "auto",
    init: str | Path | None = None,
    optimizer: str = "adamw",
    xla: bool = False,
    steps_per_execution: int = 1,
    grad_accumulation: int = 1,
    validation: list[str] | None = None,
    health: bool = True,
    on_nan: str = "stop",
    stop_on_signals: bool = True,
) -> RunResult:
    """Pretrain (or resume pretraining) an ELECTRA model on text files.

    Args:
        corpus: text files (one sentence per line, blank line between
            documents), directories of ``*.txt`` files, or TFRecords written by
            ``keras-electra prepare``.
        output_dir: the run directory; resumed when it already holds a run.
        preset: model size (``tiny``, ``small``, ``small++``, ``base``, ``large``) and
            its training defaults; default: the ``init`` directory's, else ``tiny``.
        objective: ``electra`` (replaced-token detection) or ``mlm``.
        steps: total training steps (defaults per preset).
        batch_size, max_seq_length, learning_rate, warmup_steps: defaults per preset.
        vocab: a BERT-format ``vocab.txt``; learned from the corpus when omitted.
        vocab_size: size of the learned vocabulary (default: the preset's).
        lowercase: lower-case text before tokenizing (learned vocabularies only).
        log_every: steps per metrics window (one ``metrics.jsonl`` line each).
        checkpoint_every: steps between checkpoints (rounded up to ``log_every``).
        seed: seeds the data order, masking and sampling.
        config_overrides: ElectraConfig fields to change from the preset (a new
            run). Only ``embedding_sharing`` counts when resuming (it must be the
            run's) or with ``init`` (an init directory that shares ``all``
            embeddings can start a run in any mode; another mode only its own).
        progress: show a progress bar.
        precision: ``float32``, ``mixed_bfloat16`` or ``mixed_float16`` (with
            dynamic loss scaling); checkpoints hold float32 variables either way.
        strategy: ``auto``, ``tpu``, ``mirrored``, ``multi_worker`` or
            ``one_device``; ``batch_size`` is the global batch, split across replicas.
            With ``multi_worker`` (``TF_CONFIG`` on every worker) every worker calls
            this with the same arguments and ``output_dir`` on storage they share;
            only the chief writes the run directory, and a restarted cluster
            resumes from the chief's latest checkpoint.
        optimizer: ``adamw`` or ``lamb`` (for very large batches); same schedule,
            clipping and weight-decay exclusions.
        xla: compile each step's forward and backward pass with XLA (the
            optimizer update stays outside, so this works with every strategy).
            Under XLA the seeded random ops draw another (equally deterministic)
            stream, so samples and dropout differ from a run without it.
        steps_per_execution: training steps per call of the compiled train
            function; must divide ``log_every`` and ``steps``.
        grad_accumulation: split each batch of ``batch_size`` into this many
            micro-batches and sum their gradients into one update (same result,
            less memory); must divide the per-replica batch.
        init: start from the weights, config and vocabulary of this directory (a
            run, or one written by ``keras-electra convert``) instead of random
            weights; the optimizer, step and data order start fresh. With another
            ``embedding_sharing`` in ``config_overrides`` than the directory's
            ``all``, the discriminator's own embedding weights start as copies of
            the shared ones (GDES deltas at zero).
        validation: held-back text files for the run-health probe
            (:mod:`keras_electra.pretraining.health`); without them the probe
            takes a fixed batch of the training text.
        health: measure run health every window (``metrics.jsonl`` gets the
            probe's metrics and collapse warnings).
        on_nan: a step whose loss or global gradient norm is NaN or infinite
            (checked in the graph, before the update) ``stop``s the run with
            :class:`~keras_electra.errors.TrainingDiverged` naming the step, the
            weights and last checkpoint untouched; or is ``skip``ped (no update,
            counted in the window's ``skipped_steps`` metric; a window of only
            skipped steps stops the run). Under float16 the loss scaler skips such
            steps instead.
        stop_on_signals: while training, SIGTERM and SIGINT finish the current
            step, write its (partial) window's metrics line and a checkpoint at that
            step, and raise :class:`~keras_electra.errors.TrainingInterrupted`;
            calling again resumes there. Needs the main thread.

    Returns:
        A :class:`RunResult` with the trained model and the metrics history.

    Raises:
        TrainingInterrupted: stopped by SIGTERM/SIGINT (a checkpoint is saved).
        TrainingDiverged: a non-finite step under ``on_nan="stop"``.
        StorageError: a checkpoint, log or metrics write failed (no space,
            permissions, the directory removed); the previous checkpoint is kept.
        InputDataError, ConfigError: unusable data, vocabulary or settings.

    Example:
        >>> result = pretrain(["data/sample/shakespeare.txt"], "runs/demo",
        ...                   steps=200)  # doctest: +SKIP
        >>> result.final_metrics["disc_auc"]  # doctest: +SKIP
    """
    arguments = {k: v for k, v in locals().items() if k != "stop_on_signals"}  # the parameters
    if not stop_on_signals:
        return _pretrain(StopRequest(), **arguments)
    with StopRequest() as stop:
        return _pretrain(stop, **arguments)


def _pretrain(
    stop: StopRequest,
    corpus,
    output_dir,
    *,
    preset,
    objective,
    steps,
    batch_size,
    max_seq_length,
    learning_rate,
    warmup_steps,
    vocab,
    vocab_size,
    lowercase,
    log_every,
    checkpoint_every,
    seed,
    config_overrides,
    progress,
    precision,
    strategy,
    init,
    optimizer,
    xla,
    steps_per_execution,
    grad_accumulation,
    validation,
    health,
    on_nan,
) -> RunResult:
    run_dir = Path(output_dir)
    run = RunDirectory(run_dir)
    preset = preset or _init_preset(init) or "tiny"
    if on_nan not in ON_NAN:
        raise ConfigError(f"Unknown --on-nan '{on_nan}'; choose one of: {', '.join(ON_NAN)}.")
    if objective not in OBJECTIVES:
        raise ConfigError(
            f"Unknown objective '{objective}'; choose one of: {', '.join(OBJECTIVES)}."
        )
    if preset not in TRAINING_DEFAULTS:
        raise ConfigError(
            f"Unknown preset '{preset}'; choose one of: {', '.join(sorted(TRAINING_DEFAULTS))}."
        )
    defaults = TRAINING_DEFAULTS[preset]
    policy = dtype_policy(precision)
    distribution = resolve_strategy(strategy)
    if is_multi_worker(distribution):
        stop.arm()  # the workers stop together, at a step they agree on, once training starts
    settings = RunSettings(
        preset=preset,
        objective=objective,
        corpus=[str(p) for p in corpus],
        steps=steps or defaults["steps"],
        batch_size=batch_size or defaults["batch_size"],
        max_seq_length=max_seq_length or defaults["max_seq_length"],
        learning_rate=learning_rate or defaults["learning_rate"],
        warmup_steps=defaults["warmup_steps"] if warmup_steps is None else warmup_steps,
        seed=seed,
        log_every=max(1, min(log_every, steps or defaults["steps"])),
        precision=precision,
        strategy=strategy,
        optimizer=optimizer,
        xla=bool(xla),
        steps_per_execution=steps_per_execution,
        grad_accumulation=grad_accumulation,
        validation=[str(p) for p in validation or []],
        on_nan=on_nan,
    )
    settings.checkpoint_every = _round_up(
        checkpoint_every or max(settings.log_every, 500), settings.log_every
    )
    _check_positive(settings)
    _check_divisible(settings.batch_size, distribution.num_replicas_in_sync)
    _check_speed_options(settings, distribution.num_replicas_in_sync)
    sharing = (config_overrides or {}).get("embedding_sharing")
    if sharing is not None:  # checked before anything is written
        _check_sharing(ElectraConfig(embedding_sharing=sharing), settings.objective)

    # Only the chief writes the run directory. The other workers read the chief's
    # files once it has checkpointed (before that they may be half-written) and
    # otherwise derive the same vocabulary and config from the same arguments.
    chief = is_chief(distribution)
    if chief:
        resuming = run.config_file.exists()
    else:
        resuming = run.has_checkpoint()
    if resuming:
        config, tokens = _load_run(run, settings)
        if sharing is not None and sharing != config.embedding_sharing:
            raise ConfigError(
                f"Run directory '{run_dir}' was started with embedding_sharing="
                f"{config.embedding_sharing!r}, not {sharing!r}; resume with the same value or "
                "choose a new --output."
            )
        _check_same_vocab(run, tokens, vocab)
    else:
        if init is not None:
            config, tokens = _init_source(init, settings, sharing)
            _check_sharing(config, settings.objective)
        else:
            vocab_size = vocab_size or _preset_vocab_size(preset)
            tokens = _vocabulary(settings, vocab, vocab_size, lowercase)
            config = model_config(preset, tokens, lowercase, settings, config_overrides or {})
        if chief:
            with _writing(run_dir):
                run.write_model_files(config, tokens)
    settings.embedding_sharing = config.embedding_sharing
    settings.vocab_sha256 = vocab_checksum(tokens)
    if chief:
        with _writing(run_dir):
            run.write_settings(asdict(settings))

    tokenizer = ElectraTokenizer(tokens, lowercase=config.lowercase)
    keras.utils.set_random_seed(settings.seed)  # deterministic initial weights and dropout
    with distribution.scope():
        model, optimizer = _build_model(config, settings, policy)
    checkpoints = run.checkpoints(model, optimizer, chief=chief)
    start = checkpoints.restore_latest()
    if init is not None and start == 0:
        _load_init_weights(model, Path(init))
    if is_multi_worker(distribution):
        prepare_multi_worker_fit(model)
        check_workers_agree(
            distribution,
            step=start,
            vocabulary=zlib.crc32("\n".join(tokens).encode("utf-8")),
            parameters=model.count_params(),
        )
    if chief:
        truncate_metrics_log(run.metrics_file, start)

    stop.arm()  # from here a signal saves a checkpoint at the step reached
    try:
        return _train(
            stop,
            run_dir,
            settings,
            model,
            tokenizer,
            checkpoints,
            start,
            distribution,
            health=health,
            progress=progress,
        )
    except tf.errors.DataLossError as e:
        raise _data_loss(settings, e) from None


def _train(
    stop: StopRequest,
    run_dir: Path,
    settings: RunSettings,
    model: ElectraPretrainer,
    tokenizer: ElectraTokenizer,
    checkpoints: RunCheckpoints,
    start: int,
    distribution: tf.distribute.Strategy,
    *,
    health: bool,
    progress: bool,
) -> RunResult:
    """Train from step ``start`` to ``settings.steps`` in logging windows, as resumable fits."""
    chief = is_chief(distribution)
    dataset = load_pretraining_data(
        settings.corpus,
        tokenizer,
        batch_size=settings.batch_size,
        max_seq_length=settings.max_seq_length,
        seed=settings.seed,
    ).skip(start)
    # Every worker reads the same batches and keeps its replicas' rows of each one,
    # so N workers see exactly the global batches one device would.
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    dataset = dataset.with_options(options)

    probe = _health_probe(model, tokenizer, settings) if health and chief else None
    logger = MetricsLogger(
        RunDirectory(run_dir).metrics_file if chief else None,
        RunDirectory(run_dir).logs_dir if chief else None,
        tokens_per_step=settings.batch_size * settings.max_seq_length,
        total_steps=settings.steps,
        initial_step=start,
        progress=progress and chief,
        measure=probe.measure if probe is not None else None,
        warnings=collapse_warnings,
    )
    if is_multi_worker(distribution):
        stopper = ClusterStopOnSignal(stop, distribution)
    else:
        stopper = StopOnSignal(stop)
    saver = CheckpointEvery(
        checkpoints,
        settings.checkpoint_every,
        settings.steps,
        start,
        stopping=lambda: stopper.stopping,
    )
    callbacks = [logger, saver]
    if settings.steps_per_execution > 1:  # Keras calls batch hooks once per execution
        callbacks = [PerStepCallbacks(callbacks)]
    callbacks.append(stopper)  # after the step counters
    try:
        # Each epoch of fit is one logging window, so metrics reset every window.
        for first, window, count in plan_windows(start, settings.steps, settings.log_every):
            if stopper.stopping and saver.step > start:
                break  # stopped between two fits (a signal before the first step trains one)
            try:
                model.fit(
                    dataset.skip(first - start),  # a fresh iterator for each fit
                    epochs=count,
                    steps_per_epoch=window,
                    callbacks=callbacks,
                    shuffle=False,  # the pipeline shuffles, deterministically per seed
                    verbose=0,
                )
            except tf.errors.InvalidArgumentError as e:
                if NONFINITE_MESSAGE not in str(e):
                    raise
                raise _diverged(settings, saver.step + 1, checkpoints) from None
    finally:
        stopper.close()
        logger.close()
    if stopper.stopping and saver.step < settings.steps:
        saver.save()  # done at the window's end, unless the stop came between two fits
        raise TrainingInterrupted(
            f"Stopped by {stop.signal_name} at step {saver.step} of {settings.steps}: "
            f"checkpoint saved in '{checkpoints.directory}'; run the same command again to "
            f"resume from step {saver.step}.",
            step=saver.step,
            signal_name=stop.signal_name,
        )
    return RunResult(run_dir, settings.steps, logger.history, model, tokenizer)


def load_run(run_dir: str | Path) -> tuple[ElectraPretrainer, ElectraTokenizer, int]:
    """Load a run's model (latest checkpoint) and tokenizer; return them with the step.

    Raises:
        ConfigError: if the directory holds no run or no checkpoint, or they disagree.
    """
    run = RunDirectory(run_dir)
    if not run.has_config():
        raise ConfigError(
            f"'{run_dir}' is not a run directory (no {run.CONFIG}); pass the --output of "
            "`keras-electra pretrain`."
        )
    config, tokens = _load_run(run, None)
    model = ElectraPretrainer(config, objective=run.settings().get("objective", "electra"))
    step = run.restore_latest(model)
    return model, ElectraTokenizer(tokens, lowercase=config.lowercase), step


# === Helpers ===


def vocab_checksum(tokens: list[str]) -> str:
    """A short SHA-256 of a vocabulary (its tokens in id order), kept in ``run.json``."""
    return hashlib.sha256("\n".join(tokens).encode("utf-8")).hexdigest()[:16]


def _check_same_vocab(run: RunDirectory, tokens: list[str], vocab: str | None) -> None:
    """A resumed run keeps its vocabulary: a ``--vocab`` that differs from it is refused."""
    if not vocab:
        return
    given = load_vocab(vocab)
    if given != tokens:
        raise ConfigError(
            f"--vocab '{vocab}' differs from the vocabulary run '{run.path}' started with "
            f"({run.vocab_file}, {len(tokens)} tokens); the checkpoints only fit that one, "
            "so pass the original file (and data tokenized with it) or start a new --output."
        )


def _diverged(settings: RunSettings, step: int, checkpoints: RunCheckpoints) -> TrainingDiverged:
    """The one-sentence error of a non-finite step under ``on_nan="stop"``."""
    latest = checkpoints.latest
    kept = (
        f"the last checkpoint (step {latest.rsplit('-', 1)[-1]}) is untouched"
        if latest
        else "no checkpoint was written"
    )
    steps = f"step {step}"
    if settings.steps_per_execution > 1:
        steps = f"one of steps {step}-{step + settings.steps_per_execution - 1}"
    precision = (
        ""
        if settings.precision == "float32"
        else f" or --precision float32 (now {settings.precision})"
    )
    return TrainingDiverged(
        f"Training diverged at {steps}: the loss or gradient norm was NaN or infinite, so "
        f"the update was not applied and {kept}; lower --learning-rate (now "
        f"{settings.learning_rate:g}){precision}, or pass --on-nan skip to skip such steps, "
        "then rerun the same command to resume."
    )


def _data_loss(settings: RunSettings, error: tf.errors.DataLossError) -> InputDataError:
    """The one-sentence error of a truncated or corrupt TFRecord shard, naming it."""
    if is_tfrecord_input(settings.corpus):
        found = unreadable_tfrecord(settings.corpus)
        if found is not None:
            path, detail = found
            return InputDataError(
                f"TFRecord shard '{path}' is truncated or corrupt ({detail}); write it again "
                "with `keras-electra prepare` (or restore it) and rerun the same command to "
                "resume from the last checkpoint."
            )
    return InputDataError(
        f"The training data could not be read ({storage_reason(error)}); check the files of "
        "--corpus and rerun the same command to resume from the last checkpoint."
    )


def _health_probe(
    model: ElectraPretrainer, tokenizer: ElectraTokenizer, settings: RunSettings
) -> HealthProbe:
    """The run's fixed probe: the first batch of the validation text (else of the corpus)."""
    data = load_pretraining_data(
        settings.validation or settings.corpus,
        tokenizer,
        batch_size=PROBE_SEQUENCES,
        max_seq_length=settings.max_seq_length,
        seed=settings.seed + 1,
    )
    batch = next(iter(data))
    return HealthProbe(model, {k: v.numpy() for k, v in batch.items()}, seed=settings.seed)


def _build_model(config: ElectraConfig, settings: RunSettings, policy: keras.DTypePolicy):
    """The pretrainer and its optimizer, compiled and built (call under a strategy scope)."""
    model = ElectraPretrainer(
        config, objective=settings.objective, seed=settings.seed, dtype=policy
    )
    optimizer = create_optimizer(
        model,
        learning_rate=settings.learning_rate,
        total_steps=settings.steps,
        warmup_steps=settings.warmup_steps,
        loss_scale=needs_loss_scaling(settings.precision),
        optimizer=settings.optimizer,
    )
    model.compile(
        optimizer=optimizer, jit_compile=False, steps_per_execution=settings.steps_per_execution
    )
    model.configure_step(
        gradient_accumulation=settings.grad_accumulation,
        xla_gradients=settings.xla,
        on_nan=settings.on_nan,
    )
    optimizer.build(model.trainable_variables)
    return model, optimizer


def _check_speed_options(settings: RunSettings, replicas: int) -> None:
    if settings.optimizer not in OPTIMIZERS:
        raise ConfigError(
            f"Unknown optimizer '{settings.optimizer}'; choose one of: {', '.join(OPTIMIZERS)}."
        )
    spe, k = settings.steps_per_execution, settings.grad_accumulation
    if spe < 1 or settings.log_every % spe or settings.steps % spe:
        raise ConfigError(
            f"--steps-per-execution {spe} must be a positive divisor of --log-every "
            f"{settings.log_every} and --steps {settings.steps}."
        )
    if k < 1 or (settings.batch_size // replicas) % k:
        raise ConfigError(
            f"--grad-accumulation {k} must be a positive divisor of the batch per replica "
            f"({settings.batch_size // replicas})."
        )


def _check_divisible(batch_size: int, replicas: int) -> None:
    if batch_size % replicas:
        raise ConfigError(
            f"--batch-size {batch_size} must be a multiple of the {replicas} replicas "
            "that share each batch."
        )


def _round_up(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple


def _preset_vocab_size(preset: str) -> int:
    return ElectraConfig.from_preset(preset).vocab_size


def _check_positive(settings: RunSettings) -> None:
    for name in ("steps", "batch_size", "max_seq_length"):
        if getattr(settings, name) <= 0:
            raise ConfigError(f"--{name.replace('_', '-')} must be a positive integer.")
    if settings.learning_rate <= 0:
        raise ConfigError("--learning-rate must be positive.")
    if settings.max_seq_length < 8:
        raise ConfigError("--max-seq-length must be at least 8.")


def _vocabulary(settings: RunSettings, vocab: str | None, vocab_size: int, lowercase: bool):
    if is_tfrecord_input(settings.corpus):
        if not vocab:
            raise ConfigError(
                "TFRecord input needs the vocabulary it was prepared with; pass --vocab "
                "(keras-electra prepare writes vocab.txt next to the records)."
            )
    else:
        check_corpus_has_text(resolve_corpus_files(settings.corpus))
    if vocab:
        return load_vocab(vocab)
    return learn_vocab(settings.corpus, vocab_size, lowercase=lowercase)


def model_config(
    preset: str, tokens: list[str], lowercase: bool, settings: RunSettings, overrides: dict
) -> ElectraConfig:
    """The config ``pretrain`` builds for a new run: the preset's sizes, the vocabulary's
    special-token ids, the MLM objective's single-tower sharing, and a position table
    at least ``settings.max_seq_length`` long."""
    ids = {t: i for i, t in enumerate(tokens)}
    if settings.objective == "mlm":
        # A preset's sharing mode is an ELECTRA setting: the MLM baseline's one tower
        # has nothing to share (an explicit other mode is still refused).
        overrides = {"embedding_sharing": "all", **overrides}
    config = ElectraConfig.from_preset(
        preset,
        vocab_size=len(tokens),
        pad_token_id=ids["[PAD]"],
        cls_token_id=ids["[CLS]"],
        sep_token_id=ids["[SEP]"],
        mask_token_id=ids["[MASK]"],
        lowercase=lowercase,
        **overrides,
    )
    if settings.max_seq_length > config.max_position_embeddings:
        config = config.replace(max_position_embeddings=settings.max_seq_length)
    return config


def _load_run(run: RunDirectory, settings: RunSettings | None):
    config, tokens = run.config_and_vocab()
    previous = run.settings()
    stored = previous.get("vocab_sha256")
    if stored and stored != vocab_checksum(tokens):
        raise ConfigError(
            f"{run.vocab_file} has changed since the run started (its checksum is not the "
            f"one in {run.SETTINGS}); restore the original vocabulary, which the checkpoints were "
            "trained with."
        )
    if settings is not None and previous:
        for name in RunSettings.FIXED:
            # Runs from before a setting existed used its default.
            if previous.get(name, getattr(RunSettings, name)) != getattr(settings, name):
                raise ConfigError(
                    f"Run directory '{run.path}' was started with {name}={previous.get(name)!r}, "
                    f"not {getattr(settings, name)!r}; resume with the same value or choose "
                    "a new --output."
                )
    return config, tokens


def _init_source(
    init: str | Path, settings: RunSettings, sharing: str | None = None
) -> tuple[ElectraConfig, list[str]]:
    """The config and vocabulary of an ``--init`` directory, checked against the settings.

    ``sharing``: the run's ``embedding_sharing`` when asked for (default: the directory's).
    """
    source = RunDirectory(init)
    if not source.has_config():
        raise ConfigError(
            f"--init '{init}' is not a run or converted directory (no {source.CONFIG}); pass "
            "the --output of `keras-electra pretrain` or `keras-electra convert`."
        )
    config, tokens = _load_run(source, None)
    if settings.max_seq_length > config.max_position_embeddings:
        raise ConfigError(
            f"--max-seq-length {settings.max_seq_length} exceeds the {init} model's "
            f"{config.max_position_embeddings} positions."
        )
    if sharing is not None and sharing != config.embedding_sharing:
        if config.embedding_sharing != "all":
            raise ConfigError(
                f"--init '{init}' was pretrained with embedding_sharing "
                f"'{config.embedding_sharing}', which can start only runs with the same mode "
                "(one with 'all' can start any mode)."
            )
        config = config.replace(embedding_sharing=sharing)
    return config, tokens


def _check_sharing(config: ElectraConfig, objective: str) -> None:
    if objective == "mlm" and config.embedding_sharing != "all":
        raise ConfigError(
            f"embedding_sharing '{config.embedding_sharing}' needs --objective electra: the mlm "
            "baseline has one tower, so nothing to share."
        )


def _init_preset(init: str | Path | None) -> str | None:
    return None if init is None else RunDirectory(init).settings().get("preset")


def _load_init_weights(model: ElectraPretrainer, init: Path) -> None:
    """Load an init directory's weights (generator included) into a fresh model.

    An init directory whose embeddings are shared in another mode (``all``) is read
    into a model of its own mode first, then transferred (see
    :func:`~keras_electra.pretraining.pretrainer.transfer_weights`).
    """
    source, directory = model, RunDirectory(init)
    config = ElectraConfig.load(directory.config_file)
    if config.embedding_sharing != model.config.embedding_sharing:
        source = ElectraPretrainer(config, objective=model.objective)
    checkpoints = directory.checkpoints(source)
    if checkpoints.latest is None:
        raise ConfigError(f"--init '{init}' has no checkpoint.")
    checkpoints.restore_latest()
    if source is not model:
        transfer_weights(source, model)
    model.random_step.assign(0)  # a fresh run starts its own masking stream


@contextmanager
def _writing(run_dir: Path):
    """Turn a failed write of the run's files into one sentence naming the directory."""
    try:
        yield
    except OSError as e:
        where = e.filename or run_dir
        raise StorageError(
            f"Could not write '{where}' ({storage_reason(e)}); free space or fix the "
            f"permissions of '{run_dir}', then run the same command again."
        ) from None
