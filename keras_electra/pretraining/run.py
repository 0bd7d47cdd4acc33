"""A pretraining run: corpus in, run directory out, resumable (:func:`pretrain`; the run
directory, resuming and ``--dry-run``: docs/pretraining.md; faults: docs/reliability.md)."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
import re
import sys
import zlib
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path

import keras
import tensorflow as tf

from keras_electra import kernels
from keras_electra.atomic import check_writable
from keras_electra.config import ElectraConfig
from keras_electra.convert.hub import local_init
from keras_electra.data import (
    ElectraTokenizer,
    check_corpus_has_text,
    is_tfrecord_input,
    learn_vocab,
    load_vocab,
    pretraining_dataset,
    resolve_corpus_files,
)
from keras_electra.data.files import check_output_outside_corpus, left_out_note
from keras_electra.data.tfrecords import check_records, unreadable_tfrecord
from keras_electra.data.tokenizer import corpus_warnings
from keras_electra.data.vocab import check_cased_vocab, check_vocab_size
from keras_electra.errors import (
    ConfigError,
    InputDataError,
    StorageError,
    TrainingDiverged,
    TrainingInterrupted,
    storage_reason,
    storage_remedy,
)
from keras_electra.pretraining import objectives
from keras_electra.pretraining.health import HealthProbe, collapse_warnings
from keras_electra.pretraining.loading import load_run as load_run  # callers import it here
from keras_electra.pretraining.loading import (
    read_run,
    stored_pretrainer,
    vocab_checksum,
)
from keras_electra.pretraining.plan import PretrainPlan, describe_data, warmup_note
from keras_electra.pretraining.pretrainer import (
    NONFINITE_MESSAGE,
    ElectraPretrainer,
    transfer_weights,
)
from keras_electra.run_directory import RunDirectory
from keras_electra.settings import PretrainSettings, with_options
from keras_electra.training.callbacks import (
    CheckpointEvery,
    MetricsLogger,
    plan_windows,
    truncate_metrics_log,
    truncate_tensorboard_logs,
)
from keras_electra.training.checkpoints import RunCheckpoints, check_readable, latest_checkpoint
from keras_electra.training.optimizer import create_optimizer
from keras_electra.training.per_step import PerStepCallbacks
from keras_electra.training.precision import dtype_policy, needs_loss_scaling
from keras_electra.training.preemption import ClusterStopOnSignal, StopOnSignal, StopRequest
from keras_electra.training.strategy import (
    check_workers_agree,
    cluster_size,
    is_chief,
    is_multi_worker,
    prepare_multi_worker_fit,
    replicas_here,
    resolve_strategy,
)

# Sequences in the run-health probe batch.
PROBE_SEQUENCES = 32


@dataclass(frozen=True)
class ResolvedRun:
    """A run worked out once, by :func:`resolve_run`, and not changed after: the final
    ``settings`` (what ``run.json`` records: sharing, the objective's hyperparameters,
    generator size and the vocabulary's checksum filled in), the model's ``config`` (for a
    dry run's vocabulary yet to be learned, with the size it will have), the vocabulary's
    ``tokens`` (None: a dry run's) and ``source``, and the ``objective`` with its
    hyperparameters, looked up once."""

    settings: PretrainSettings
    config: ElectraConfig
    tokens: list[str] | None
    source: str
    objective: objectives.Objective

    @functools.cached_property
    def tokenizer(self) -> ElectraTokenizer:
        """The vocabulary's tokenizer, built once (its lookup table is the run's)."""
        return ElectraTokenizer(self.tokens, lowercase=self.config.lowercase)


@dataclass
class RunResult:
    run_dir: Path
    step: int
    history: list[dict]
    model: ElectraPretrainer
    tokenizer: ElectraTokenizer
    # False on a multi-worker cluster's other workers: the chief wrote the run directory.
    chief: bool = True

    @property
    def final_metrics(self) -> dict:
        return self.history[-1] if self.history else {}


def pretrain(
    corpus: list[str],
    output_dir: str | Path,
    *,
    settings: PretrainSettings | None = None,
    stop_on_signals: bool = True,
    **options,
) -> RunResult | PretrainPlan:
    """Pretrain (or resume pretraining) an ELECTRA model on text files.

    Args:
        corpus: text files (one sentence per line, blank line between
            documents), directories of ``*.txt`` files, or TFRecords written by
            ``keras-electra prepare``.
        output_dir: the run directory; resumed when it already holds a run (the
            settings that fix the data order or the model must then be the same).
        settings: the options as one object (keywords then replace its fields).
        stop_on_signals: while training, SIGTERM and SIGINT finish the current
            step, write its (partial) window's metrics line and a checkpoint at that
            step, and raise :class:`~keras_electra.errors.TrainingInterrupted`;
            calling again resumes there. Needs the main thread.
        **options: fields of :class:`~keras_electra.settings.PretrainSettings` (the
            command's flags). With ``strategy="multi_worker"`` (``TF_CONFIG`` on every
            worker) every worker calls this with the same arguments and ``output_dir``
            on storage they share; only the chief writes the run directory.

    Returns:
        A :class:`RunResult` with the trained model and the metrics history; with
        ``dry_run=True``, the run's :class:`~keras_electra.pretraining.plan.PretrainPlan`
        (every input checked, nothing trained or written).

    Raises:
        TrainingInterrupted: stopped by SIGTERM/SIGINT (a checkpoint is saved), or
            another worker of a cluster was lost (the same call resumes at ``step``).
        TrainingDiverged: a non-finite step under ``on_nan="stop"``.
        StorageError: a checkpoint, log or metrics write failed (no space,
            permissions, the directory removed); the previous checkpoint is kept.
        InputDataError, ConfigError: unusable data, vocabulary or settings.
        TypeError: a keyword that is not a setting.

    Examples:
        >>> result = pretrain(["data/sample/shakespeare.txt"], "runs/demo",
        ...                   steps=200)  # doctest: +SKIP
        >>> result.final_metrics["disc_auc"]  # doctest: +SKIP
    """
    corpus = [str(p) for p in ([corpus] if isinstance(corpus, str | Path) else corpus)]
    if not str(output_dir).strip():  # Path("") is the current folder: the run went there
        raise ConfigError("output_dir is empty; pass the run directory to write.")
    settings = with_options("pretrain", PretrainSettings, settings, corpus=corpus, **options)
    with StopRequest() if stop_on_signals else nullcontext(StopRequest()) as stop:
        return _pretrain(stop, Path(output_dir), settings)


def _pretrain(
    stop: StopRequest, run_dir: Path, requested: PretrainSettings
) -> RunResult | PretrainPlan:
    """Resolve the settings, prepare the run directory, build the model, then train (or,
    for a dry run, make the same checks and return the plan)."""
    run = RunDirectory(run_dir)
    text = [] if is_tfrecord_input(requested.corpus) else requested.corpus
    check_output_outside_corpus([*text, *requested.validation], run_dir, "pretrain")
    # --init hf:ORG/NAME: fetched and converted once, then read as a directory.
    requested = dataclasses.replace(requested, init=local_init(requested.init))
    init_preset = requested.init and RunDirectory(requested.init).settings().get("preset")
    if requested.init and requested.preset:
        _check_init_preset(requested.init, requested.preset)
    settings = requested.resolved(init_preset)
    if settings.dry_run:
        return _plan(run, settings)
    # Before a worker waits for the others to join: what TF_CONFIG alone shows is wrong.
    _check_batches(settings, cluster_size(settings.strategy))
    distribution = resolve_strategy(settings.strategy)
    if is_multi_worker(distribution):
        stop.arm()  # the workers stop together, at a step they agree on, once training starts
    _check_batches(settings, distribution.num_replicas_in_sync)
    chief = is_chief(distribution)
    if chief:  # before the directory is made: a bad KERAS_ELECTRA_KERNELS, an unwritable path
        kernels.choose()
        check_writable(run.path)
    with _worker_lost(run, distribution), run.claimed() if chief else nullcontext():
        resolved = _prepare_run_directory(run, settings, chief)
        settings = resolved.settings
        tokenizer = resolved.tokenizer
        model, checkpoints, start = _build(run, resolved, distribution, chief)
        if chief and start:  # notes, shown with --no-progress too (it hides the bar)
            print(_resumed(run_dir, start, settings.steps), flush=True)
        if chief and start < settings.steps:
            if note := warmup_note(settings):
                print(note, flush=True)
        stop.arm()  # from here a signal saves a checkpoint at the step reached
        # A lost worker as its sentence here too (the outer block covers the build).
        with _ending_kept(run, chief), _worker_lost(run, distribution):
            try:
                return _train(
                    stop, run_dir, settings, model, tokenizer, checkpoints, start, distribution
                )
            except tf.errors.DataLossError as e:
                raise _data_loss(settings, e) from None


def _lost_workers(message: str, me: int) -> str:
    """The workers other than task ``me`` that TensorFlow's error ``message`` names (as
    ``/job:worker/replica:0/task:1`` or ``/job:worker/task:1``), in words.

    Examples:
        >>> _lost_workers("Collective ops is aborted by: ... /job:worker/replica:0/task:1 ...", 0)
        'worker 1'
        >>> _lost_workers("Task /job:worker/task:2 heartbeat timeout; /job:worker/task:0", 0)
        'worker 2'
        >>> _lost_workers("Socket closed", 1)
        'another worker'
    """
    tasks = sorted({int(t) for t in re.findall(r"/job:\w+/(?:replica:\d+/)?task:(\d+)", message)})
    return " and ".join(f"worker {t}" for t in tasks if t != me) or "another worker"


@contextlib.contextmanager
def _ending_kept(run: RunDirectory, chief: bool):
    """On the chief, for ``keras-electra report``: the sentence a training that ends
    before its steps stops with (diverged, a signal, a lost worker, unreadable data), kept
    in the run directory until the run trains again."""
    if not chief:
        yield
        return
    run.clear_stop()
    try:
        yield
    except (TrainingDiverged, TrainingInterrupted, InputDataError) as e:
        run.record_stop(str(e))
        raise


@contextlib.contextmanager
def _worker_lost(run: RunDirectory, distribution: tf.distribute.Strategy):
    """Another worker of a cluster that crashed or ended (its machine lost, its process
    killed) as a stop that resumes, in one sentence, not TensorFlow's collective error."""
    try:
        yield
    except tf.errors.UnavailableError as e:
        if not is_multi_worker(distribution):
            raise
        others = _lost_workers(e.message, distribution.cluster_resolver.task_id)
        step = run.latest_step() or 0
        raise TrainingInterrupted(
            f"Lost {others} of the cluster (it crashed or was stopped); "
            "restart every worker with the same command: the run resumes from its last "
            f"checkpoint, step {step}.",
            step=step,
            signal_name="a lost worker",
        ) from None


def _plan(run: RunDirectory, settings: PretrainSettings) -> PretrainPlan:
    """A dry run: the checks a run makes before it trains, with the hardware it cannot
    see assumed, and the plan; nothing is written and no model is built."""
    check_writable(run.path)  # a run finds out by writing, and says why
    replicas, devices = replicas_here(settings.strategy)
    # Several workers: at least one replica each (the run finds how many).
    _check_batches(settings, replicas or cluster_size(settings.strategy))
    kernels.requested()  # a bad KERAS_ELECTRA_KERNELS (the choice itself builds kernels)
    resumed = run.config_file.exists()
    resolved = resolve_run(run, settings, learn=False)
    config, tokens = resolved.config, resolved.tokens
    files = _check_data(settings, tokens)
    if tokens is not None:
        vocabulary = f"{resolved.source} ({len(tokens):,} pieces)"
    else:
        vocabulary = f"learned from the corpus when the run starts ({config.vocab_size:,} pieces)"
    latest = latest_checkpoint(run.checkpoint_dir) if resumed else None
    if latest is not None:  # what the run restores first
        check_readable(latest)
    notes = {}  # what the run says before it trains
    if changed := _changed_on_resume(run.settings(), resolved.settings.record()):
        notes["changed"] = changed.removeprefix("Changed since the run's last start: ")
    if tokens is not None and not is_tfrecord_input(settings.corpus) and latest is None:
        warnings = corpus_warnings(resolved.tokenizer, files, settings.max_seq_length)
        if warnings:
            notes["warning"] = " ".join(w.removeprefix("Warning: ") for w in warnings)
    return PretrainPlan(
        settings=resolved.settings,
        run_dir=run.path,
        config=config,
        start_step=0 if latest is None else int(latest.rsplit("-", 1)[-1]),
        resumed=resumed,
        vocabulary=vocabulary,
        data=describe_data(settings, files),
        replicas=replicas,
        devices=devices,
        objective=resolved.objective,
        memory_here=_cpu_memory() if replicas and "the CPU" in devices else None,
        notes=notes,
    )


def _cpu_memory() -> int | None:
    """This machine's memory in bytes (what a run on its CPU can use at most), or None
    where the system does not say."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        return None


def _check_data(settings: PretrainSettings, tokens: list[str] | None) -> list[str]:
    """The corpus and ``--validation`` checked against the run before any model is built
    or anything written (text: that the files exist and hold text; TFRecords: their length
    and vocabulary, as the pipeline checks them again when it reads); returns the corpus's
    files."""
    files = _checked_input(settings.corpus, settings, tokens, "Corpus file")
    if settings.validation:  # in its own name: the probe reads it only once the model is built
        _checked_input(settings.validation, settings, tokens, "Validation file")
    return files


def _checked_input(
    paths: list[str], settings: PretrainSettings, tokens: list[str] | None, what: str
) -> list[str]:
    if is_tfrecord_input(paths):
        return check_records(
            paths,
            max_seq_length=settings.max_seq_length,
            vocab=tokens,
            lowercase=settings.lowercase,
        )
    files = resolve_corpus_files(paths, what)
    check_corpus_has_text(files, what)
    return files


def _prepare_run_directory(
    run: RunDirectory, settings: PretrainSettings, chief: bool
) -> ResolvedRun:
    """The run resolved (:func:`resolve_run`, with the kernels chosen), its model config,
    vocabulary and ``run.json`` written to the run directory.

    Only the chief writes the run directory. The other workers read the chief's files
    once it has checkpointed (before that they may be half-written) and otherwise
    derive the same vocabulary and config from the same arguments.
    """
    chosen = kernels.choose()
    settings = dataclasses.replace(settings, kernels=f"{chosen.backend}: {chosen.reason}")
    resolved = resolve_run(run, settings, chief=chief)
    config, tokens = resolved.config, resolved.tokens
    files = _check_data(settings, tokens)
    text = not is_tfrecord_input(settings.corpus)
    if chief and text and (note := left_out_note(settings.corpus)):
        print(note, file=sys.stderr, flush=True)
    # Said when a run starts; a resumed one said it then.
    if chief and tokens is not None and text and not run.has_checkpoint():
        for warning in corpus_warnings(resolved.tokenizer, files, settings.max_seq_length):
            print(warning, file=sys.stderr, flush=True)
    stored = run.config_and_vocab()[0] if run.config_file.exists() and chief else None
    if chief and config != stored:  # a new run, or a new --temperature the run goes on with
        with _writing(run.path):
            run.write_model_files(config, tokens)
    if chief:
        if settings.progress:
            print(chosen.describe(), flush=True)
        if changed := _changed_on_resume(run.settings(), resolved.settings.record()):
            print(changed, flush=True)
        with _writing(run.path):
            run.write_settings(resolved.settings.record())
    return resolved


# What a resumed run may change and goes on with, unlike its fixed settings (which it
# refuses to change): a user who left a flag out should see that its default replaced it.
_RESUME_CHANGES = ("corpus", "validation", "learning_rate", "warmup_steps", "steps")


def _changed_on_resume(previous: dict, record: dict) -> str | None:
    """The line a resumed run prints when the data or the schedule differ from those
    ``run.json`` recorded at its last start (``previous``; {} for a new run), else None."""
    shown = []
    for name in _RESUME_CHANGES:
        old, new = previous.get(name), record.get(name)
        if name not in previous or old == new:
            continue
        old, new = (" ".join(v) if isinstance(v, list) else v for v in (old, new))
        old, new = ("(none)" if v in (None, "") else v for v in (old, new))
        shown.append(f"--{name.replace('_', '-')} {old} -> {new}")
    if not shown:
        return None
    return (
        f"Changed since the run's last start: {', '.join(shown)}; it goes on with the new "
        "values (pass the old ones to keep them)."
    )


def resolve_run(
    run: RunDirectory, settings: PretrainSettings, *, chief: bool = True, learn: bool = True
) -> ResolvedRun:
    """The run that ``settings`` (resolved: :meth:`PretrainSettings.resolved`) ask for in
    ``run``, worked out once: nothing is written and ``settings`` is not changed.

    The vocabulary is the run directory's own when it is resumed (for a worker other
    than the ``chief``: once the chief has checkpointed), else ``--init``'s, else
    ``--vocab`` or (``learn``) one learned from the corpus; without ``learn`` (a dry run)
    such a vocabulary is None. The config is the resumed run's or ``--init``'s, else the
    preset's, with the flags applied and checked by the objective. So are the objective's
    hyperparameters: the resumed run's (which ``settings.hyperparameters`` must equal), else
    ``--init``'s (the preset's recipe for those it does not record: a converted directory
    records none) or the preset's recipe, with ``settings.hyperparameters``;
    ``--temperature`` applied to each.
    """
    run.refuse_exports("the run")
    fields = ("embedding_sharing", "generator_hidden_size")
    flags = (settings.embedding_sharing, settings.generator_size)
    overrides = dict(settings.config_overrides)
    overrides.update({k: v for k, v in zip(fields, flags, strict=True) if v is not None})
    given = {} if settings.temperature is None else {"temperature": settings.temperature}
    objective = objectives.get(settings.objective)
    _check_temperature_flag(settings, objective)
    # Checked before anything is written: a hyperparameter the objective does not have.
    objective = objective.with_hyperparameters(**{**settings.hyperparameters, **given})
    sharing = overrides.get("embedding_sharing")
    if sharing is not None:  # checked before anything is written
        objective.check(ElectraConfig(embedding_sharing=sharing))
    resuming = run.config_file.exists() if chief else run.has_checkpoint()
    if chief and not resuming:
        _check_no_orphan_checkpoints(run)
    if resuming:
        _check_resumable(run)
        source = str(run.vocab_file)
        stored, tokens = read_run(run, settings)
        if sharing is not None and sharing != stored.embedding_sharing:
            raise ConfigError(
                f"Run directory '{run.path}' was started with embedding_sharing="
                f"{stored.embedding_sharing!r}, not {sharing!r}; resume with the same value or "
                "choose a new --output."
            )
        if settings.vocab and load_vocab(settings.vocab) != tokens:  # the checkpoints' vocab
            raise ConfigError(
                f"--vocab '{settings.vocab}' differs from the vocabulary run '{run.path}' started "
                f"with ({run.vocab_file}, {len(tokens)} tokens); the checkpoints only fit that "
                "one, so pass the original file (and data tokenized with it) or start a new "
                "--output."
            )
        _check_size(stored, settings, f"Run directory '{run.path}'")
        asked = run.settings().get("asked_vocab_size")
        _check_vocabulary_flags(
            settings, stored, tokens, f"Run directory '{run.path}'", True, asked
        )
        reached = run.latest_step()
        if reached is not None and reached > settings.steps:  # it would stop there, untrained
            raise ConfigError(
                f"Run directory '{run.path}' has trained to step {reached:,}, past --steps "
                f"{settings.steps:,}; pass --steps {reached} or more to resume it, or choose a "
                "new --output."
            )
        config, recorded = stored, run.stored_hyperparameters()
        _check_kept(objective.restored(recorded), settings.hyperparameters, run.path)
    elif settings.init is not None:
        source, asked = str(RunDirectory(settings.init).vocab_file), None
        config, tokens = _init_source(settings.init, settings, sharing)
        stored = RunDirectory(settings.init).stored_objective()
        if stored is not None and stored != objective.name:  # its heads are another's
            raise ConfigError(
                f"--init '{settings.init}' was pretrained with --objective {stored}, not "
                f"{objective.name}; pass --objective {stored} to train on from it."
            )
        objective.check(config)
        _check_size(config, settings, f"--init '{settings.init}'")
        _check_vocabulary_flags(settings, config, tokens, f"--init '{settings.init}'", False)
        # --init's, else the preset's: a converted directory records none (the source's
        # recipe is unknown), so a tiny-sized one samples at the tiny preset's temperature.
        recorded = {
            **objective.preset_hyperparameters.get(settings.preset, {}),
            **RunDirectory(settings.init).stored_hyperparameters(),
        }
        recorded.update(settings.hyperparameters)  # given ones win, as --temperature does
    else:
        source = settings.vocab or "learned"
        asked = None if settings.vocab else _asked_vocab_size(settings)
        tokens = _vocabulary(settings, learn)
        overrides = {**objective.config_overrides, **overrides}
        config = model_config(settings.preset, tokens, settings.lowercase, settings, overrides)
        recorded = {**objective.preset_hyperparameters.get(settings.preset, {})}
        recorded.update(settings.hyperparameters)
    # The run's (or --init's, or the preset's, with those given), --temperature applied.
    objective = objective.restored(recorded).with_hyperparameters(**given)
    objective.check(config)  # with the flags applied, before a write
    final = dataclasses.replace(
        settings,
        embedding_sharing=config.embedding_sharing,
        temperature=getattr(objective.hyperparameters, "temperature", None),
        hyperparameters=objective.hyperparameter_values(),
        generator_size=config.generator_hidden_size,
        vocab_sha256=settings.vocab_sha256 if tokens is None else vocab_checksum(tokens),
        asked_vocab_size=asked,
    )
    return ResolvedRun(final, config, tokens, source, objective)


def _check_temperature_flag(settings: PretrainSettings, objective: objectives.Objective) -> None:
    """Refuse ``--temperature`` for an ``objective`` that samples at none (in the flag's
    words), and one that disagrees with ``--hyperparameters temperature=``."""
    flag, named = settings.temperature, settings.hyperparameters.get("temperature")
    if flag is None:
        return
    if "temperature" not in objective.hyperparameter_names():
        raise ConfigError(
            f"--temperature applies to an objective that samples at a temperature (electra); "
            f"the {settings.objective} objective has none, so leave the flag out."
        )
    if named is not None and named != flag:
        raise ConfigError(
            f"--temperature {flag:g} and --hyperparameters temperature={named:g} disagree; "
            "pass one of them."
        )


def _check_resumable(run: RunDirectory) -> None:
    """Refuse an ``--output`` holding a model that is not a pretraining run (a fine-tuned
    or converted directory), before its settings or checkpoints are read as a run's."""
    if run.is_finetuned():
        raise ConfigError(
            f"'{run.path}' holds a fine-tuned model, not a pretraining run to resume; choose a "
            "new --output."
        )
    if run.is_converted() or run.is_saved_from_python():
        what = "a converted checkpoint" if run.is_converted() else "a model saved by save_run"
        raise ConfigError(
            f"'{run.path}' holds {what}, not a pretraining run to resume; pass "
            f"it as --init '{run.path}' and choose a new --output."
        )
    if not run.vocab_file.is_file():
        raise ConfigError(
            f"Run directory '{run.path}' has {run.CONFIG} but {run.lacks(run.VOCAB)}: it is "
            "half-written (its files were removed, or a copy was cut short); restore its "
            f"{run.VOCAB} or choose a new --output."
        )


