"""Load the pretrained discriminator a fine-tuning starts from: a pretraining run, an init
directory (a full pretrainer or the backbone alone) or a fine-tuned directory.

Its weights go into a fresh standalone ``ElectraBackbone`` (the same variable paths
whatever the source), with the embedding tables the discriminator read (``gdes``: folded).
"""

from __future__ import annotations

from pathlib import Path

from keras_electra.config import ElectraConfig
from keras_electra.data import ElectraTokenizer
from keras_electra.errors import ConfigError
from keras_electra.finetuning.saved import load_finetuned
from keras_electra.layers.backbone import ElectraBackbone
from keras_electra.pretraining.loading import stored_pretrainer
from keras_electra.run_directory import RunDirectory


def read_source(source: str | Path) -> tuple[ElectraConfig, ElectraTokenizer]:
    """The config and tokenizer of a source directory, checked against each other."""
    run = RunDirectory(source)
    if not Path(source).exists():
        raise ConfigError(
            f"The source directory '{source}' does not exist; check the path (--run or --init "
            "takes the --output of `keras-electra pretrain`, `convert` or `finetune`)."
        )
    if not run.has_model_files():
        raise ConfigError(
            f"'{source}' is not a run or init directory (it needs {run.CONFIG} and {run.VOCAB}); "
            "pass the --output of `keras-electra pretrain`."
        )
    config, tokens = run.config_and_vocab()
    return config, ElectraTokenizer(tokens, lowercase=config.lowercase)


def load_backbone(
    source: str | Path, dropout: float | None = None
) -> tuple[ElectraBackbone, ElectraTokenizer, ElectraConfig]:
    """A standalone discriminator backbone with the source's weights, its tokenizer and config.

    Args:
        source: a pretraining run, init or fine-tuned directory.
        dropout: the backbone's dropout (default: the config's).
    """
    config, tokenizer = read_source(source)
    if dropout is not None:
        config = config.replace(dropout=dropout)
    return restore_backbone(source, config), tokenizer, config


def restore_backbone(source: str | Path, config: ElectraConfig) -> ElectraBackbone:
    """A standalone discriminator backbone of ``config`` (:func:`read_source`'s, its
    dropout as fine-tuning wants it) with the source's weights."""
    run = RunDirectory(source)
    backbone = ElectraBackbone(config)
    if run.is_finetuned():
        trained = load_finetuned(source).model.backbone
    else:
        objective = run.stored_objective()
        if objective is None:  # the discriminator backbone alone: restore it in place
            run.restore_latest(backbone, "source directory")
            return backbone
        trained = stored_pretrainer(run, config, objective)
        run.restore_latest(trained, "source directory")
        trained = trained.discriminator_backbone()
    backbone.set_weights(trained.get_weights())
    return backbone
