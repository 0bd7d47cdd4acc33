"""ELECTRA model configuration and presets.

One dataclass describes the architecture (both towers) and the masking every
pretraining objective shares; each objective's own hyperparameters (loss weights,
sampling) are the objective's (:mod:`keras_electra.pretraining.objectives`). The
generator is not configured separately: it is derived from the discriminator's size, as
in the paper (Clark et al., 2020, section 3.2):

- hidden size = round(``generator_hidden_size`` x discriminator hidden size)
- heads = max(1, generator hidden // 64)
- feed-forward size = 4 x generator hidden
- layers = round(``generator_layers`` x discriminator layers)

Examples:
    >>> from keras_electra.config import ElectraConfig
    >>> config = ElectraConfig.from_preset("small")
    >>> config.generator_config().hidden_size
    64
    >>> ElectraConfig.from_json(config.to_json()) == config
    True
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from keras_electra.atomic import write_atomic
from keras_electra.errors import ConfigError, parse_json

# How the generator and the discriminator share embeddings (ElectraConfig.embedding_sharing).
EMBEDDING_SHARING = ("all", "gdes", "word", "none")
# The model's inputs, and the features of a pretraining batch: int [batch, length]
# token ids, segment (token type) ids, and 1 for real tokens / 0 for padding.
FEATURES = ("token_ids", "segment_ids", "padding_mask")
# Fields ElectraConfig had before they became the objectives' hyperparameters
# (keras_electra.pretraining.objectives): a config.json that holds them still loads
# (RunDirectory.stored_hyperparameters reads them from it), and a config given one names
# its new home.
OBJECTIVE_FIELDS = (
    "mlm_weight",
    "disc_weight",
    "corrective_weight",
    "temperature",
    "disallow_correct",
)


@dataclass(frozen=True)
class EncoderConfig:
    """The size of one transformer tower (generator or discriminator)."""

    hidden_size: int
    num_layers: int
    num_heads: int
    intermediate_size: int


@dataclass(frozen=True)
class ElectraConfig:
    """Architecture and masking of an ELECTRA generator/discriminator pair.

    Args:
        vocab_size: number of word pieces; set from the vocabulary.
        hidden_size: discriminator hidden size.
        num_layers: discriminator transformer layers.
        num_heads: discriminator attention heads.
        intermediate_size: discriminator feed-forward size.
        embedding_size: size of the shared embedding block; each tower projects
            from it to its own hidden size when the two differ.
        max_position_embeddings: longest sequence the position table holds.
        type_vocab_size: number of segment ids.
        dropout: dropout on embeddings, attention probabilities and layer outputs.
        layer_norm_epsilon: LayerNorm epsilon (1e-12 as in BERT/ELECTRA).
        normalize_first: pre-LayerNorm transformer layers (LayerNorm before attention
            and feed-forward, plus a final LayerNorm) in both towers; the paper's
            post-LayerNorm when False. Hugging Face and keras-hub ELECTRA have no
            pre-LayerNorm form, so such models do not convert to them.
        initializer_range: standard deviation of the truncated-normal initializer.
        generator_hidden_size: generator hidden size as a fraction of ``hidden_size``.
        generator_layers: generator depth as a fraction of ``num_layers``.
        mask_prob: fraction of real (non-special) tokens selected for prediction.
        mask_token_prob: fraction of selected tokens replaced by ``[MASK]``; the
            rest keep their original token (ELECTRA has no random-token branch).
        pad_token_id: the ``[PAD]`` id, set from the vocabulary (as are the next three).
        cls_token_id: the ``[CLS]`` id.
        sep_token_id: the ``[SEP]`` id.
        mask_token_id: the ``[MASK]`` id.
        lowercase: whether the tokenizer lower-cases; travels with the vocabulary.
        embedding_sharing: what the two towers share (objective ``electra`` only):
            ``all`` one embedding block (word, position and segment tables and
            LayerNorm; the paper's default); ``word`` only the word table; ``none``
            nothing (the generator's output stays tied to its own word table);
            ``gdes`` gradient-disentangled sharing (He et al., 2021): the
            discriminator reads ``stop_gradient(shared table) + delta`` for the word,
            position and segment tables, with zero-initialized deltas and its own
            LayerNorm, so only the generator's loss trains the shared tables.
    """

    vocab_size: int = 30522
    hidden_size: int = 256
    num_layers: int = 12
    num_heads: int = 4
    intermediate_size: int = 1024
    embedding_size: int = 128
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    dropout: float = 0.1
    layer_norm_epsilon: float = 1e-12
    normalize_first: bool = False
    initializer_range: float = 0.02
    generator_hidden_size: float = 0.25
    generator_layers: float = 1.0
    mask_prob: float = 0.15
    mask_token_prob: float = 0.85
    pad_token_id: int = 0
    cls_token_id: int = 2
    sep_token_id: int = 3
    mask_token_id: int = 4
    lowercase: bool = True
    embedding_sharing: str = "all"

    def __post_init__(self) -> None:
        # The sizes: every int field but the special-token ids.
        sizes = [
            f.name for f in dataclasses.fields(self) if f.type == "int" and "_id" not in f.name
        ]
        for name in sizes:
            if not isinstance(value := getattr(self, name), int) or value <= 0:
                raise ConfigError(
                    f"ElectraConfig.{name} must be a positive integer, got {value!r}."
                )
        if self.hidden_size % self.num_heads:
            raise ConfigError(
                f"ElectraConfig.hidden_size ({self.hidden_size}) must be divisible by "
                f"num_heads ({self.num_heads})."
            )
        if not 0.0 <= self.dropout < 1.0:
            raise ConfigError("ElectraConfig.dropout must be in [0, 1).")
        if not 0.0 < self.mask_prob < 1.0 or not 0.0 <= self.mask_token_prob <= 1.0:
            raise ConfigError(
                "ElectraConfig.mask_prob must be in (0, 1) and mask_token_prob in [0, 1]."
            )
        if self.generator_hidden_size <= 0 or self.generator_layers <= 0:
            raise ConfigError(
                "ElectraConfig.generator_hidden_size and generator_layers must be > 0."
            )
        if self.embedding_sharing not in EMBEDDING_SHARING:
            raise ConfigError(
                f"ElectraConfig.embedding_sharing must be one of {', '.join(EMBEDDING_SHARING)}, "
                f"got {self.embedding_sharing!r}."
            )
        ids = (self.pad_token_id, self.cls_token_id, self.sep_token_id, self.mask_token_id)
        if any(i < 0 or i >= self.vocab_size for i in ids):
            raise ConfigError(
                f"Special token ids {ids} must lie inside the vocabulary (size {self.vocab_size})."
            )

    # === Derived sizes ===

    def discriminator_config(self) -> EncoderConfig:
        return EncoderConfig(
            self.hidden_size, self.num_layers, self.num_heads, self.intermediate_size
        )

    def generator_config(self) -> EncoderConfig:
        hidden = max(1, round(self.generator_hidden_size * self.hidden_size))
        layers = max(1, round(self.generator_layers * self.num_layers))
        heads = max(1, hidden // 64)
        return EncoderConfig(hidden, layers, heads, intermediate_size=4 * hidden)

    def replaced_prior_logit(self) -> float:
        """The logit of the replaced fraction expected at the start of training.

        An untrained generator almost never samples the original token, so about
        ``mask_prob`` of the ordinary tokens are replaced: the discriminator's
        output bias starts at ``log(p / (1 - p))`` for that ``p``.
        """
        return math.log(self.mask_prob / (1.0 - self.mask_prob))

    def max_predictions(self, seq_length: int) -> int:
        """How many positions per sequence the masking step may select."""
        return max(1, int((self.mask_prob + 0.005) * seq_length))

    # === Parameter counts (from the sizes, without building a model) ===

    def embedding_parameters(self) -> int:
        """Weights of one embedding block: the word, position and segment tables and
        their LayerNorm (what ``embedding_sharing="all"`` shares)."""
        rows = self.vocab_size + self.max_position_embeddings + self.type_vocab_size
        return (rows + 2) * self.embedding_size

    def shared_embedding_parameters(self) -> int:
        """Weights of the embeddings the generator and discriminator hold together: one
        block (:meth:`embedding_parameters`) and the discriminator's own weights besides
        it, none (``"all"``), its position and segment tables and LayerNorm (``"word"``),
        a whole block (``"none"``), or a delta per table and its own LayerNorm (``"gdes"``:
        a block's worth)."""
        block = self.embedding_parameters()
        word_table = self.vocab_size * self.embedding_size
        own = {"all": 0, "word": block - word_table, "none": block, "gdes": block}
        return block + own[self.embedding_sharing]

    def tower_parameters(self, encoder: EncoderConfig) -> int:
        """Weights of one transformer tower: the projection from the embedding size
        (when it differs), per layer the attention's four projections, the
        feed-forward and two LayerNorms, and a final LayerNorm with ``normalize_first``.

        Examples:
            >>> config = ElectraConfig.from_preset("base")
            >>> config.tower_parameters(config.discriminator_config())
            85054464
        """
        h, f, e = encoder.hidden_size, encoder.intermediate_size, self.embedding_size
        projection = e * h + h if e != h else 0
        layer = 4 * (h * h + h) + (h * f + f) + (f * h + h) + 2 * 2 * h
        return projection + encoder.num_layers * layer + (2 * h if self.normalize_first else 0)

    def backbone_parameters(self) -> int:
        """The discriminator with its embeddings: what fine-tuning trains and an export
        holds (a task's head aside).

        Examples:
            >>> f"{ElectraConfig.from_preset('base').backbone_parameters() / 1e6:.1f} M"
            '108.9 M'
        """
        return self.embedding_parameters() + self.tower_parameters(self.discriminator_config())

    def lm_head_parameters(self, hidden: int) -> int:
        """Weights of a masked-LM head on a ``hidden``-wide tower: the dense layer to the
        embedding size, its LayerNorm and the output bias (the output matrix is the
        tied word table)."""
        e = self.embedding_size
        return hidden * e + e + 2 * e + self.vocab_size

    # === Serialization ===

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True)

    def replace(self, **changes: Any) -> ElectraConfig:
        return self.from_dict({**self.to_dict(), **changes})

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> ElectraConfig:
        moved = sorted(set(values) & set(OBJECTIVE_FIELDS))
        if moved:
            raise ConfigError(
                f"{', '.join(moved)} {'is' if len(moved) == 1 else 'are'} the pretraining "
                "objective's, not ElectraConfig's: pass it to objectives.get(name, ...) or "
                "ElectraPretrainer(..., hyperparameters={...})."
            )
        unknown = set(values) - {f.name for f in dataclasses.fields(cls)}
        if unknown:
            raise ConfigError(f"Unknown ElectraConfig field(s): {', '.join(sorted(unknown))}.")
        return cls(**values)

    @classmethod
    def from_json(cls, text: str, where: str = "The configuration") -> ElectraConfig:
        values = parse_json(text, where, "write it as a JSON object of fields")
        if not isinstance(values, dict):
            raise ConfigError("The configuration JSON must be an object of field names to values.")
        return cls.from_dict({k: v for k, v in values.items() if k not in OBJECTIVE_FIELDS})

    @classmethod
    def load(cls, path: str | Path) -> ElectraConfig:
        path = Path(path)
        if not path.is_file():
            raise ConfigError(f"Configuration file '{path}' does not exist.")
        text = path.read_text(encoding="utf-8")
        values = parse_json(text, f"'{path}'", "write it as a JSON object of fields")
        if isinstance(values, dict) and (kind := foreign_format(values)):
            raise ConfigError(
                f"'{path.parent}' holds a {kind} model, not a keras-electra run; convert it "
                f"first (keras-electra convert --from {FORMAT_FLAGS[kind]} {path.parent} "
                "--output NEW_DIR) and pass NEW_DIR"
                + (", or pass the Hub's copy as hf:ORG/NAME." if kind == "Hugging Face" else ".")
            )
        return cls.from_json(text, f"'{path}'")

    def save(self, path: str | Path) -> None:
        write_atomic(path, self.to_json() + "\n")

    @classmethod
    def from_preset(cls, name: str, **overrides: Any) -> ElectraConfig:
        if name not in PRESETS:
            raise ConfigError(
                f"Unknown preset '{name}'; choose one of: {', '.join(sorted(PRESETS))}."
            )
        return cls.from_dict({**PRESETS[name], **overrides})


# Other implementations' config.json, told by their keys, and convert's --from for each.
FORMAT_FLAGS = {"Hugging Face": "hf", "keras-hub": "keras-hub"}


def foreign_format(config: dict) -> str | None:
    """The implementation whose ``config.json`` this is when it is not keras-electra's:
    ``Hugging Face`` (``model_type``), ``keras-hub`` (a Keras object's ``class_name``)."""
    if "model_type" in config:
        return "Hugging Face"
    if "class_name" in config or "registered_name" in config:
        return "keras-hub"
    return None


# === Presets ===
# Sizes from the paper's Table 6 (Clark et al., 2020). Generator sizes follow the
# paper's hyperparameter table: 1/4 for Small and Large, 1/3 for Base.
_SIZES = ("hidden_size", "num_layers", "num_heads", "intermediate_size", "embedding_size")


def _sizes(*sizes: int, generator: float) -> dict[str, Any]:
    """A row of the sizes table (:data:`_SIZES`), and the generator's width fraction."""
    return {**dict(zip(_SIZES, sizes, strict=True)), "generator_hidden_size": generator}


PRESETS: dict[str, dict[str, Any]] = {
    # For tests and the demo: learns something on the sample corpus in minutes on a CPU.
    "tiny": {
        **_sizes(128, 2, 2, 512, 128, generator=0.25),
        "vocab_size": 8000,
        "max_position_embeddings": 128,
        # The recipe that keeps this small a discriminator detecting to the end of a
        # CPU-sized run (docs/research/tiny-recipe.md): GDES sharing (plain sharing slows
        # the generator: MLM accuracy 0.089 vs 0.112 at step 600), and the electra
        # objective's sampling at temperature 2 (its preset_hyperparameters). The larger
        # presets keep the paper's full sharing and temperature 1.
        "embedding_sharing": "gdes",
    },
    #               hidden layers heads  FF  embedding
    "small": _sizes(256, 12, 4, 1024, 128, generator=0.25),
    # The released ELECTRA-Small (google-research/electra README: "ELECTRA-Small++"):
    # Small's discriminator with a generator as wide as the discriminator.
    "small++": _sizes(256, 12, 4, 1024, 128, generator=1.0),
    "base": _sizes(768, 12, 12, 3072, 768, generator=1 / 3),
    # Large masks 25% of the tokens (the paper's Table 6; the others 15%).
    "large": {**_sizes(1024, 24, 16, 4096, 1024, generator=0.25), "mask_prob": 0.25},
}

# Pretraining hyperparameters from the paper's Table 6, used as command-line defaults.
_RECIPE = ("learning_rate", "batch_size", "max_seq_length", "steps", "warmup_steps")
TRAINING_DEFAULTS: dict[str, dict[str, Any]] = {
    name: dict(zip(_RECIPE, row, strict=True))
    for name, row in {
        #           learning rate  batch  length  steps  warm-up
        "tiny": (5e-4, 32, 128, 1000, 100),
        "small": (5e-4, 128, 128, 1_000_000, 10_000),
        "small++": (5e-4, 128, 512, 1_000_000, 10_000),  # Small's, with 512-token sequences
        "base": (2e-4, 256, 512, 766_000, 10_000),
        "large": (2e-4, 2048, 512, 400_000, 10_000),
    }.items()
}