def _check_no_orphan_checkpoints(run: RunDirectory) -> None:
    """Refuse a run directory with checkpoints but no ``config.json``: a new run would
    restore them (and stop at their step) without the model they were trained for."""
    if run.has_checkpoint():
        raise ConfigError(
            f"Run directory '{run.path}' has checkpoints but {run.lacks(run.CONFIG)}: it is "
            f"half-written; restore its {run.CONFIG} to resume it, or choose a new --output."
        )


def _check_kept(stored: objectives.Objective, given: dict, run_dir: Path) -> None:
    """Refuse hyperparameters a resumed run was not started with (only ``--temperature``
    may change on resume)."""
    for name, value in given.items():
        if getattr(stored.hyperparameters, name) != value:
            raise ConfigError(
                f"Run directory '{run_dir}' was started with {name}="
                f"{getattr(stored.hyperparameters, name)!r}, not {value!r}; resume with the "
                "same value or choose a new --output."
            )


def _check_vocabulary_flags(
    settings: PretrainSettings,
    config: ElectraConfig,
    tokens: list[str],
    source: str,
    learned_here: bool,
    asked: int | None = None,
) -> None:
    """Refuse the vocabulary flags a resumed run or ``--init`` would ignore: their
    vocabulary is kept. ``--vocab-size`` asked "up to" that many pieces where the run
    learned its own (``learned_here``): it must be the size the run asked for (``asked``,
    from ``run.json``); for a run that did not record it, only a smaller one than the
    vocabulary's differs for sure."""
    size, fix = settings.vocab_size, "leave the flag out"
    if learned_here:
        fix += " or start a new --output"
    if size is not None and asked is not None:
        if size != asked:
            raise ConfigError(
                f"{source} has a vocabulary of {len(tokens):,} pieces learned at --vocab-size "
                f"{asked:,}, which the run keeps, not --vocab-size {size:,}; {fix}."
            )
    elif size is not None and (size < len(tokens) if learned_here else size != len(tokens)):
        raise ConfigError(
            f"{source} has a vocabulary of {len(tokens):,} pieces, which the run keeps, not "
            f"--vocab-size {size:,}; {fix}."
        )
    if not settings.lowercase and config.lowercase:
        raise ConfigError(
            f"{source} has an uncased vocabulary, which the run keeps, so --cased cannot "
            f"apply; {fix}."
        )
    if not learned_here and settings.vocab and load_vocab(settings.vocab) != tokens:
        raise ConfigError(
            f"--vocab '{settings.vocab}' differs from the vocabulary of {source}, which its "
            "weights fit; leave the flag out or pass that directory's vocab.txt."
        )


