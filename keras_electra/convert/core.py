"""Converted weights -> our model and an init directory, and back.

Every reader (google, hf, keras-hub) returns a :class:`Converted`: the config,
the vocabulary and the weights under their canonical (TF1) names. This module
checks them against the model the config describes, loads them, and writes an init
directory (docs/checkpoints.md): its ``run.json`` names the objective and the preset the
sizes match, its checkpoint holds the whole pretrainer (generator included) at step 0.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from keras_electra.atomic import write_json
from keras_electra.config import ElectraConfig
from keras_electra.convert.names import (
    DISCRIMINATOR,
    GENERATOR,
    Weight,
    from_ours,
    generator_embedding_name,
    to_ours,
    weight_table,
)
from keras_electra.errors import ConfigError
from keras_electra.run_directory import RunDirectory

CONVERT_FILE = RunDirectory.CONVERT


@dataclass
class Converted:
    """Weights read from another format, under canonical names.

    Args:
        config: the architecture the weights describe.
        tokens: the vocabulary, in id order.
        weights: canonical (TF1) name -> array in canonical layout.
        source: where they were read from; source_format: ``google``, ``hf``,
            ``keras-hub`` or ``keras-electra``.
        notes: what the reader reported (ignored or unconverted tensors).
    """

    config: ElectraConfig
    tokens: list[str]
    weights: dict[str, np.ndarray]
    source: str
    source_format: str
    notes: list[str] = field(default_factory=list)

    def parts(self) -> tuple[str, ...]:
        """The model parts (see :data:`PARTS`) the weights hold."""
        held = {part_of(name) for name in self.weights}
        return tuple(p for p in PARTS if p in held)


# The parts of an ELECTRA pretrainer; the first two are required.
PARTS = ("embeddings", "discriminator", "discriminator head", "generator", "generator head")
_PART_PREFIXES = (
    ("electra/embeddings/", "embeddings"),
    ("electra/", "discriminator"),
    ("discriminator_predictions/", "discriminator head"),
    ("generator/", "generator"),
    ("generator_predictions/", "generator head"),
)


def part_of(name: str) -> str | None:
    """The part a canonical weight name belongs to (None: not ELECTRA's)."""
    return next((part for prefix, part in _PART_PREFIXES if name.startswith(prefix)), None)


def load_into(model, converted: Converted) -> list[str]:
    """Assign ``converted`` weights to an ``ElectraPretrainer``; return the notes.

    The embeddings and the discriminator must be complete. The heads and the
    generator are all-or-nothing: one missing from the source keeps its random
    initial weights (noted). A tensor whose shape differs, a missing tensor of a
    part that is present, or a tensor the model has no place for is an error
    naming it.
    """
    notes = list(converted.notes)
    table = weight_table(converted.config)
    variables = {v.path: v for v in model.variables}
    parts = set(converted.parts()) | {"embeddings", "discriminator"}
    _check_generator_width(converted)
    extra = sorted(set(converted.weights) - {w.google for w in table})
    if extra:
        raise ConfigError(
            f"'{converted.source}' has {len(extra)} weight(s) an ELECTRA model of this "
            f"configuration has no place for, e.g. {_listing(extra)}; check that the "
            "configuration (layers, sizes) matches the checkpoint."
        )
    missing = [
        w.google for w in table if part_of(w.google) in parts and w.google not in converted.weights
    ]
    if missing:
        raise ConfigError(
            f"'{converted.source}' is missing {len(missing)} weight(s), e.g. {_listing(missing)}."
        )
    for weight in table:
        if weight.google not in converted.weights:
            continue
        value = to_ours(weight, np.asarray(converted.weights[weight.google], "float32"))
        variable = variables[weight.ours]
        if tuple(value.shape) != tuple(variable.shape):
            raise ConfigError(_shape_mismatch(weight, value.shape, variable.shape, converted))
        variable.assign(value)
    absent = [p for p in PARTS if p not in parts]
    if absent:
        note = f"Not in the source, so initialized at random: {', '.join(absent)}"
        if "discriminator head" not in absent:
            note += " (fine-tuning and export use only the discriminator)"
        notes.append(note + ".")
    return notes


def read_model(model) -> dict[str, np.ndarray]:
    """Our pretrainer's weights under canonical names and layout.

    The embeddings (``electra/embeddings/...``) are the ones the discriminator
    reads, in every ``embedding_sharing`` mode (for ``gdes``, shared + delta
    folded). When the generator reads others, they are added under
    :func:`~keras_electra.convert.names.generator_embedding_name`.
    """
    values = {v.path: v for v in model.variables}
    towers = (DISCRIMINATOR, GENERATOR) if model.generator is not None else (DISCRIMINATOR,)
    tables = model.embedding_tables(DISCRIMINATOR)
    own = model.config.embedding_sharing != "all" and model.generator is not None
    generator_tables = model.embedding_tables(GENERATOR) if own else {}
    weights = {}
    for w in weight_table(model.config, towers):
        block, _, name = w.ours.partition("/")
        if block != "embedding":
            weights[w.google] = from_ours(w, np.asarray(values[w.ours].numpy()))
            continue
        weights[w.google] = from_ours(w, tables[name])
        if own:
            weights[generator_embedding_name(w.google)] = from_ours(w, generator_tables[name])
    return weights


def write_init_dir(converted: Converted, output: str | Path) -> tuple[Path, list[str]]:
    """Write ``converted`` as an init directory (see the module docstring).

    Returns:
        The directory and the conversion's notes (also written to ``convert.json``).
    """
    from keras_electra.finetuning.settings import infer_preset
    from keras_electra.pretraining.pretrainer import ElectraPretrainer

    run = RunDirectory(output)
    if run.has_config():
        raise ConfigError(f"'{output}' already holds a model; choose a new --output directory.")
    config = converted.config
    if len(converted.tokens) != config.vocab_size:
        raise ConfigError(
            f"The vocabulary has {len(converted.tokens)} tokens but the checkpoint's "
            f"embeddings have {config.vocab_size} rows; pass the vocab.txt it was trained with."
        )
    model = ElectraPretrainer(config, objective="electra")
    notes = load_into(model, converted)
    run.write_model_files(config, converted.tokens)
    run.write_settings({"preset": infer_preset(config), "objective": "electra"})
    run.checkpoints(model).save(0)
    record = {
        "source": converted.source,
        "format": converted.source_format,
        "parts": list(converted.parts()),
        "notes": notes,
    }
    write_json(run.path / run.CONVERT, record)
    return run.path, notes


def special_token_ids(tokens: list[str], source: str) -> dict[str, int]:
    """The config's special-token ids from a vocabulary; an error names a missing one."""
    ids = {t: i for i, t in enumerate(tokens)}
    special = ("[PAD]", "[CLS]", "[SEP]", "[MASK]")
    missing = [t for t in special if t not in ids]
    if missing:
        raise ConfigError(f"The vocabulary of '{source}' has no {', '.join(missing)} token.")
    return {f"{t[1:-1].lower()}_token_id": ids[t] for t in special}  # pad_token_id, ...


def config_with_generator(values: dict, generator: tuple | None, source: str) -> ElectraConfig:
    """The config of ``values`` and, given its ``(hidden size, layers, heads, feed-forward
    size)``, a generator (as ``generator_hidden_size`` / ``generator_layers`` fractions);
    an error when its heads or FFN size break ELECTRA's derivation rule."""
    if generator is None:
        return ElectraConfig.from_dict(values)
    hidden, layers, heads, intermediate = generator
    fractions = {
        "generator_hidden_size": hidden / values["hidden_size"],
        "generator_layers": layers / values["num_layers"],
    }
    config = ElectraConfig.from_dict({**values, **fractions})
    derived = config.generator_config()
    if (heads, intermediate) != (derived.num_heads, derived.intermediate_size):
        raise ConfigError(
            f"The generator in '{source}' has {heads} heads and feed-forward size "
            f"{intermediate}; ELECTRA derives {derived.num_heads} and "
            f"{derived.intermediate_size} from its hidden size {derived.hidden_size}, so this "
            "generator cannot be represented; convert the discriminator alone."
        )
    return config


def _listing(names: list[str], limit: int = 3) -> str:
    shown = ", ".join(f"'{n}'" for n in names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")


def _generator_advice(config: ElectraConfig) -> str:
    return (
        f"the configuration says generator_hidden_size {config.generator_hidden_size:g} x "
        f"{config.hidden_size} = {config.generator_config().hidden_size}. The released "
        "ELECTRA-Small (Small++) uses generator_hidden_size 1.0: use preset small++, or leave "
        "out --preset to read the sizes from the checkpoint."
    )


def _check_generator_width(converted: Converted) -> None:
    """The most common mismatch, named before it surfaces as missing or misshaped weights;
    first the discriminator's width (a --preset of another size), which the generator's
    would otherwise be blamed for."""
    query = converted.weights.get("electra/encoder/layer_0/attention/self/query/kernel")
    if query is not None and query.shape[-1] != converted.config.hidden_size:
        fix = (
            "leave out --preset to read the sizes from the checkpoint"
            if converted.source_format == "google"
            else "restore the config.json saved with these weights"
        )
        raise ConfigError(
            f"The discriminator in '{converted.source}' is {query.shape[-1]} wide, but the "
            f"configuration says hidden_size {converted.config.hidden_size}; {fix}."
        )
    query = converted.weights.get("generator/encoder/layer_0/attention/self/query/kernel")
    expected = converted.config.generator_config().hidden_size
    if query is not None and query.shape[-1] != expected:
        raise ConfigError(
            f"The generator in '{converted.source}' is {query.shape[-1]} wide, but "
            + _generator_advice(converted.config)
        )


def _shape_mismatch(weight: Weight, got, expected, converted: Converted) -> str:
    message = (
        f"Weight '{weight.google}' in '{converted.source}' has shape {tuple(got)}, but the "
        f"configuration expects {tuple(expected)}"
    )
    if weight.tower == GENERATOR:
        return f"{message}: {_generator_advice(converted.config)}"
    return message + "; the configuration does not match the checkpoint."
