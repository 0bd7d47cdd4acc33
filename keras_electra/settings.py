"""Every run option, written once: the API, ``run.json`` and the command's flags.

:class:`PretrainSettings` is what :func:`~keras_electra.pretraining.run.pretrain`
takes (as keywords or as one object); ``keras-electra pretrain``'s flags are generated
from its fields (:func:`add_arguments`; docs/pretraining.md). A field left ``None``
takes its preset's value from :data:`keras_electra.config.TRAINING_DEFAULTS`. Adding an
option is one field here (name, type, default, help) plus the code that uses it.
:class:`FinetuneOptions` does the same for ``finetune()``, with the paper's recipe per
model size (:data:`FINETUNE_RECIPE`), and :class:`PrepareSettings` for ``prepare()``.

This module is plain Python (no TensorFlow), so the command's ``--help`` stays fast.

Examples:
    >>> settings = PretrainSettings(corpus=["a.txt"], steps=300).resolved()
    >>> settings.preset, settings.steps, settings.batch_size, settings.learning_rate
    ('tiny', 300, 32, 0.0005)
"""

from __future__ import annotations

import argparse
import dataclasses
import numbers
from dataclasses import dataclass, field
from typing import Any

from keras_electra.config import EMBEDDING_SHARING, PRESETS, TRAINING_DEFAULTS
from keras_electra.errors import ConfigError

# The choices of the options below; the modules that act on them import them from here.
# The pretraining objectives (keras_electra.pretraining.objectives), by name: "module:Class",
# imported when a run asks for it. Adding an objective is one module and one line here.
OBJECTIVES: dict[str, Any] = {
    "electra": "keras_electra.pretraining.objectives.electra:ReplacedTokenDetection",
    "mlm": "keras_electra.pretraining.objectives.mlm:MaskedLM",
    "electric": "keras_electra.pretraining.objectives.electric:EnergyCloze",
}
ON_NAN = ("stop", "skip")
OPTIMIZERS = ("adamw", "lamb")
LAMB_BIAS_CORRECTION = (
    "--no-bias-correction changes AdamW's update only, and LAMB has its own (always "
    "bias-corrected): drop the flag or choose --optimizer adamw."
)
PRECISIONS = ("float32", "mixed_bfloat16", "mixed_float16")
STRATEGIES = ("auto", "tpu", "mirrored", "multi_worker", "one_device")


def option(
    default: Any,
    help: str,  # noqa: A002 - argparse's word
    *,
    choices: tuple | None = None,
    metavar: str | None = None,
    negated: str | None = None,
    flag: str | None = None,
    required: bool = False,
    fixed: bool = False,
    record: bool = True,
    cli: bool = True,
) -> Any:
    """A settings field with its command-line form.

    Args:
        default: the default (a list or dict is copied per instance; ``None`` for a
            per-preset default).
        help: the flag's help text (and the field's documentation).
        choices: the allowed values.
        metavar: the flag's value name in ``--help``.
        negated: for a boolean that defaults to True, the flag that turns it off
            (``--no-health``, ``--cased``).
        flag: the flag, where it is not the field's name (``--squad-v2``).
        required: the command needs the flag.
        fixed: a resumed run must keep the value (it fixes the data order or the model).
        record: written to ``run.json``.
        cli: has a flag (False: Python callers only, or filled in by the run).
    """
    metadata = dict(help=help, choices=choices, metavar=metavar, negated=negated, flag=flag)
    metadata.update(required=required, fixed=fixed, record=record, cli=cli)
    if isinstance(default, list | dict):
        return field(default_factory=lambda: type(default)(default), metadata=metadata)
    return field(default=default, metadata=metadata)


PER_PRESET = "(default: per preset)"
DRY_RUN = (
    "check the settings and every input (files, TFRecords, vocabulary, output directory), "
    "print the plan and exit without training or writing anything"
)