def _check_size(config: ElectraConfig, settings: PretrainSettings, source: str) -> None:
    """Refuse a ``--generator-size`` other than ``config``'s (a resumed run's or
    ``--init``'s): it would change the weights."""
    size = settings.generator_size
    if size is not None and abs(size - config.generator_hidden_size) > 1e-9:
        raise ConfigError(
            f"{source} has a generator of size {config.generator_hidden_size:g}, not "
            f"--generator-size {size:g}; leave the flag out or start a new --output."
        )


def _build(
    run: RunDirectory, resolved: ResolvedRun, distribution: tf.distribute.Strategy, chief: bool
) -> tuple[ElectraPretrainer, RunCheckpoints, int]:
    """The model and optimizer under the strategy, restored to the latest checkpoint (or
    ``--init``'s weights); returns them with the checkpoint manager and the step reached."""
    settings = resolved.settings
    keras.utils.set_random_seed(settings.seed)  # deterministic initial weights and dropout
    with distribution.scope():
        model, optimizer = _build_model(resolved, dtype_policy(settings.precision))
    checkpoints = run.checkpoints(
        model, optimizer, chief=chief, max_to_keep=settings.keep_checkpoints
    )
    start = checkpoints.restore_latest()
    if settings.init is not None and start == 0:
        _load_init_weights(model, Path(settings.init))
    if is_multi_worker(distribution):
        prepare_multi_worker_fit(model)
        vocabulary = zlib.crc32("\n".join(resolved.tokens).encode("utf-8"))
        parameters = model.count_params()
        check_workers_agree(
            distribution,
            step=start,
            vocabulary=vocabulary,
            parameters=parameters,
            **_shared_settings(settings),
        )
    if chief:
        truncate_metrics_log(run.metrics_file, start)
        truncate_tensorboard_logs(run.logs_dir, start)
    return model, checkpoints, start


