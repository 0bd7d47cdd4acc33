"""A pretraining run directory read back (its model, tokenizer and step), and one written
from a model trained in your own script.

A run read back (to convert or export it) without the training machinery of
:mod:`keras_electra.pretraining.run`, which uses :func:`read_run` to resume a run or
start one from ``--init`` and re-exports :func:`load_run`. :func:`save_run` writes a
pretrainer trained with ``model.fit`` as such a directory.

Examples:
    >>> vocab_checksum(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"])
    '1b6c0da91a73cdc9'
    >>> model, tokenizer, step = load_run("runs/tiny")  # doctest: +SKIP
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from keras_electra.atomic import check_writable
from keras_electra.config import ElectraConfig
from keras_electra.data.tokenizer import ElectraTokenizer
from keras_electra.errors import ConfigError
from keras_electra.pretraining import objectives
from keras_electra.pretraining.pretrainer import ElectraPretrainer
from keras_electra.run_directory import RunDirectory
from keras_electra.settings import PretrainSettings
from keras_electra.training.strategy import is_chief


def load_run(run_dir: str | Path) -> tuple[ElectraPretrainer, ElectraTokenizer, int]:
    """Load a run's model (latest checkpoint) and tokenizer; return them with the step.

    Raises:
        ConfigError: if the directory holds no run (or a fine-tuned model) or no
            checkpoint, or they disagree.
    """
    run = RunDirectory(run_dir)
    run.require_config(
        f"'{run_dir}' is not a run directory", "pass the --output of `keras-electra pretrain`"
    )
    if run.is_finetuned():  # its checkpoint holds a task's model, not a pretrainer
        raise ConfigError(
            f"'{run_dir}' holds a fine-tuned model, not a pretraining run; load it with "
            "keras_electra.finetuning.load_finetuned."
        )
    config, tokens = read_run(run, None)
    model = stored_pretrainer(run, config, run.settings().get("objective", "electra"))
    step = model.restored_step = run.restore_latest(model)
    return model, ElectraTokenizer(tokens, lowercase=config.lowercase), step


# run.json's mark of a directory save_run wrote: a model, not a command-line run to resume.
SAVED_BY = RunDirectory.SAVED_BY


def save_run(
    model: ElectraPretrainer,
    tokenizer: ElectraTokenizer,
    run_dir: str | Path,
    *,
    chief: bool | None = None,
) -> str:
    """Write a pretrainer trained in your own script (``model.fit``) as a run directory:
    ``config.json``, ``vocab.txt``, ``run.json`` and a checkpoint at the model's step (the
    optimizer's, counted on from the step :func:`load_run` restored), as ``keras-electra
    pretrain --output`` writes them. ``finetune``, ``export``, ``convert --to`` and
    :func:`load_run` read it as a run, and ``pretrain --init`` starts from it; a
    command-line run does not resume it (it has no corpus or schedule to go on with). Saving again
    into the same directory, with the same model sizes and vocabulary, adds a checkpoint at
    the new step (the last three are kept). Under a multi-worker strategy every worker calls
    it: as in training, each worker saves, and only the chief into ``run_dir`` (the others
    into a temporary directory they remove). ``chief`` (default: from the model's strategy)
    says which this process is.

    Returns:
        The checkpoint's path (``RUN_DIR/checkpoints/ckpt-STEP``; on every worker, the
        chief's).

    Raises:
        ConfigError: if the tokenizer does not fit the model, the directory holds another
            model or exports, or a checkpoint past the model's step.
        StorageError: the directory cannot be written.

    Examples:
        >>> import tempfile
        >>> tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "b"]
        >>> model = ElectraPretrainer.from_preset("tiny", vocab_size=len(tokens), seed=0)
        >>> run_dir = tempfile.mkdtemp()
        >>> save_run(model, ElectraTokenizer(tokens), run_dir).endswith("ckpt-0")
        True
        >>> load_run(run_dir)[2]
        0
    """
    for value, kind, what in ((model, ElectraPretrainer, "model"), (tokenizer, ElectraTokenizer,
                              "tokenizer")):  # fmt: skip
        if not isinstance(value, kind):
            raise TypeError(
                f"save_run(model, tokenizer, run_dir) takes an {kind.__name__} as its {what}, "
                f"not a {type(value).__name__}"
                + (" (a vocabulary: pass ElectraTokenizer(vocab))." if what == "tokenizer" else ".")
            )
    config, tokens = model.config, list(tokenizer.vocab)
    if len(tokens) != config.vocab_size or tokenizer.lowercase != config.lowercase:
        raise ConfigError(
            f"The tokenizer ({len(tokens):,} tokens, lowercase={tokenizer.lowercase}) is not "
            f"the model's ({config.vocab_size:,}, lowercase={config.lowercase}); pass the "
            "tokenizer whose vocabulary the model was built for."
        )
    run = RunDirectory(run_dir)
    if chief is None:
        chief = is_chief(model.distribute_strategy)
    optimizer = getattr(model, "optimizer", None)
    step = model.restored_step + (0 if optimizer is None else int(optimizer.iterations.numpy()))
    if chief:  # the other workers leave the files and the check to it
        _claim(run, model, tokens, step)
    saved = run.checkpoints(model, chief=chief).save(step)
    # Another worker's copy is in a temporary directory, removed: the chief's path is the one.
    return saved if chief else os.path.join(run.checkpoint_dir, f"ckpt-{step}")


def _claim(run: RunDirectory, model: ElectraPretrainer, tokens: list[str], step: int) -> None:
    """Write ``run``'s files for ``save_run``, or check that they are the model's own (a
    directory it saved before, with no checkpoint past ``step``)."""
    check_writable(run.path, "run_dir")
    run.refuse_exports("the run (a new run_dir)")
    if run.has_config():
        if run.config_and_vocab() != (model.config, tokens):
            raise ConfigError(f"'{run.path}' already holds another model; choose a new directory.")
        if not run.is_saved_from_python():  # the same model (load_run's), another's directory
            written = "a command-line run (`keras-electra pretrain` wrote it)"
            if run.is_converted():
                written = "a converted model (`keras-electra convert` wrote it)"
            elif run.is_finetuned():
                written = "a fine-tuned model"
            raise ConfigError(
                f"'{run.path}' holds {written}, and save_run adds checkpoints only to "
                "directories it wrote; save into a new directory."
            )
        latest = run.latest_step() or 0
        if latest > step:
            raise ConfigError(
                f"'{run.path}' holds a checkpoint at step {latest:,}, past this model's step "
                f"{step:,}; save into a new directory, or load_run('{run.path}') and train on "
                "from there."
            )
        return
    from keras_electra.finetuning.settings import infer_preset

    described = model.get_config()
    run.write_model_files(model.config, tokens)
    run.write_settings(
        {
            "preset": infer_preset(model.config),
            "objective": described["objective"],
            "hyperparameters": described["hyperparameters"],
            "precision": model.dtype_policy.name,
            "vocab_sha256": vocab_checksum(tokens),
            "saved_by": SAVED_BY,
        }
    )


def stored_pretrainer(run: RunDirectory, config: ElectraConfig, objective: str):
    """A new pretrainer for ``run``'s checkpoints: ``objective`` with the hyperparameters the
    run recorded (which add heads, such as ELECTRA's corrective LM)."""
    chosen = objectives.from_record(objective, run.stored_hyperparameters())
    return ElectraPretrainer(config, objective=chosen)


def read_run(
    run: RunDirectory, settings: PretrainSettings | None
) -> tuple[ElectraConfig, list[str]]:
    """A run (or init) directory's config and vocabulary, checked.

    The vocabulary must still have the checksum ``run.json`` recorded; with
    ``settings`` (a run being resumed), the settings a run cannot change must be the
    ones it started with.

    Raises:
        ConfigError: naming the changed vocabulary or setting.
    """
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
        for name in PretrainSettings.fixed_names():
            # Runs from before a setting existed used its default.
            if previous.get(name, getattr(PretrainSettings, name)) != getattr(settings, name):
                fix = "resume with the same value or choose a new --output"
                if not run.has_checkpoint():  # stopped during setup: nothing to lose
                    fix = (
                        "it has no checkpoint yet (nothing was trained), so remove it to start "
                        "afresh, resume with the same value or choose a new --output"
                    )
                raise ConfigError(
                    f"Run directory '{run.path}' was started with {name}={previous.get(name)!r}, "
                    f"not {getattr(settings, name)!r}; {fix}."
                )
    return config, tokens


def vocab_checksum(tokens: list[str]) -> str:
    """A short SHA-256 of a vocabulary (its tokens in id order), kept in ``run.json``."""
    return hashlib.sha256("\n".join(tokens).encode("utf-8")).hexdigest()[:16]
