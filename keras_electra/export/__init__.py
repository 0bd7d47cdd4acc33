"""Export trained models as SavedModels that TF Serving answers: :func:`export`."""

from __future__ import annotations

import sys
from pathlib import Path

from keras_electra.errors import ConfigError
from keras_electra.export.classifier import EXPORTABLE_TASKS, TextClassifierModule, finetuned_module
from keras_electra.export.qa import QuestionAnsweringModule
from keras_electra.export.saved_model import (
    SIGNATURE_NAMES,
    EnergyModule,
    ReplacedTokenModule,
    check_export_base,
    export_module,
    next_version,
    served_kind,
)
from keras_electra.export.tagger import TextTaggerModule
from keras_electra.finetuning.saved import load_finetuned
from keras_electra.finetuning.settings import FinetuneSettings
from keras_electra.run_directory import RunDirectory

__all__ = [
    "EXPORTABLE_TASKS",
    "SIGNATURE_NAMES",
    "QuestionAnsweringModule",
    "ReplacedTokenModule",
    "TextClassifierModule",
    "TextTaggerModule",
    "export",
    "finetuned_module",
    "next_version",
]


def export(
    run_dir: str | Path,
    output: str | Path,
    *,
    version: int | None = None,
    max_length: int | None = None,
) -> Path:
    """Export a pretraining run or a fine-tuned model directory as ``output/VERSION``.

    A directory with ``finetune.json`` (``keras-electra finetune --output``) exports
    with its task's signatures (:func:`~keras_electra.export.classifier.finetuned_module`);
    an Electric run (``--objective electric``) with energies and a sentence score
    (:class:`~keras_electra.export.saved_model.EnergyModule`); any other (``keras-electra
    pretrain --output``, or a converted init directory) with replaced-token detection's
    (:class:`ReplacedTokenModule`). The version folder
    is written under a temporary name and renamed when complete.

    Args:
        run_dir: the directory to export.
        output: the model's base folder, e.g. ``saved_models/electra``.
        version: the version number (default: one more than the highest present).
        max_length: the fixed sequence length of the signatures (default: the one the
            model was trained with, as ``run.json`` or ``finetune.json`` records it; for a
            directory :func:`~keras_electra.pretraining.save_run` or ``convert`` wrote,
            which records none, the size of the model's position table).

    Returns:
        The written version folder.

    Raises:
        ConfigError: if the directory holds no model, ``max_length`` is out of range,
            a pretraining run has no replaced-token head (``--objective mlm``), or
            ``output`` is a version folder or a run directory.
        ElectraError: if the version folder already exists.

    Examples:
        >>> export("runs/demo", "saved_models/electra")  # doctest: +SKIP
        PosixPath('saved_models/electra/1')
    """
    check_export_base(output)  # before the model is built
    run = RunDirectory(run_dir)
    finetuned = run.is_finetuned()
    electric = not finetuned and run.settings().get("objective") == "electric"
    if run.has_config():  # a source that is not a run is named by the export itself
        task = FinetuneSettings.load(run.finetune_file).task if finetuned else None
        _check_same_kind(output, task or ("sentence_score" if electric else "replaced_token"))
    notes = []  # said once the export's length is known to be one it can take
    if finetuned:
        loaded = load_finetuned(run.path)
        module = finetuned_module(loaded, max_length)
        notes.append(length_note(loaded.settings.max_seq_length, module.max_length, run.path))
        if run.interrupted_finetuning():
            notes.append(
                f"Note: '{run.resume_dir.path}' holds a fine-tuning that has not finished, "
                "which will replace this model when it does; this export is of the model "
                "before it."
            )
        extra = {**run.model_files(), run.FINETUNE: run.finetune_file, run.LABELS: run.labels_file}
    else:
        module = (EnergyModule if electric else ReplacedTokenModule).from_run(run.path, max_length)
        extra = run.model_files()
    limit = run.config_and_vocab()[0].max_position_embeddings
    if not 4 <= module.max_length <= limit:
        raise ConfigError(
            f"--max-length must be between 4 and {limit} (the model's position table), "
            f"got {module.max_length}."
        )
    for note in filter(None, notes):
        print(note, file=sys.stderr, flush=True)
    return export_module(module, output, version=version, extra_files=extra)


def length_note(trained: int, exported: int, run_dir: str | Path) -> str | None:
    """The note ``export`` prints when ``--max-length`` is not the length the model was
    fine-tuned at, else None.

    Examples:
        >>> print(length_note(32, 128, "runs/cls"))
        Note: 'runs/cls' was fine-tuned on 32-token inputs and this export reads 128, so a \
text longer than 32 pieces scores otherwise than with `predict --model runs/cls` (the export \
reads on, at positions the fine-tuning never trained); leave --max-length out to export at 32.
    """
    if trained == exported:
        return None
    how = (
        "the export reads on, at positions the fine-tuning never trained"
        if exported > trained
        else "the export cuts it where the fine-tuning read on"
    )
    shorter = min(trained, exported)
    return (
        f"Note: '{run_dir}' was fine-tuned on {trained}-token inputs and this export reads "
        f"{exported}, so a text longer than {shorter} pieces scores otherwise than with "
        f"`predict --model {run_dir}` ({how}); leave --max-length out to export at {trained}."
    )


def _check_same_kind(output: str | Path, kind: str) -> None:
    """Refuse a version of ``kind`` when the model's latest under ``output`` is of another:
    TF Serving would switch every client of that model name to answers of the new kind."""
    served = served_kind(output)
    if served is None:
        return  # a new model
    if kind != served[0]:
        words = {"replaced_token": "replaced-token", "sentence_score": "sentence-score"}
        old, new = (words.get(k, k) for k in (served[0], kind))
        raise ConfigError(
            f"--output '{output}' serves a {old} model (version {served[1].name}), and a {new} "
            "export as its next version would switch every client of that model name to "
            "other answers; export to a new folder (saved_models/OTHER_NAME), or remove the "
            "old versions first."
        )