# Paths may differ between machines that mount the same files, and kernels between CPUs;
# every worker that gets this far runs the multi-worker strategy.
_PER_WORKER = frozenset({"corpus", "validation", "strategy", "kernels"})


def _shared_settings(settings: PretrainSettings) -> dict:
    """The recorded settings every worker must share, keyed by their flag (a batch size
    or step count that differs would train on in silence, or hang a collective)."""
    cli = {f.name for f in dataclasses.fields(settings) if f.metadata["cli"]}
    return {
        f"--{name.replace('_', '-')}" if name in cli else name: value
        for name, value in settings.record().items()
        if name not in _PER_WORKER
    }


def _train(
    stop: StopRequest,
    run_dir: Path,
    settings: PretrainSettings,
    model: ElectraPretrainer,
    tokenizer: ElectraTokenizer,
    checkpoints: RunCheckpoints,
    start: int,
    distribution: tf.distribute.Strategy,
) -> RunResult:
    """Train from step ``start`` to ``settings.steps`` in logging windows, as resumable fits."""
    chief = is_chief(distribution)
    dataset = pretraining_dataset(
        settings.corpus,
        tokenizer,
        batch_size=settings.batch_size,
        max_seq_length=settings.max_seq_length,
        seed=settings.seed,
    ).skip(start)

    probe = _health_probe(model, tokenizer, settings) if settings.health and chief else None
    logger = MetricsLogger(
        RunDirectory(run_dir).metrics_file if chief else None,
        RunDirectory(run_dir).logs_dir if chief else None,
        tokens_per_step=settings.batch_size * settings.max_seq_length,
        total_steps=settings.steps,
        initial_step=start,
        progress=settings.progress and chief,
        measure=probe.measure if probe is not None else None,
        # Their remedies name --temperature where the objective samples at one.
        warnings=functools.partial(collapse_warnings, temperature="temperature" in model.sampling),
    )
    multi_worker = is_multi_worker(distribution)
    stopper = ClusterStopOnSignal(stop, distribution) if multi_worker else StopOnSignal(stop)
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
                logger.record_cut_short()
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
    return RunResult(run_dir, settings.steps, logger.history, model, tokenizer, chief)


