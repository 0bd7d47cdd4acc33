"""Load the pretrained discriminator a fine-tuning run starts from.

A source directory holds ``config.json``, ``vocab.txt`` and ``checkpoints/``:

- a pretraining run (``keras-electra pretrain --output``; has ``run.json``);
- an init directory with the same three entries (e.g. converted weights), whose
  checkpoint holds a full pretrainer or the discriminator backbone alone;
- a fine-tuned output directory (has ``finetune.json``): its backbone is reused.

The discriminator's weights are copied into a fresh standalone
``ElectraBackbone``, so fine-tuned checkpoints have the same variable paths in
every process, whatever the source was. Whatever the pretraining run's
``embedding_sharing``, the backbone gets the embedding tables the discriminator
read (for ``gdes``, the shared tables plus the discriminator's deltas, folded).

Example:
    >>> backbone, tokenizer, config = load_backbone("runs/demo")  # doctest: +SKIP
"""

from __future__ import annotations

import json
from pathlib import Path

from keras_electra.config import ElectraConfig
from keras_electra.data import ElectraTokenizer, load_config_and_vocab
from keras_electra.errors import ConfigError
from keras_electra.finetuning.settings import FINETUNE_FILE
from keras_electra.layers.backbone import ElectraBackbone
from keras_electra.training.checkpoints import RunCheckpoints


def read_source(source: str | Path) -> tuple[ElectraConfig, ElectraTokenizer]:
    """The config and tokenizer of a source directory, checked against each other."""
    source = Path(source)
    if not (source / "config.json").is_file() or not (source / "vocab.txt").is_file():
        raise ConfigError(
            f"'{source}' is not a run or init directory (it needs config.json and vocab.txt); "
            "pass the --output of `keras-electra pretrain`."
        )
    config, tokens = load_config_and_vocab(source)
    return config, ElectraTokenizer(tokens, lowercase=config.lowercase)


def _restore(model, directory: Path) -> None:
    checkpoints = RunCheckpoints(directory / "checkpoints", model, optimizer=None)
    if checkpoints.latest is None:
        raise ConfigError(f"'{directory}' has no checkpoint yet; pretrain it first.")
    checkpoints.restore_latest()


def load_backbone(
    source: str | Path, dropout: float | None = None
) -> tuple[ElectraBackbone, ElectraTokenizer, ElectraConfig]:
    """A standalone discriminator backbone with the source's weights, its tokenizer and config.

    Args:
        source: a pretraining run, init or fine-tuned directory.
        dropout: the backbone's dropout (default: the config's).
    """
    from keras_electra.pretraining.pretrainer import ElectraPretrainer

    source = Path(source)
    config, tokenizer = read_source(source)
    if dropout is not None:
        config = config.replace(dropout=dropout)
    backbone = ElectraBackbone(config)
    if (source / FINETUNE_FILE).is_file():
        from keras_electra.finetuning.run import load_finetuned

        trained = load_finetuned(source).model.backbone
    else:
        candidates: list[str | None] = [None, "electra", "mlm"]  # None: backbone only
        if (source / "run.json").is_file():
            run = json.loads((source / "run.json").read_text(encoding="utf-8"))
            candidates = [run.get("objective", "electra")]
        trained, problems = None, []
        for candidate in candidates:
            try:
                model = (
                    ElectraBackbone(config)
                    if candidate is None
                    else ElectraPretrainer(config, candidate)
                )
                _restore(model, source)
            except ConfigError as e:
                problems.append(str(e))
                continue
            # A pretrainer's discriminator with its effective embedding tables (shared +
            # delta folded for embedding_sharing "gdes"): a plain backbone in every mode.
            trained = model if candidate is None else model.discriminator_backbone()
            break
        if trained is None:
            mismatch = (
                f"No checkpoint in '{source}/checkpoints' matches its config.json as a "
                "pretrainer or a discriminator; restore the directory's original files."
            )
            raise ConfigError(problems[-1] if len(set(problems)) == 1 else mismatch)
    backbone.set_weights(trained.get_weights())
    return backbone, tokenizer, config
