"""google-research/electra TF1 checkpoints (``model.ckpt-N.index`` / ``.data-*``).

The released checkpoints hold both towers under the original variable names
(:mod:`keras_electra.convert.names`) and Adam slots, which are skipped. Sizes come from
the tensor shapes or ``preset``, the vocabulary from the ``vocab.txt`` next to the
checkpoint (or ``vocab``): docs/checkpoints.md.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import tensorflow as tf

from keras_electra.config import ElectraConfig
from keras_electra.convert.core import (
    Converted,
    config_with_generator,
    special_token_ids,
)
from keras_electra.errors import ConfigError, first_line

OPTIMIZER_SUFFIXES = ("/adam_m", "/adam_v", "/Adam", "/Adam_1")
NON_WEIGHTS = ("global_step",)


def read_google(
    path: str | Path,
    *,
    vocab: str | Path | None = None,
    preset: str | None = None,
    lowercase: bool = True,
    num_heads: int | None = None,
) -> Converted:
    """Read a TF1 ELECTRA checkpoint.

    Args:
        path: a checkpoint prefix (``electra_small/electra_small`` in the released zips,
            ``.../model.ckpt-N`` from a run) or its directory.
        vocab: the ``vocab.txt`` (default: one next to the checkpoint or one level up).
        preset: sizes to expect (e.g. ``small++`` for the released small model);
            read from the shapes when omitted.
        lowercase: whether the vocabulary is uncased (the released models are).
        num_heads: discriminator attention heads (default: hidden size / 64).

    Examples:
        >>> converted = read_google("electra_small/")  # the unzipped release  # doctest: +SKIP
        >>> converted.config.generator_hidden_size  # doctest: +SKIP
        1.0
    """
    prefix = _checkpoint_prefix(Path(path))
    try:
        reader = tf.train.load_checkpoint(prefix)
        shapes = reader.get_variable_to_shape_map()
        names = [n for n in shapes if n not in NON_WEIGHTS and not n.endswith(OPTIMIZER_SUFFIXES)]
        weights = {n: np.asarray(reader.get_tensor(n)) for n in names}
    except (tf.errors.OpError, IndexError, ValueError) as error:  # IndexError: a short read
        raise ConfigError(
            f"The checkpoint '{prefix}' cannot be read ({first_line(error)}); its .index or "
            ".data file is damaged or incomplete: unpack or download it again."
        ) from None
    skipped = len(shapes) - len(names)
    if any(n.startswith(("generator_ltr/", "generator_rtl/")) for n in weights):
        raise ConfigError(
            f"'{path}' is an Electric checkpoint (generator_ltr/, generator_rtl/), which convert "
            "does not read: its discriminator is an energy model, not a replaced-token "
            "detector; pretrain with --objective electric instead."
        )
    tokens = _vocabulary(prefix, vocab)
    config = _config(weights, tokens, preset, lowercase, num_heads, str(path))
    notes = [f"Skipped {skipped} optimizer and step variables."] if skipped else []
    return Converted(config, tokens, weights, str(path), "google", notes)


def _checkpoint_prefix(path: Path) -> str:
    if path.is_dir():
        latest = tf.train.latest_checkpoint(str(path))
        if latest is None:
            indexes = sorted(path.glob("*.index"))
            if not indexes:
                raise ConfigError(f"'{path}' holds no TF checkpoint (no *.index file).")
            latest = str(indexes[-1])[: -len(".index")]
        return latest
    if Path(str(path) + ".index").is_file():
        return str(path)
    raise ConfigError(
        f"'{path}' is not a TF checkpoint: pass its prefix (e.g. electra_small/electra_small, "
        "without .index) or its directory."
    )


def _vocabulary(prefix: str, vocab: str | Path | None) -> list[str]:
    from keras_electra.data import load_vocab

    if vocab is None:
        here = Path(prefix).parent
        candidates = (here / "vocab.txt", here.parent / "vocab.txt")
        vocab = next((c for c in candidates if c.is_file()), None)
        if vocab is None:
            raise ConfigError(
                f"No vocab.txt next to '{prefix}'; pass --vocab with the vocabulary the "
                "checkpoint was trained with."
            )
    return load_vocab(vocab)


def _layers(weights: dict, scope: str) -> int:
    found = {
        int(m.group(1)) for n in weights if (m := re.match(rf"{scope}/encoder/layer_(\d+)/", n))
    }
    return max(found) + 1 if found else 0


def _config(weights, tokens, preset, lowercase, num_heads, source) -> ElectraConfig:
    table = "electra/embeddings/word_embeddings"
    if table not in weights or _layers(weights, "electra") == 0:
        raise ConfigError(
            f"'{source}' is not an ELECTRA checkpoint: it has no '{table}' or "
            "'electra/encoder/layer_0/...' variables."
        )
    ids = special_token_ids(tokens, source)
    if preset is not None:
        return ElectraConfig.from_preset(
            preset, vocab_size=weights[table].shape[0], lowercase=lowercase, **ids
        )
    vocab_size, embedding = weights[table].shape
    layer_0 = "electra/encoder/layer_0"
    hidden = weights[f"{layer_0}/attention/self/query/kernel"].shape[1]
    layers = _layers(weights, "electra")
    values = dict(
        vocab_size=int(vocab_size),
        embedding_size=int(embedding),
        hidden_size=int(hidden),
        num_layers=layers,
        num_heads=max(1, hidden // 64) if num_heads is None else num_heads,  # 0 is refused
        intermediate_size=int(weights[f"{layer_0}/intermediate/dense/kernel"].shape[1]),
        max_position_embeddings=int(weights["electra/embeddings/position_embeddings"].shape[0]),
        type_vocab_size=int(weights["electra/embeddings/token_type_embeddings"].shape[0]),
        lowercase=lowercase,
        **ids,
    )
    generator_layers, generator = _layers(weights, "generator"), None
    if generator_layers:
        kernel = weights["generator/encoder/layer_0/intermediate/dense/kernel"]
        width = kernel.shape[0]
        generator = (width, generator_layers, max(1, width // 64), kernel.shape[1])
    return config_with_generator(values, generator, source)
