"""Where every ELECTRA weight lives in each format: one table, generated from the config.

The canonical name and layout are google-research/electra's TF1 checkpoint's (dense
kernels ``[in, out]``); each :class:`Weight` row also names the tensor in our pretrainer,
Hugging Face's state dicts and keras-hub's backbone. Converters read a format into
``{canonical name: array}`` and write from it, so a name is spelled in one place.

The embedding rows are the shared block; a generator with embeddings of its own
(``embedding_sharing`` other than ``all``) has them under :func:`generator_embedding_name`
too, read by ``read_model`` (our variables for them are not in the table).

Examples:
    >>> from keras_electra.config import ElectraConfig
    >>> config = ElectraConfig.from_preset("tiny", num_layers=1)
    >>> row = weight_table(config)[5]
    >>> row.google, row.hf
    ('electra/encoder/layer_0/attention/self/query/kernel', (('discriminator', 'electra.encoder.layer.0.attention.self.query.weight'),))
"""  # noqa: E501

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from keras_electra.config import ElectraConfig

# Layouts: how a tensor's shape differs between the canonical form and the others.
VECTOR = "vector"  # LayerNorm scales/offsets, biases of plain dense layers: same everywhere
TABLE = "table"  # embedding tables [rows, width]: same everywhere
KERNEL = "kernel"  # dense [in, out]; Hugging Face stores [out, in]
HEADS_KERNEL = "heads_kernel"  # q/k/v [hidden, hidden]; ours [hidden, heads, head_dim]
HEADS_BIAS = "heads_bias"  # q/k/v bias [hidden]; ours [heads, head_dim]
HEADS_OUTPUT = "heads_output"  # attention output [hidden, hidden]; ours [heads, head_dim, hidden]

DISCRIMINATOR, GENERATOR = "discriminator", "generator"
# A block's two tensors' layouts: a dense layer's kernel and bias, a LayerNorm's gamma and beta.
DENSE, HEADS, NORM = (KERNEL, VECTOR), (HEADS_KERNEL, HEADS_BIAS), (VECTOR, VECTOR)
_HF_PARTS = {"kernel": "weight", "bias": "bias", "gamma": "weight", "beta": "bias"}

# The embedding tables, canonical and ours (Hugging Face's: canonical + ".weight").
_TABLES = (
    ("word_embeddings", "token_embedding"),
    ("position_embeddings", "position_embedding"),
    ("token_type_embeddings", "segment_embedding"),
)
# The blocks of one transformer layer, canonical and ours (Hugging Face's: canonical with
# dots for slashes).
_LAYER_BLOCKS = (
    ("attention/self/query", "self_attention_layer/query", HEADS),
    ("attention/self/key", "self_attention_layer/key", HEADS),
    ("attention/self/value", "self_attention_layer/value", HEADS),
    ("attention/output/dense", "self_attention_layer/attention_output", (HEADS_OUTPUT, VECTOR)),
    ("attention/output/LayerNorm", "self_attention_layer_norm", NORM),
    ("intermediate/dense", "feedforward_intermediate_dense", DENSE),
    ("output/dense", "feedforward_output_dense", DENSE),
    ("output/LayerNorm", "feedforward_layer_norm", NORM),
)


@dataclass(frozen=True)
class Weight:
    """One tensor, named in each format.

    Args:
        google: canonical (TF1 checkpoint) name.
        ours: variable path in ``ElectraPretrainer``.
        hf: ``(model, name)`` pairs in Hugging Face state dicts; the shared
            embeddings appear in both the discriminator and the generator.
        keras_hub: variable path in keras-hub's ``ElectraBackbone`` (None when it
            has no such weight: generator and heads).
        layout: one of the layout constants above.
        tower: ``discriminator`` or ``generator`` (the shared embeddings count as
            the discriminator's).
        heads: attention heads of the tower (for the ``HEADS_*`` layouts).
    """

    google: str
    ours: str
    hf: tuple[tuple[str, str], ...]
    keras_hub: str | None
    layout: str
    tower: str
    heads: int = 1


