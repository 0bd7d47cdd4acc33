"""keras-hub ``ElectraBackbone`` presets (``config.json`` + ``model.weights.h5``).

keras-hub's backbone is the discriminator's embeddings and encoder, in our layers'
weight layout. What differs is reported, never hidden (docs/checkpoints.md): its
tanh-approximate GELU, its pooler (left out reading, initialized at random by
keras-hub writing), and the generator and discriminator head it lacks (random).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from keras_electra.config import ElectraConfig
from keras_electra.convert.core import Converted, read_model, special_token_ids
from keras_electra.convert.names import DISCRIMINATOR, from_ours, to_ours, weight_table
from keras_electra.errors import ConfigError, first_line, read_json

# Our config's fields and ElectraBackbone's arguments (and attributes) for them.
BACKBONE_ARGUMENTS = (
    ("vocab_size", "vocab_size"),
    ("num_layers", "num_layers"),
    ("num_heads", "num_heads"),
    ("hidden_size", "hidden_dim"),
    ("embedding_size", "embedding_dim"),
    ("intermediate_size", "intermediate_dim"),
    ("dropout", "dropout"),
    ("max_position_embeddings", "max_sequence_length"),
    ("type_vocab_size", "num_segments"),
)
POOLER = ("pooled_dense/kernel", "pooled_dense/bias")
POOLER_NOTE = "keras-hub's pooler (pooled_dense: dense + tanh on [CLS]) is not part of ELECTRA"
GELU_NOTE = (
    "keras-hub's ElectraBackbone uses tanh-approximate GELU, ELECTRA exact GELU: hidden "
    "states differ slightly between the two"
)


def read_keras_hub(path: str | Path) -> Converted:
    """Read a keras-hub ``ElectraBackbone`` preset directory.

    Examples:
        >>> converted = read_keras_hub("electra_base_discriminator_en")  # doctest: +SKIP
    """
    path = Path(path)
    backbone = _load_backbone(path)
    tokens, lowercase = _vocabulary(path)
    config = _config(backbone, tokens, lowercase, str(path))
    values = {v.path: np.asarray(v.numpy()) for v in backbone.weights}
    weights = {}
    for weight in weight_table(config, (DISCRIMINATOR,)):
        if weight.keras_hub is None:
            continue
        if weight.keras_hub not in values:
            raise ConfigError(f"'{path}' has no weight '{weight.keras_hub}'.")
        weights[weight.google] = from_ours(weight, values.pop(weight.keras_hub))
    pooler = [values.pop(name) for name in POOLER if name in values]
    if values:
        raise ConfigError(
            f"'{path}' has weight(s) ELECTRA has no place for: {', '.join(sorted(values)[:3])}."
        )
    notes = [f"{GELU_NOTE}."]
    if pooler:
        count = sum(p.size for p in pooler)
        notes.append(f"{POOLER_NOTE}: its {count} weights were not converted.")
    return Converted(config, tokens, weights, str(path), "keras-hub", notes)


def write_keras_hub(model, tokens: list[str], output: str | Path) -> tuple[Path, list[str]]:
    """Write our discriminator as a keras-hub preset directory; return it with the notes."""
    import keras_hub

    output = Path(output)
    config = model.config
    arguments = {theirs: getattr(config, ours) for ours, theirs in BACKBONE_ARGUMENTS}
    backbone = keras_hub.models.ElectraBackbone(**arguments)
    weights = read_model(model)
    variables = {v.path: v for v in backbone.weights}
    for weight in weight_table(config, (DISCRIMINATOR,)):
        if weight.keras_hub is not None:
            variables[weight.keras_hub].assign(to_ours(weight, weights[weight.google]))
    output.mkdir(parents=True, exist_ok=True)
    backbone.save_to_preset(str(output))
    tokenizer = keras_hub.models.ElectraTokenizer(vocabulary=tokens, lowercase=config.lowercase)
    tokenizer.save_to_preset(str(output))
    notes = [
        f"{POOLER_NOTE}: keras-hub initialized it at random.",
        f"{GELU_NOTE}.",
        "keras-hub's backbone has no heads: the generator and the discriminator head were "
        "not written.",
    ]
    return output, notes


def _load_backbone(path: Path):
    import keras_hub

    config_file = path / "config.json"
    if not config_file.is_file():
        raise ConfigError(f"'{path}' is not a keras-hub preset directory (no config.json).")
    spec = read_json(config_file, "restore the preset's files")
    if spec.get("class_name") != "ElectraBackbone":
        raise ConfigError(
            f"'{path}' holds a keras-hub {spec.get('class_name')}, not an ElectraBackbone."
        )
    try:
        return keras_hub.models.ElectraBackbone.from_preset(str(path))
    except (OSError, ValueError) as error:  # a damaged weights file; weights the config
        # does not describe (Keras: "A total of N objects could not be loaded")
        reason = first_line(error, limit=10_000).split(". Example error message")[0][:200]
        raise ConfigError(
            f"The keras-hub preset '{path}' cannot be loaded ({reason}); its "
            "model.weights.h5 is damaged, or does not fit its config.json: save the preset "
            "again."
        ) from None


def _vocabulary(path: Path) -> tuple[list[str], bool]:
    from keras_electra.data import load_vocab

    vocab = path / "assets" / "tokenizer" / "vocabulary.txt"
    if not vocab.is_file():
        raise ConfigError(f"'{path}' has no tokenizer vocabulary ({vocab} is missing).")
    settings = path / "tokenizer.json"
    spec = read_json(settings, "restore the preset's files", missing={})
    return load_vocab(vocab), bool(spec.get("config", {}).get("lowercase", True))


def _config(backbone, tokens, lowercase, source) -> ElectraConfig:
    if len(tokens) != backbone.vocab_size:
        raise ConfigError(
            f"'{source}' has a {len(tokens)}-token vocabulary but a "
            f"{backbone.vocab_size}-row embedding table."
        )
    sizes = {ours: getattr(backbone, theirs) for ours, theirs in BACKBONE_ARGUMENTS}
    return ElectraConfig(**sizes, lowercase=lowercase, **special_token_ids(tokens, source))
