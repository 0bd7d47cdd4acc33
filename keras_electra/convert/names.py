"""Where every ELECTRA weight lives in each format: one table, generated from the config.

The canonical name and layout are google-research/electra's TF1 checkpoint
(``electra/encoder/layer_0/attention/self/query/kernel``, dense kernels
``[in, out]``). Each :class:`Weight` row also names the same tensor

- in our :class:`~keras_electra.pretraining.ElectraPretrainer` (variable path;
  attention kernels split into heads, ``[hidden, heads, head_dim]``),
- in Hugging Face's ``ElectraForPreTraining`` / ``ElectraForMaskedLM`` state
  dicts (``torch.nn.Linear`` weights are ``[out, in]``), and
- in keras-hub's ``ElectraBackbone`` (same layout as ours; discriminator only).

Converters read a format into ``{canonical name: array}`` and write from it, so
a name is spelled in exactly one place.

The embedding rows are the shared block (``electra/embeddings/...``). A model
whose generator reads other embeddings than its discriminator
(``embedding_sharing`` other than ``all``) has them under
:func:`generator_embedding_name` as well (google-research's names for untied
generator embeddings); our pretrainer's variables for them are not in the table:
``read_model`` gives the effective tables of each tower.

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
    rows = _embedding_rows(towers)
    for tower in towers:
        rows += _tower_rows(config, tower)
    if GENERATOR in towers:
        rows += _generator_head_rows()
    if DISCRIMINATOR in towers:
        rows += _discriminator_head_rows()
    return rows


def _embedding_rows(towers) -> list[Weight]:
    rows = []
    for google, ours, hf, layout in (
        ("word_embeddings", "token_embedding/embeddings", "word_embeddings.weight", TABLE),
        (
            "position_embeddings",
            "position_embedding/embeddings",
            "position_embeddings.weight",
            TABLE,
        ),
        (
            "token_type_embeddings",
            "segment_embedding/embeddings",
            "token_type_embeddings.weight",
            TABLE,
        ),
        ("LayerNorm/gamma", "layer_norm/gamma", "LayerNorm.weight", VECTOR),
        ("LayerNorm/beta", "layer_norm/beta", "LayerNorm.bias", VECTOR),
    ):
        keras_hub = ours.replace("layer_norm", "embeddings_layer_norm")
        rows.append(
            Weight(
                google=f"electra/embeddings/{google}",
                ours=f"embedding/{ours}",
                hf=tuple((t, f"electra.embeddings.{hf}") for t in towers),
                keras_hub=keras_hub,
                layout=layout,
                tower=DISCRIMINATOR,
            )
        )
    return rows


def generator_embedding_name(google: str) -> str:
    """The canonical name of the generator's own copy of a shared embedding weight.

    Examples:
        >>> generator_embedding_name("electra/embeddings/word_embeddings")
        'generator/embeddings/word_embeddings'
    """
    return "generator/" + google.removeprefix("electra/")


def _tower_rows(config: ElectraConfig, tower: str) -> list[Weight]:
    sizes = config.discriminator_config() if tower == DISCRIMINATOR else config.generator_config()
    scope = "electra" if tower == DISCRIMINATOR else "generator"
    prefix = f"{tower}/{tower}_encoder"
    keras_hub = tower == DISCRIMINATOR

    def row(google, ours, hf, layout, kh=None):
        return Weight(
            google=f"{scope}/{google}",
            ours=f"{prefix}/{ours}",
            hf=((tower, f"electra.{hf}"),),
            keras_hub=(kh or ours) if keras_hub else None,
            layout=layout,
            tower=tower,
            heads=sizes.num_heads,
        )

    rows = []
    if config.embedding_size != sizes.hidden_size:
        for part in ("kernel", "bias"):
            rows.append(
                row(
                    f"embeddings_project/{part}",
                    f"projection/{part}",
                    f"embeddings_project.{_hf_part(part)}",
                    KERNEL if part == "kernel" else VECTOR,
                    kh=f"embeddings_projection/{part}",
                )
            )
    for i in range(sizes.num_layers):
        google, ours, hf = f"encoder/layer_{i}", f"transformer_layer_{i}", f"encoder.layer.{i}"
        for name in ("query", "key", "value"):
            rows.append(
                row(
                    f"{google}/attention/self/{name}/kernel",
                    f"{ours}/self_attention_layer/{name}/kernel",
                    f"{hf}.attention.self.{name}.weight",
                    HEADS_KERNEL,
                )
            )
            rows.append(
                row(
                    f"{google}/attention/self/{name}/bias",
                    f"{ours}/self_attention_layer/{name}/bias",
                    f"{hf}.attention.self.{name}.bias",
                    HEADS_BIAS,
                )
            )
        rows.append(
            row(
                f"{google}/attention/output/dense/kernel",
                f"{ours}/self_attention_layer/attention_output/kernel",
                f"{hf}.attention.output.dense.weight",
                HEADS_OUTPUT,
            )
        )
        rows.append(
            row(
                f"{google}/attention/output/dense/bias",
                f"{ours}/self_attention_layer/attention_output/bias",
                f"{hf}.attention.output.dense.bias",
                VECTOR,
            )
        )
        for google_part, ours_part, hf_part in (
            (
                "attention/output/LayerNorm",
                "self_attention_layer_norm",
                "attention.output.LayerNorm",
            ),
            ("intermediate/dense", "feedforward_intermediate_dense", "intermediate.dense"),
            ("output/dense", "feedforward_output_dense", "output.dense"),
            ("output/LayerNorm", "feedforward_layer_norm", "output.LayerNorm"),
        ):
            norm = "LayerNorm" in google_part
            for part in ("gamma", "beta") if norm else ("kernel", "bias"):
                rows.append(
                    row(
                        f"{google}/{google_part}/{part}",
                        f"{ours}/{ours_part}/{part}",
                        f"{hf}.{hf_part}.{_hf_part(part)}",
                        KERNEL if part == "kernel" else VECTOR,
                    )
                )
    return rows


def _generator_head_rows() -> list[Weight]:
    head = "electra_pretrainer/generator_predictions"
    rows = [
        ("dense/kernel", "intermediate_dense/kernel", "generator_predictions.dense.weight", KERNEL),
        ("dense/bias", "intermediate_dense/bias", "generator_predictions.dense.bias", VECTOR),
        (
            "LayerNorm/gamma",
            "intermediate_layer_norm/gamma",
            "generator_predictions.LayerNorm.weight",
            VECTOR,
        ),
        (
            "LayerNorm/beta",
            "intermediate_layer_norm/beta",
            "generator_predictions.LayerNorm.bias",
            VECTOR,
        ),
        ("output_bias", "output_bias", "generator_lm_head.bias", VECTOR),
    ]
    return [
        Weight(
            f"generator_predictions/{g}", f"{head}/{o}", ((GENERATOR, h),), None, layout, GENERATOR
        )
        for g, o, h, layout in rows
    ]


def _discriminator_head_rows() -> list[Weight]:
    head = "electra_pretrainer/discriminator_predictions"
    rows = []
    for google, ours, hf in (
        ("dense", "dense", "dense"),
        ("dense_1", "logits", "dense_prediction"),
    ):
        for part in ("kernel", "bias"):
            rows.append(
                Weight(
                    f"discriminator_predictions/{google}/{part}",
                    f"{head}/{ours}/{part}",
                    ((DISCRIMINATOR, f"discriminator_predictions.{hf}.{_hf_part(part)}"),),
                    None,
                    KERNEL if part == "kernel" else VECTOR,
                    DISCRIMINATOR,
                )
            )
    return rows


def _hf_part(part: str) -> str:
    return {"kernel": "weight", "bias": "bias", "gamma": "weight", "beta": "bias"}[part]


# === Layout changes ===


def to_ours(weight: Weight, value: np.ndarray) -> np.ndarray:
    """Canonical layout -> ours (and keras-hub's)."""
    hidden = value.shape[-1] if weight.layout != HEADS_OUTPUT else value.shape[0]
    head_dim = hidden // weight.heads
    if weight.layout == HEADS_KERNEL:
        return value.reshape(value.shape[0], weight.heads, head_dim)
    if weight.layout == HEADS_BIAS:
        return value.reshape(weight.heads, head_dim)
    if weight.layout == HEADS_OUTPUT:
        return value.reshape(weight.heads, head_dim, value.shape[1])
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