def weight_table(config: ElectraConfig, towers=(DISCRIMINATOR, GENERATOR)) -> list[Weight]:
    """Every weight of an ELECTRA model of ``config``, in a fixed order."""
    rows = [
        Weight(
            f"electra/embeddings/{google}",
            f"embedding/{ours}/embeddings",
            tuple((t, f"electra.embeddings.{google}.weight") for t in towers),
            f"{ours}/embeddings",
            TABLE,
            DISCRIMINATOR,
        )
        for google, ours in _TABLES
    ]
    rows += _block(
        DISCRIMINATOR,
        "electra/embeddings/LayerNorm",
        "embedding/layer_norm",
        "electra.embeddings.LayerNorm",
        NORM,
        hf_towers=towers,
        keras_hub="embeddings_layer_norm",
    )
    for tower in towers:
        rows += _tower_rows(config, tower)
    if GENERATOR in towers:
        google, ours = "generator_predictions", "electra_pretrainer/generator_predictions"
        rows += _block(
            GENERATOR, f"{google}/dense", f"{ours}/intermediate_dense", f"{google}.dense", DENSE
        )
        rows += _block(
            GENERATOR,
            f"{google}/LayerNorm",
            f"{ours}/intermediate_layer_norm",
            f"{google}.LayerNorm",
            NORM,
        )
        hf = ((GENERATOR, "generator_lm_head.bias"),)
        rows.append(
            Weight(f"{google}/output_bias", f"{ours}/output_bias", hf, None, VECTOR, GENERATOR)
        )
    if DISCRIMINATOR in towers:
        google, ours = "discriminator_predictions", "electra_pretrainer/discriminator_predictions"
        rows += _block(DISCRIMINATOR, f"{google}/dense", f"{ours}/dense", f"{google}.dense", DENSE)
        rows += _block(
            DISCRIMINATOR,
            f"{google}/dense_1",
            f"{ours}/logits",
            f"{google}.dense_prediction",
            DENSE,
        )
    return rows


def generator_embedding_name(google: str) -> str:
    """The canonical name of the generator's own copy of a shared embedding weight.

    Examples:
        >>> generator_embedding_name("electra/embeddings/word_embeddings")
        'generator/embeddings/word_embeddings'
    """
    return "generator/" + google.removeprefix("electra/")


def _block(tower, google, ours, hf, layouts, heads=1, hf_towers=None, keras_hub=None):
    """A block's two tensors; ``hf`` is its name in the state dicts of ``hf_towers``
    (default: ``tower``'s), which add the part."""
    parts = ("gamma", "beta") if layouts == NORM else ("kernel", "bias")
    return [
        Weight(
            f"{google}/{part}",
            f"{ours}/{part}",
            tuple((t, f"{hf}.{_HF_PARTS[part]}") for t in hf_towers or (tower,)),
            keras_hub and f"{keras_hub}/{part}",
            layout,
            tower,
            heads,
        )
        for part, layout in zip(parts, layouts, strict=True)
    ]


def _tower_rows(config: ElectraConfig, tower: str) -> list[Weight]:
    sizes = config.discriminator_config() if tower == DISCRIMINATOR else config.generator_config()
    scope = "electra" if tower == DISCRIMINATOR else "generator"
    prefix = f"{tower}/{tower}_encoder"
    heads = sizes.num_heads

    def block(google, ours, hf, layouts, keras_hub=None):
        keras_hub = (keras_hub or ours) if tower == DISCRIMINATOR else None
        google, ours, hf = f"{scope}/{google}", f"{prefix}/{ours}", f"electra.{hf}"
        return _block(tower, google, ours, hf, layouts, heads, keras_hub=keras_hub)

    rows = []
    if config.embedding_size != sizes.hidden_size:
        project = ("embeddings_project", "projection", "embeddings_project")
        rows += block(*project, DENSE, keras_hub="embeddings_projection")
    for i in range(sizes.num_layers):
        for google, ours, layouts in _LAYER_BLOCKS:
            hf = f"encoder.layer.{i}.{google.replace('/', '.')}"
            rows += block(
                f"encoder/layer_{i}/{google}", f"transformer_layer_{i}/{ours}", hf, layouts
            )
    return rows


def to_ours(weight: Weight, value: np.ndarray) -> np.ndarray:
    """Canonical layout -> ours (and keras-hub's)."""
    if weight.layout == HEADS_KERNEL:
        return value.reshape(value.shape[0], weight.heads, -1)
    if weight.layout == HEADS_BIAS:
        return value.reshape(weight.heads, -1)
    if weight.layout == HEADS_OUTPUT:
        return value.reshape(weight.heads, -1, value.shape[1])
    return value


def from_ours(weight: Weight, value: np.ndarray) -> np.ndarray:
    """Ours (and keras-hub's) -> canonical layout."""
    if weight.layout == HEADS_KERNEL:
        return value.reshape(value.shape[0], -1)
    if weight.layout == HEADS_BIAS:
        return value.reshape(-1)
    if weight.layout == HEADS_OUTPUT:
        return value.reshape(-1, value.shape[-1])
    return value


def to_hf(weight: Weight, value: np.ndarray) -> np.ndarray:
    """Canonical layout -> Hugging Face (``nn.Linear`` weights are ``[out, in]``)."""
    if weight.layout in (KERNEL, HEADS_KERNEL, HEADS_OUTPUT):
        return np.ascontiguousarray(value.T)
    return value


from_hf = to_hf  # a transpose is its own inverse