@dataclass
class PretrainSettings:
    """The options of a pretraining run (see the module docstring)."""

    corpus: list[str] = option(
        [], "text files, directories of *.txt, or TFRecord files", metavar="PATH", required=True
    )
    preset: str | None = option(
        None,
        "model size and training defaults (default: --init's, else tiny)",
        choices=tuple(PRESETS),
        fixed=True,
    )
    # Weights, config and vocabulary come from the directory (a run, or what
    # `keras-electra convert` wrote); the optimizer, the step and the data order start fresh.
    init: str | None = option(
        None,
        "start from this run's or `keras-electra convert` output's weights, or from a "
        "Hugging Face model (hf:ORG/NAME, fetched and converted once)",
        metavar="DIR",
        record=False,
    )
    validation: list[str] = option(
        [],
        "held-back text for the run-health probe (default: a batch of the corpus)",
        metavar="PATH",
    )
    health: bool = option(
        True,
        "skip the run-health probe (it costs about 1.4%% of the training time, at most 2%%)",
        negated="--no-health",
        record=False,
    )
    objective: str = option("electra", "the pretraining objective", choices=OBJECTIVES, fixed=True)
    embedding_sharing: str | None = option(
        None,
        "what the generator and the discriminator share: all (the paper's default), gdes "
        "(gradient-disentangled, DeBERTaV3), word (the word table only) or none (default: "
        "--init's, else the preset's; a resumed run keeps its own)",
        choices=EMBEDDING_SHARING,
    )
    # Two model settings a user tunes when the run-health warnings say the discriminator
    # collapsed or stopped detecting: the generator's sampling temperature (a resumed
    # run may change it) and its size (fixed once the run has weights).
    temperature: float | None = option(
        None,
        "the generator's sampling temperature; higher gives the discriminator easier "
        "replacements (default: --init's, else the preset's)",
    )
    generator_size: float | None = option(
        None,
        "the generator's hidden size as a fraction of the discriminator's (default: "
        "--init's, else the preset's; a new run only)",
    )
    steps: int | None = option(None, f"total training steps {PER_PRESET}")
    batch_size: int | None = option(
        None, f"sequences per step, the global batch {PER_PRESET}", fixed=True
    )
    max_seq_length: int | None = option(None, f"tokens per sequence {PER_PRESET}", fixed=True)
    learning_rate: float | None = option(None, f"peak learning rate {PER_PRESET}")
    warmup_steps: int | None = option(None, f"linear warm-up steps {PER_PRESET}")
    vocab: str | None = option(
        None, "BERT-format vocab.txt (default: learn one)", metavar="FILE", record=False
    )
    vocab_size: int | None = option(
        None, "size of a learned vocabulary (default: the preset's)", record=False
    )
    lowercase: bool = option(
        True, "keep case (learned vocabularies)", negated="--cased", record=False
    )
    log_every: int = option(50, "steps per metrics.jsonl line")
    checkpoint_every: int | None = option(
        None, "steps between checkpoints (default: 500, rounded up to --log-every)"
    )
    keep_checkpoints: int = option(
        3, "how many recent checkpoints the run directory keeps", metavar="N"
    )
    seed: int = option(0, "seeds the data order, masking, sampling and dropout", fixed=True)
    precision: str = option(
        "float32", "compute precision (variables stay float32)", choices=PRECISIONS, fixed=True
    )
    strategy: str = option(
        "auto", "distribution strategy; --batch-size is the global batch", choices=STRATEGIES
    )
    optimizer: str = option(
        "adamw",
        "AdamW, or LAMB for very large batches (same schedule and decay)",
        choices=OPTIMIZERS,
        fixed=True,
    )
    bias_correction: bool = option(
        True,
        "drop Adam's bias correction: update as google-research/electra's optimizer does "
        "(larger early steps; AdamW only; a resumed run keeps its own)",
        negated="--no-bias-correction",
        fixed=True,
    )
    # Only the forward and backward pass is compiled; the optimizer update stays outside,
    # so this works with every strategy. Under XLA the seeded random ops draw another
    # (equally deterministic) stream: samples and dropout differ from a run without it.
    xla: bool = option(
        False, "compile the forward + backward pass with XLA (default: off, slower on CPU)"
    )
    steps_per_execution: int = option(
        1, "training steps per compiled call (divides --log-every and --steps)", metavar="N"
    )
    grad_accumulation: int = option(
        1, "split each batch into K micro-batches, one optimizer update", metavar="K"
    )
    on_nan: str = option(
        "stop",
        "a step with a NaN/Inf loss or gradient norm: stop the run (default; weights and "
        "checkpoints untouched) or skip its update and count it (skipped_steps)",
        choices=ON_NAN,
    )
    progress: bool = option(True, "hide the progress bar", negated="--no-progress", record=False)
    dry_run: bool = option(
        False,
        f"{DRY_RUN}; the plan: model size and parameters, tokens and FLOPs per step, steps, "
        "memory per device, checkpoints",
        record=False,
    )
    # ElectraConfig fields to change, for a new run. When resuming, and with --init, only
    # embedding_sharing counts: a resumed run must keep its own mode, and an init
    # directory that shares "all" can start a run in any mode (the discriminator's own
    # tables start as copies of the shared ones, GDES deltas at zero), another mode
    # only its own.
    config_overrides: dict = option(
        {}, "ElectraConfig fields to change from the preset", cli=False, record=False
    )
    # The objective's hyperparameters (keras_electra.pretraining.objectives): those to
    # change from the preset's recipe or --init's (a resumed run keeps its own: only
    # --temperature may change); run.json records them all, resolved.
    hyperparameters: dict = option(
        {},
        "the objective's hyperparameters to change from the preset's or --init's, as "
        "NAME=VALUE (a number, true or false): electra's mlm_weight, disc_weight, "
        "corrective_weight (a COCO-LM-style corrective LM), temperature, disallow_correct; "
        "mlm's mlm_weight; electric's mlm_weight, disc_weight (a resumed run keeps its own)",
        metavar="NAME=VALUE",
    )
    # Filled in by the run: the vocabulary's checksum (a run refuses to resume on a changed
    # one), and the training kernels' backend and why (keras_electra.kernels).
    vocab_sha256: str = option("", "the vocabulary's checksum", cli=False)
    # Filled in by a run that learns its vocabulary: the size it asked for (--vocab-size or
    # the preset's), which the vocabulary may fall short of; a resumed run's --vocab-size
    # must be this one. None: --vocab's or --init's vocabulary, or a run from before.
    asked_vocab_size: int | None = option(
        None, "the --vocab-size the run's vocabulary was learned at", cli=False
    )
    kernels: str = option("", "the training kernels (KERAS_ELECTRA_KERNELS)", cli=False)

    # --- derived views ---

    @classmethod
    def fixed_names(cls) -> tuple[str, ...]:
        """Settings a resumed run must keep (they fix the data order or the model)."""
        return tuple(f.name for f in dataclasses.fields(cls) if f.metadata["fixed"])

    def record(self) -> dict:
        """What ``run.json`` holds."""
        return {
            f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.metadata["record"]
        }

    def resolved(self, preset: str | None = None) -> PretrainSettings:
        """A copy with the preset (default: ``preset``, else ``tiny``) and its defaults
        filled in, values checked; one sentence names a bad one."""
        chosen = self.preset or preset or "tiny"
        check_choices(self, ("objective", "precision", "strategy", "optimizer", "on_nan"))
        check_choices(self, ("preset",), {"preset": chosen})
        defaults = TRAINING_DEFAULTS[chosen]
        values = {name: getattr(self, name) for name in defaults}
        filled = {k: defaults[k] if v is None else v for k, v in values.items()}
        out = dataclasses.replace(
            self,
            preset=chosen,
            corpus=[str(p) for p in self.corpus],
            validation=[str(p) for p in self.validation or []],
            xla=bool(self.xla),
            **filled,
        )
        # Counts a run cannot use are refused before they are clamped or rounded below.
        for name in ("log_every", "checkpoint_every", "vocab_size"):
            if (value := getattr(out, name)) is not None and value < 1:
                raise ConfigError(f"--{name.replace('_', '-')} must be a positive integer.")
        if out.warmup_steps < 0:
            raise ConfigError("--warmup-steps must be 0 or more.")
        out.log_every = max(1, min(out.log_every, out.steps))  # --steps is checked below
        every = out.checkpoint_every or max(out.log_every, 500)
        out.checkpoint_every = -(-every // out.log_every) * out.log_every
        out.check()
        return out

    def check(self) -> None:
        """Raise a one-sentence ConfigError for a value no run can use."""
        for name in ("steps", "batch_size", "max_seq_length"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"--{name.replace('_', '-')} must be a positive integer.")
        if self.learning_rate <= 0:
            raise ConfigError("--learning-rate must be positive.")
        if self.max_seq_length < 8:
            raise ConfigError("--max-seq-length must be at least 8.")
        if self.keep_checkpoints < 1:
            raise ConfigError("--keep-checkpoints must be at least 1.")
        check_seed(self.seed)
        if self.optimizer == "lamb" and not self.bias_correction:
            raise ConfigError(LAMB_BIAS_CORRECTION)
        for name in ("temperature", "generator_size"):
            if (value := getattr(self, name)) is not None and not value > 0:
                raise ConfigError(f"--{name.replace('_', '-')} must be positive, not {value}.")


MAX_SEED = 2**32 - 1  # NumPy's and Keras' global seeds (keras.utils.set_random_seed)


def check_seed(seed: int) -> None:
    """One sentence for a ``--seed`` the random generators refuse (with a traceback, once
    the run had written its files)."""
    if not 0 <= seed <= MAX_SEED:
        raise ConfigError(f"--seed must be between 0 and {MAX_SEED:,}, not {seed}.")


# --- fine-tuning ---

TASKS = ("classify", "regress", "tag", "qa")
"""Sequence classification, sequence regression, token tagging, extractive QA."""
POOLINGS = ("cls", "mean")

# The paper's fine-tuning recipe (Clark et al., 2020, appendix) per model size; ``tiny``
# is this project's test size, with a larger learning rate.
FINETUNE_RECIPE: dict[str, dict[str, float]] = {
    "tiny": {"learning_rate": 1e-3, "layer_decay": 0.8},
    "small": {"learning_rate": 3e-4, "layer_decay": 0.8},
    "small++": {"learning_rate": 3e-4, "layer_decay": 0.8},
    "base": {"learning_rate": 1e-4, "layer_decay": 0.8},
    "large": {"learning_rate": 5e-5, "layer_decay": 0.9},
}
FINETUNE_COMMON: dict[str, float] = {
    "batch_size": 32,
    "epochs": 3,
    "dropout": 0.1,
    "weight_decay": 0.01,
    "warmup_fraction": 0.1,
    "probe_epochs": 0,  # the paper fine-tunes everything from the start
}
TASK_EPOCHS: dict[str, int] = {"regress": 10, "qa": 2}
"""The paper trains STS (regression) for 10 epochs and SQuAD (QA) for 2; pass ``epochs=10``
for RTE too."""


def check_task(task: str) -> str:
    """Return ``task`` if it is a known task name, else raise :class:`ConfigError`."""
    if task not in TASKS:
        raise ConfigError(f"Unknown task '{task}'; choose one of: {', '.join(TASKS)}.")
    return task


def recipe_defaults(preset: str) -> dict[str, float]:
    """The paper's fine-tuning hyperparameters for a model size.

    Examples:
        >>> recipe_defaults("large")["layer_decay"]
        0.9
    """
    if preset not in FINETUNE_RECIPE:
        raise ConfigError(
            f"Unknown preset '{preset}'; choose one of: {', '.join(FINETUNE_RECIPE)}."
        )
    return {**FINETUNE_COMMON, **FINETUNE_RECIPE[preset]}


RECIPE_DEFAULT = "(default: the paper's for the model size)"


@dataclass
class FinetuneOptions:
    """The options of a fine-tuning run: ``finetune()``'s keywords and the command's flags.

    A hyperparameter left ``None`` takes the paper's value for the source's model size
    (:func:`recipe_defaults`); :meth:`resolved` fills them in and checks every value.
    """

    text_column: str = option("text", "text column name or 0-based index")
    text_pair_column: str | None = option(None, "second text column, for sentence pairs")
    label_column: str = option("label", "label column name or index")
    epochs: int | None = option(None, "passes over the data (default: 3; 10 for regress, 2 for qa)")
    batch_size: int | None = option(None, "examples per step (default: 32)")
    learning_rate: float | None = option(None, f"peak rate of the head {RECIPE_DEFAULT}")
    layer_decay: float | None = option(None, f"layer-wise rate decay {RECIPE_DEFAULT}")
    weight_decay: float | None = option(None, "decoupled weight decay (default: 0.01)")
    warmup_fraction: float | None = option(None, "fraction of warm-up steps (default: 0.1)")
    dropout: float | None = option(None, "dropout of the backbone and the head (default: 0.1)")
    bias_correction: bool = option(
        True,
        "drop Adam's bias correction: update as google-research/electra's optimizer does "
        "(larger early steps)",
        negated="--no-bias-correction",
    )
    probe_epochs: int = option(
        0,
        "first train only the head for this many passes, the backbone frozen, at 10x the "
        "learning rate (linear probe, then fine-tune: LP-FT)",
    )
    pooling: str = option(
        "cls",
        "classify/regress: read the [CLS] vector (default) or the mean of the tokens",
        choices=POOLINGS,
    )
    max_seq_length: int = option(128, "tokens per example, [CLS] and [SEP] included")
    version_2: bool = option(
        False, "qa: questions may be unanswerable (SQuAD 2.0)", flag="--squad-v2"
    )
    doc_stride: int | None = option(
        None,
        "qa: context pieces between the starts of neighbouring windows, below a window's "
        "room (--max-seq-length - --max-query-length - 3) so that windows overlap "
        "(default: half the room)",
    )
    max_query_length: int = option(64, "qa: question tokens kept")
    max_answer_length: int = option(30, "qa: longest answer")
    seed: int = option(0, "seeds the head's initial weights, dropout and the data order")
    progress: bool = option(True, "no progress bar and no per-epoch lines", negated="--quiet")
    dry_run: bool = option(
        False,
        f"{DRY_RUN}; the plan: model size and parameters, examples, steps, tokens and FLOPs "
        "per step, memory",
    )

    HYPERPARAMETERS = (
        "epochs",
        "batch_size",
        "learning_rate",
        "layer_decay",
        "weight_decay",
        "warmup_fraction",
        "probe_epochs",
    )

    def resolved(self, preset: str, task: str, max_positions: int) -> FinetuneOptions:
        """A copy with the recipe's values filled in for ``preset`` and ``task``, checked
        against a model with ``max_positions`` positions; one sentence names a bad value."""
        check_task(task)
        defaults = recipe_defaults(preset)
        defaults["epochs"] = TASK_EPOCHS.get(task, int(defaults["epochs"]))
        defaults["batch_size"] = int(defaults["batch_size"])
        names = (*self.HYPERPARAMETERS, "dropout")
        filled = {n: defaults[n] if getattr(self, n) is None else getattr(self, n) for n in names}
        out = dataclasses.replace(self, **filled)
        for name in ("epochs", "batch_size", "learning_rate", "layer_decay"):
            if (value := getattr(out, name)) <= 0:
                raise ConfigError(f"--{name.replace('_', '-')} must be positive, got {value}.")
        if out.probe_epochs < 0:
            raise ConfigError(f"--probe-epochs must be 0 or more, got {out.probe_epochs}.")
        if not 0.0 <= out.warmup_fraction <= 1.0:
            raise ConfigError(
                f"--warmup-fraction must be in [0, 1] (a fraction of the run's steps), got "
                f"{out.warmup_fraction}."
            )
        if out.weight_decay < 0:
            raise ConfigError(f"--weight-decay must be 0 or more, got {out.weight_decay}.")
        if not 0.0 <= out.dropout < 1.0:
            raise ConfigError(f"--dropout must be in [0, 1), got {out.dropout}.")
        check_choices(out, ("pooling",))
        check_seed(out.seed)
        if not 8 <= out.max_seq_length <= max_positions:
            raise ConfigError(
                f"--max-seq-length must be between 8 and {max_positions} (the model's "
                f"position table), got {out.max_seq_length}."
            )
        if task == "qa":
            check_query_room(out.max_seq_length, out.max_query_length)
        if task == "qa" and out.doc_stride is not None:
            check_doc_stride(out.doc_stride, out.max_seq_length, out.max_query_length)
        return out

    def hyperparameters(self) -> dict[str, Any]:
        """The optimizer's settings (after :meth:`resolved`), as ``finetune.json`` records."""
        return {name: getattr(self, name) for name in self.HYPERPARAMETERS}


def check_query_room(max_seq_length: int, max_query_length: int) -> None:
    """Refuse in one sentence a ``--max-query-length`` that leaves a QA window under 2
    context pieces after the longest question (before, it failed at the first long question,
    and hid a ``--doc-stride`` that could not work).

    Examples:
        >>> check_query_room(128, 64)
        >>> check_query_room(32, 64)
        Traceback (most recent call last):
        ...
        keras_electra.errors.ConfigError: --max-query-length 64 leaves no room for the \
context in windows of --max-seq-length 32 (a 64-piece question and 3 special tokens); pass \
--max-query-length 16 (at most 27) or a larger --max-seq-length.
    """
    if max_query_length < 1:
        raise ConfigError(f"--max-query-length must be positive, got {max_query_length}.")
    most = max_seq_length - 5  # 2 context pieces after [CLS], [SEP] and [SEP]
    if max_query_length > most:
        raise ConfigError(
            f"--max-query-length {max_query_length} leaves no room for the context in windows "
            f"of --max-seq-length {max_seq_length} (a {max_query_length}-piece question and 3 "
            f"special tokens); pass --max-query-length {max(1, max_seq_length // 2)} (at most "
            f"{most}) or a larger --max-seq-length."
        )


def check_doc_stride(stride: int, max_seq_length: int, max_query_length: int) -> None:
    """Refuse in one sentence a ``--doc-stride`` that leaves QA windows no overlap: one not
    below the room of a window after the longest question (an answer across two windows
    would lie whole in neither); a room under 2 pieces has no overlap to keep.

    Examples:
        >>> check_doc_stride(64, 128, 64)
        Traceback (most recent call last):
        ...
        keras_electra.errors.ConfigError: --doc-stride 64 leaves no overlap between ...
    """
    room = max_seq_length - max_query_length - 3
    if stride < 1:
        raise ConfigError(f"--doc-stride must be positive, got {stride}.")
    if stride >= room >= 2:
        raise ConfigError(
            f"--doc-stride {stride} leaves no overlap between context windows of {room} "
            f"pieces (--max-seq-length {max_seq_length} less a {max_query_length}-piece "
            f"question and 3 special tokens); pass one below {room}, or leave it out for "
            "half a window."
        )


# --- prepare ---


@dataclass
class PrepareSettings:
    """The options of ``keras-electra prepare``: a corpus packed once into sharded
    TFRecords (:func:`keras_electra.data.prepare.prepare`)."""

    corpus: list[str] = option([], "text files or directories", metavar="PATH", required=True)
    vocab: str | None = option(None, "BERT-format vocab.txt (default: learn one)", metavar="FILE")
    vocab_size: int = option(30522, "size of a learned vocabulary")
    lowercase: bool = option(True, "keep case (learned vocabularies)", negated="--cased")
    max_seq_length: int = option(
        128,
        "tokens per example: the length you will pretrain at, which pretrain's "
        "--max-seq-length must match (the presets' lengths: "
        + ", ".join(f"{name} {d['max_seq_length']}" for name, d in TRAINING_DEFAULTS.items())
        + ")",
    )
    num_shards: int = option(
        8, "TFRecord files to write (one a worker's unit: use a few per worker and core)"
    )
    seed: int = option(0, "seeds how sentences are packed into examples")
    workers: int | None = option(
        None,
        "processes on this machine (default: in this process, or every core on Apache Beam "
        "for a corpus of 256 MB or more on 4 cores or more with the beam extra; 1: in this "
        "process)",
    )
    beam_options: list[str] = option(
        [],
        "Apache Beam pipeline options: on the command line, any flag prepare does not "
        "know (--runner DataflowRunner --project P --region R --temp_location gs://B/tmp)",
        cli=False,
    )
    dry_run: bool = option(
        False,
        f"{DRY_RUN}; the plan: corpus files, vocabulary, example length, shards",
    )


def check_choices(settings: Any, names: tuple[str, ...], values: dict | None = None) -> None:
    """Raise :class:`ConfigError` naming the first of ``names`` whose value (from
    ``values``, else the field of ``settings``) is not one of its field's choices."""
    fields = {f.name: f for f in dataclasses.fields(settings)}
    for name in names:
        choices = fields[name].metadata["choices"]
        value = (values or {}).get(name, getattr(settings, name))
        if value not in choices:
            label = name if "_" not in name else "--" + name.replace("_", "-")
            raise ConfigError(f"Unknown {label} '{value}'; choose one of: {', '.join(choices)}.")


def with_options(function: str, kind: type, settings, **options):
    """``settings`` (else ``kind()``'s defaults) with ``options`` replaced: what
    ``pretrain()``, ``prepare()`` and ``finetune()`` do with their keywords.

    Raises:
        TypeError: naming every keyword that is not a field of ``kind``, in one sentence.
    """
    fields = {f.name: f for f in dataclasses.fields(kind)}
    unknown = sorted(set(options) - set(fields))
    if unknown:
        named = ", ".join(map(repr, unknown))
        raise TypeError(
            f"{function}() has no option{'s' if len(unknown) > 1 else ''} {named}; the options "
            f"are the fields of keras_electra.settings.{kind.__name__}."
        )
    for name, value in options.items():  # a number given as text failed deep in the run
        declared = [t for t in str(fields[name].type).replace(" ", "").split("|") if t != "None"]
        wanted = _NUMBERS.get(declared[0]) if len(declared) == 1 else None
        if value is None or wanted is None:
            continue
        if not isinstance(value, wanted) or (declared[0] != "bool" and isinstance(value, bool)):
            raise TypeError(
                f"{function}() takes {name} as {declared[0]}, not {type(value).__name__} "
                f"({value!r})."
            )
    return dataclasses.replace(settings or kind(), **options)


_NUMBERS = {"int": numbers.Integral, "float": numbers.Real, "bool": bool}


def add_arguments(parser: argparse.ArgumentParser, settings: type = PretrainSettings) -> None:
    """Add one flag per field of ``settings`` (``--batch-size`` for ``batch_size``)."""
    for f in dataclasses.fields(settings):
        meta = f.metadata
        if not meta["cli"]:
            continue
        flag = meta["flag"] or "--" + f.name.replace("_", "-")
        kwargs: dict[str, Any] = {"dest": f.name, "help": meta["help"]}
        if meta["negated"]:
            parser.add_argument(meta["negated"], action="store_false", **kwargs)
            continue
        if f.type in ("bool", bool):
            # Two plain flags, not BooleanOptionalAction: on Python 3.10 that appends
            # "(default: False)" to a help text that already says its default.
            pair = parser.add_mutually_exclusive_group()
            pair.add_argument(flag, action="store_true", **kwargs)
            pair.add_argument(
                "--no-" + flag[2:], dest=f.name, action="store_false", help=f"turn {flag} off"
            )
            parser.set_defaults(**{f.name: f.default})
            continue
        default = None if f.default is dataclasses.MISSING else f.default
        kind = getattr(f.type, "__name__", str(f.type)).split(" ")[0]  # "int | None": int
        kwargs.update(type={"int": int, "float": float}.get(kind, str), default=default)
        if kind.startswith("list"):
            kwargs.update(nargs="+", default=None)
        elif kind == "dict":  # NAME=VALUE pairs
            kwargs.update(nargs="+", type=assignment, default=None)
        kwargs.update({k: meta[k] for k in ("choices", "metavar", "required") if meta[k]})
        if kwargs["default"] is not None and "default" not in meta["help"]:
            kwargs["help"] += f" {default_note(kwargs['default'])}"  # --help says it too
        parser.add_argument(flag, **kwargs)


def default_note(value: Any) -> str:
    """How a flag's help states its default, as :func:`add_arguments` appends it."""
    return f"(default: {value})"


def from_arguments(args: argparse.Namespace, settings: type = PretrainSettings, **extra):
    """The settings the parsed flags give (flags left out keep the fields' defaults)."""
    values = {}
    for f in dataclasses.fields(settings):
        if f.metadata["cli"] and getattr(args, f.name, None) is not None:
            value = getattr(args, f.name)
            values[f.name] = dict(value) if f.type == "dict" else value
    return settings(**values, **extra)


def assignment(text: str) -> tuple[str, Any]:
    """A ``NAME=VALUE`` flag value: the value a number, ``true`` or ``false``."""
    name, equals, value = (part.strip() for part in text.partition("="))
    if not equals or not name.isidentifier():
        raise argparse.ArgumentTypeError(f"'{text}' is not NAME=VALUE (such as disc_weight=30)")
    if value.lower() in ("true", "false"):
        return name, value.lower() == "true"
    try:
        return name, float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"the value in '{text}' is not a number, true or false"
        ) from None