# === Helpers ===


def _resumed(run_dir: Path, start: int, steps: int) -> str:
    """The line a resumed run prints: where it goes on from, or that it is done."""
    if start >= steps:
        return (
            f"Run directory '{run_dir}' is already at step {start:,} of --steps {steps:,}: "
            "nothing to train (pass a larger --steps to train on)."
        )
    return f"Resuming '{run_dir}' from its checkpoint at step {start:,} of {steps:,}."


def _diverged(
    settings: PretrainSettings, step: int, checkpoints: RunCheckpoints
) -> TrainingDiverged:
    """The one-sentence error of a non-finite step under ``on_nan="stop"``."""
    latest, kept = checkpoints.latest, "no checkpoint was written"
    if latest:
        kept = f"the last checkpoint (step {latest.rsplit('-', 1)[-1]}) is untouched"
    steps = f"step {step}"
    if settings.steps_per_execution > 1:
        steps = f"one of steps {step}-{step + settings.steps_per_execution - 1}"
    precision = ""
    if settings.precision != "float32":
        precision = f" or --precision float32 (now {settings.precision})"
    return TrainingDiverged(
        f"Training diverged at {steps}: the loss or gradient norm was NaN or infinite, so "
        f"the update was not applied and {kept}; lower --learning-rate (now "
        f"{settings.learning_rate:g}){precision}, or pass --on-nan skip to skip such steps, "
        "then run the command again with the new flag to resume."
    )


