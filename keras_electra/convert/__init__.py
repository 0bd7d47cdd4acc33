"""Checkpoints of other ELECTRA implementations in, and back out.

- :func:`convert`: google-research TF1 checkpoints, Hugging Face directories or
  keras-hub ``ElectraBackbone`` presets -> an init directory (``config.json``,
  ``vocab.txt``, ``checkpoints/``, ``convert.json``) that ``pretrain --init``,
  ``finetune --init`` and ``export --run`` accept.
- :func:`convert_run`: a run or init directory -> Hugging Face directories
  (``--to hf``) or a keras-hub preset (``--to keras-hub``).

Examples:
    >>> convert("electra-small-discriminator", "runs/electra-small", "hf",
    ...         generator="electra-small-generator")  # doctest: +SKIP
    ConvertResult(output=PosixPath('runs/electra-small'), notes=[...])
    >>> convert_run("runs/electra-small", "hf-out", "hf")  # doctest: +SKIP
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from keras_electra.atomic import check_writable, staged_directory
from keras_electra.config import FORMAT_FLAGS, foreign_format
from keras_electra.convert.core import (
    CONVERT_FILE,
    Converted,
    load_into,
    read_model,
    write_init_dir,
)
from keras_electra.convert.google import read_google
from keras_electra.convert.hf import read_hf, write_hf
from keras_electra.convert.hub import is_hub_id, local_source
from keras_electra.convert.keras_hub import read_keras_hub, write_keras_hub
from keras_electra.errors import ConfigError
from keras_electra.run_directory import RunDirectory

SOURCES = ("google", "hf", "keras-hub")
TARGETS = ("hf", "keras-hub")

__all__ = [
    "CONVERT_FILE",
    "SOURCES",
    "TARGETS",
    "ConvertResult",
    "Converted",
    "convert",
    "convert_run",
    "load_into",
    "read_google",
    "read_hf",
    "read_keras_hub",
    "read_model",
    "write_hf",
    "write_keras_hub",
]


@dataclass
class ConvertResult:
    output: Path
    notes: list[str]


def read(source: str | Path, source_format: str, **options) -> Converted:
    """Read ``source`` in ``source_format`` (one of :data:`SOURCES`)."""
    if source_format not in SOURCES:
        raise ConfigError(
            f"Unknown source format '{source_format}'; choose one of: {', '.join(SOURCES)}."
        )
    notes: list[str] = []  # for hf:ORG/NAME: which weights file was read, from where
    if source_format == "hf":  # a directory, or hf:ORG/NAME fetched from the Hub
        source, notes = local_source(source)
        if options.get("generator") is not None:
            generator, more = local_source(options["generator"])
            options, notes = {**options, "generator": generator}, notes + more
    elif is_hub_id(source):
        raise ConfigError(f"'{source}' is a Hugging Face model: convert it with --from hf.")
    if not Path(source).exists() and not Path(str(source) + ".index").exists():
        raise ConfigError(f"'{source}' does not exist.")
    _check_kind(source, source_format)
    generator = options.get("generator")
    if generator is not None and source_kind(generator) not in (None, "hf"):
        held = KIND_NAMES.get(source_kind(generator), "keras-electra directory")
        raise ConfigError(
            f"--generator '{generator}' holds a {held}, not a Hugging Face model; pass the "
            "Hugging Face generator's directory (ElectraForMaskedLM)."
        )
    readers = {"google": read_google, "hf": read_hf, "keras-hub": read_keras_hub}
    converted = readers[source_format](source, **options)
    converted.notes[:0] = notes
    return converted


# What each format's directory is called in a sentence.
KIND_NAMES = {
    "google": "google-research TF1 checkpoint",
    "hf": "Hugging Face model",
    "keras-hub": "keras-hub preset",
}


def source_kind(path: str | Path) -> str | None:
    """What ``path`` holds, told by its files: ``keras-electra`` (a run, init or fine-tuned
    directory), ``hf``, ``keras-hub`` or ``google``; None when it is none of them (the
    format's reader then names what is missing).

    Examples:
        >>> source_kind("no/such/directory") is None
        True
    """
    path = Path(path)
    if not path.is_dir():
        return "google" if Path(f"{path}.index").is_file() else None
    run = RunDirectory(path)
    if run.settings_file.is_file() or run.is_finetuned() or run.is_converted():
        return "keras-electra"
    if RunDirectory(path / "discriminator").has_config():  # what --to hf writes
        return "hf"
    try:
        config = json.loads(run.config_file.read_text(encoding="utf-8"))  # any format's
    except (OSError, ValueError):
        config = None
    if isinstance(config, dict):
        if kind := foreign_format(config):
            return FORMAT_FLAGS[kind]
        if "embedding_sharing" in config:
            return "keras-electra"
    if (path / "checkpoint").is_file() or any(path.glob("*.index")):
        return "google"
    return None


def _check_kind(source: str | Path, source_format: str) -> None:
    """Refuse a source that holds another format than ``--from`` says, in one sentence."""
    folder = Path(source) if Path(source).is_dir() else Path(source).parent
    if folder.name == RunDirectory.CHECKPOINTS and source_kind(folder.parent) == "keras-electra":
        what = "holds the checkpoints" if Path(source).is_dir() else "is a checkpoint"
        raise ConfigError(
            f"'{source}' {what} of the keras-electra directory "
            f"'{folder.parent}', which needs no conversion: pass '{folder.parent}' to --init "
            "or --run as it is."
        )
    kind = source_kind(source)
    if kind == "keras-electra":
        raise ConfigError(
            f"'{source}' is a keras-electra directory, which needs no conversion: pass "
            "it to --init or --run as it is (`convert --to hf|keras-hub --run DIR` writes it "
            "out for another implementation)."
        )
    if kind is not None and kind != source_format:
        raise ConfigError(
            f"'{source}' holds a {KIND_NAMES[kind]}, not a {KIND_NAMES[source_format]}; "
            f"convert it with --from {kind}."
        )


def convert(source: str | Path, output: str | Path, source_format: str, **options) -> ConvertResult:
    """Convert another implementation's checkpoint into an init directory.

    Args:
        source: the checkpoint (see :data:`SOURCES` for the formats).
        output: the new init directory: new or empty (a directory with files in it is
            refused, as they would be mixed with the model's).
        source_format: ``google``, ``hf`` or ``keras-hub``.
        **options: passed to the reader: ``vocab``, ``preset``, ``lowercase``,
            ``num_heads`` (google); ``generator`` (hf).

    Returns:
        The directory and what the conversion reported (also in ``convert.json``).
    """
    if RunDirectory(output).has_config():
        raise ConfigError(f"'{output}' already holds a model; choose a new --output directory.")
    _check_new_output(output, "the converted model's")
    converted = read(source, source_format, **options)
    with staged_directory(output) as partial:  # a failed or stopped conversion leaves none
        notes = write_init_dir(converted, partial)[1]
    return ConvertResult(Path(output), notes)


def _check_new_output(output: str | Path, written: str) -> None:
    """Refuse an ``--output`` that cannot be written, or holds files (an earlier
    conversion, say), which ``written`` would overwrite or be mixed with."""
    check_writable(output)
    if Path(output).is_dir() and any(Path(output).iterdir()):
        raise ConfigError(
            f"--output '{output}' is not empty, and its files would be overwritten or mixed "
            f"with {written}; choose a new or empty --output, or remove it first."
        )


def convert_run(run_dir: str | Path, output: str | Path, target: str) -> ConvertResult:
    """Write a run or init directory's model for another implementation.

    Args:
        run_dir: a pretraining run or init directory (ELECTRA objective).
        output: the directory to write: new or empty (a directory with files in it is
            refused, as it would be overwritten).
        target: ``hf`` (``discriminator/`` and ``generator/`` directories that
            transformers loads) or ``keras-hub`` (an ``ElectraBackbone`` preset).
    """
    from keras_electra.pretraining.loading import load_run

    if target not in TARGETS:
        raise ConfigError(f"Unknown target format '{target}'; choose one of: {', '.join(TARGETS)}.")
    if RunDirectory(run_dir).is_finetuned():
        raise ConfigError(
            f"'{run_dir}' holds a fine-tuned model, which --to does not write; pass the "
            "pretraining run or converted directory it was fine-tuned from (`keras-electra "
            f"export --run {run_dir}` serves the fine-tuned model)."
        )
    if source_kind(output) == "keras-electra":  # the run itself, or another
        raise ConfigError(
            f"--output '{output}' holds a keras-electra directory, which the {target} files "
            "would be mixed into; choose a new --output."
        )
    _check_new_output(output, f"the {target} files")
    model, tokenizer, _ = load_run(run_dir)
    if model.objective == "electric":
        raise ConfigError(
            f"'{run_dir}' was pretrained with the electric objective, whose two-tower cloze "
            f"generator and energy head the {target} format cannot represent; export it with "
            "`keras-electra export` or fine-tune it instead."
        )
    if model.generator is None:
        raise ConfigError(
            f"'{run_dir}' was pretrained with the mlm objective; only ELECTRA models convert."
        )
    if model.config.normalize_first:
        raise ConfigError(
            f"'{run_dir}' has pre-LayerNorm towers (normalize_first), which Hugging Face and "
            "keras-hub ELECTRA cannot represent; export it with `keras-electra export` instead."
        )
    with staged_directory(output) as partial:  # a failed or stopped write leaves none
        if target == "hf":
            write_hf(model, tokenizer.vocab, partial)
            notes = []
        else:
            notes = write_keras_hub(model, tokenizer.vocab, partial)[1]
    return ConvertResult(Path(output), notes)