def _data_loss(settings: PretrainSettings, error: tf.errors.DataLossError) -> InputDataError:
    """The one-sentence error of a truncated or corrupt TFRecord shard, naming it."""
    found = unreadable_tfrecord(settings.corpus) if is_tfrecord_input(settings.corpus) else None
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
    model: ElectraPretrainer, tokenizer: ElectraTokenizer, settings: PretrainSettings
) -> HealthProbe:
    """The run's fixed probe: the first batch of the validation text (else of the corpus)."""
    data = pretraining_dataset(
        settings.validation or settings.corpus,
        tokenizer,
        batch_size=PROBE_SEQUENCES,
        max_seq_length=settings.max_seq_length,
        seed=settings.seed + 1,
    )
    batch = next(iter(data))
    return HealthProbe(model, {k: v.numpy() for k, v in batch.items()}, seed=settings.seed)


def _build_model(resolved: ResolvedRun, policy: keras.DTypePolicy):
    """The pretrainer and its optimizer, compiled and built (call under a strategy scope)."""
    settings = resolved.settings
    model = ElectraPretrainer(
        resolved.config, objective=resolved.objective, seed=settings.seed, dtype=policy
    )
    optimizer = create_optimizer(
        model,
        learning_rate=settings.learning_rate,
        total_steps=settings.steps,
        warmup_steps=settings.warmup_steps,
        loss_scale=needs_loss_scaling(settings.precision),
        optimizer=settings.optimizer,
        bias_correction=settings.bias_correction,
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


def _check_batches(settings: PretrainSettings, replicas: int) -> None:
    """The global batch splits over the replicas, and each into the micro-batches; the
    compiled steps divide the logging windows and the run."""
    if settings.batch_size % replicas:
        raise ConfigError(
            f"--batch-size {settings.batch_size} must be a multiple of the {replicas} replicas "
            "that share each batch."
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


def _vocabulary(settings: PretrainSettings, learn: bool = True) -> list[str] | None:
    """The ``--vocab`` file's tokens, or a vocabulary learned from the corpus (None
    without ``learn``: a dry run does not read the whole corpus)."""
    if is_tfrecord_input(settings.corpus):
        if not settings.vocab:
            raise ConfigError(
                "TFRecord input needs the vocabulary it was prepared with; pass --vocab "
                "(keras-electra prepare writes vocab.txt next to the records)."
            )
    else:
        check_corpus_has_text(resolve_corpus_files(settings.corpus))
    if settings.vocab:
        tokens = load_vocab(settings.vocab)
        check_cased_vocab(tokens, settings.vocab, settings.lowercase)
        return tokens
    size = _asked_vocab_size(settings)
    check_vocab_size(size)  # a dry run too
    if not learn:
        return None
    return learn_vocab(
        settings.corpus, size, lowercase=settings.lowercase, progress=settings.progress
    )


def _asked_vocab_size(settings: PretrainSettings) -> int:
    """The size a vocabulary learned from the corpus is asked for: ``--vocab-size``, else
    the preset's."""
    return settings.vocab_size or ElectraConfig.from_preset(settings.preset).vocab_size


def model_config(
    preset: str,
    tokens: list[str] | None,
    lowercase: bool,
    settings: PretrainSettings,
    overrides: dict,
) -> ElectraConfig:
    """The config ``pretrain`` builds for a new run: the preset's sizes, the vocabulary's
    size and special-token ids (``tokens`` None, for a dry run's vocabulary yet to be
    learned: ``settings.vocab_size`` or the preset's, and the default ids), ``overrides``
    (:func:`resolve_run` passes the objective's ``config_overrides`` under the flags'), and
    a position table at least
    ``settings.max_seq_length`` long."""
    if tokens is None:
        size = settings.vocab_size or ElectraConfig.from_preset(preset).vocab_size
        special = {"vocab_size": size}
    else:
        ids = {t: i for i, t in enumerate(tokens)}
        names = ("pad", "cls", "sep", "mask")
        special = {f"{n}_token_id": ids[f"[{n.upper()}]"] for n in names}
        special["vocab_size"] = len(tokens)
    config = ElectraConfig.from_preset(preset, lowercase=lowercase, **special, **overrides)
    if settings.max_seq_length > config.max_position_embeddings:
        config = config.replace(max_position_embeddings=settings.max_seq_length)
    return config


def _check_init_preset(init: str, preset: str) -> None:
    """Refuse ``--preset`` beside an ``--init`` model of other sizes: the run would train
    ``--init``'s model under the preset's name and recipe (its batch, warm-up, rate)."""
    source = RunDirectory(init)
    if not source.has_config():
        return  # _init_source names what is missing
    have, want = ElectraConfig.load(source.config_file), ElectraConfig.from_preset(preset)
    sizes = ("num_layers", "hidden_size", "num_heads", "intermediate_size", "embedding_size")
    if any(getattr(have, k) != getattr(want, k) for k in sizes):
        shape = [
            f"{c.num_layers} layer{'s' * (c.num_layers != 1)} x {c.hidden_size}"
            for c in (want, have)
        ]
        raise ConfigError(
            f"--preset {preset} is a model of {shape[0]}, but --init '{init}' is one of "
            f"{shape[1]}; "
            "leave --preset out (the run takes --init's sizes and its preset's recipe) or "
            f"pass --init a {preset} model."
        )


def _init_source(
    init: str | Path, settings: PretrainSettings, sharing: str | None = None
) -> tuple[ElectraConfig, list[str]]:
    """The config and vocabulary of an ``--init`` directory, checked against the settings;
    ``sharing``: the run's ``embedding_sharing`` when asked for (default: the directory's)."""
    source = RunDirectory(init)
    source.require_config(
        f"--init '{init}' is not a run or converted directory",
        "pass the --output of `keras-electra pretrain` or `keras-electra convert`",
    )
    if source.is_finetuned():  # no generator, and a task's head: it cannot start a pretraining
        raise ConfigError(
            f"--init '{init}' holds a fine-tuned model; pass the pretraining run or converted "
            "directory it was fine-tuned from."
        )
    config, tokens = read_run(source, None)
    if not source.has_checkpoint():
        raise ConfigError(f"--init '{init}' has no checkpoint.")
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


def _load_init_weights(model: ElectraPretrainer, init: Path) -> None:
    """Load an init directory's weights (generator included) into a fresh model; one shared
    in another mode (``all``) through a model of its own mode (``transfer_weights``)."""
    source, directory = model, RunDirectory(init)
    config = ElectraConfig.load(directory.config_file)
    if config.embedding_sharing != model.config.embedding_sharing:
        source = stored_pretrainer(directory, config, model.objective)
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
            f"Could not write '{where}' ({storage_reason(e)}); "
            f"{storage_remedy(e, run_dir)}, then run the same command again."
        ) from None
