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
            ``.../model.ckpt-N`` from a run) or its directory, whose latest checkpoint is
            read: the one its ``checkpoint`` file names, else the highest step number (a
            note then says which).
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
    prefix, chosen = _checkpoint_prefix(Path(path))
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
    notes = chosen + ([f"Skipped {skipped} optimizer and step variables."] if skipped else [])
    return Converted(config, tokens, weights, str(path), "google", notes)


def _checkpoint_prefix(path: Path) -> tuple[str, list[str]]:
    """The checkpoint prefix to read for ``path`` (a prefix, or a directory: its latest
    checkpoint), with a note saying which one was taken when that was a choice."""
    if path.is_dir():
        return _latest_in(path)
    if Path(str(path) + ".index").is_file():
        return str(path), []
    raise ConfigError(
        f"'{path}' is not a TF checkpoint: pass its prefix (e.g. electra_small/electra_small, "
        "without .index) or its directory."
    )


def _latest_in(folder: Path) -> tuple[str, list[str]]:
    """``folder``'s latest checkpoint: the one its ``checkpoint`` file names (read here:
    TensorFlow's ``latest_checkpoint`` logs an error line when that one is gone), else
    the highest step among its ``*.index`` files (:func:`_step_order`). A note names the
    prefix read when the folder holds several, or has no usable ``checkpoint`` file."""
    prefixes = sorted((p.name[: -len(".index")] for p in folder.glob("*.index")), key=_step_order)
    named = _named_in_checkpoint_file(folder)
    several = f"the latest of the {len(prefixes)} checkpoints in '{folder}'"
    if named is not None:
        for candidate in (folder / named, folder / Path(named).name):
            if not Path(f"{candidate}.index").is_file():
                continue
            prefix = str(candidate)
            if candidate != folder / named:  # written on another machine, copied here
                return prefix, [
                    f"Read '{prefix}', the checkpoint '{folder}/checkpoint' names as '{named}'."
                ]
            if len(prefixes) > 1:
                return prefix, [f"Read '{prefix}', {several} by its checkpoint file."]
            return prefix, []
    if not prefixes:
        stale = "" if named is None else f"; its checkpoint file names '{named}', not there"
        raise ConfigError(f"'{folder}' holds no TF checkpoint (no *.index file{stale}).")
    prefix = str(folder / prefixes[-1])
    if named is not None:
        why = f"its checkpoint file names '{named}', which is not there"
    else:
        why = "it has no checkpoint file naming its latest"
    if len(prefixes) == 1:
        return prefix, [f"Read '{prefix}', the only checkpoint in '{folder}' ({why})."]
    return prefix, [f"Read '{prefix}', {several} by step number ({why})."]


def _step_order(prefix: str) -> tuple[bool, int, str]:
    """Sort key of checkpoint prefixes, oldest first: by the step number that ends the
    name (``model.ckpt-1000`` after ``model.ckpt-999``); names without one
    (``electra_small``) before numbered ones; ties alphabetically.

    Examples:
        >>> sorted(["model.ckpt-1000", "electra_small", "model.ckpt-999"], key=_step_order)
        ['electra_small', 'model.ckpt-999', 'model.ckpt-1000']
    """
    step = re.search(r"-(\d+)$", prefix)
    return (step is not None, int(step.group(1)) if step else -1, prefix)


def _named_in_checkpoint_file(folder: Path) -> str | None:
    """The ``model_checkpoint_path`` of ``folder``'s ``checkpoint`` file (a text-format
    ``CheckpointState``; C-style escapes undone), or None when there is no such file or
    it names none."""
    try:
        text = (folder / "checkpoint").read_bytes()
    except OSError:
        return None
    found = re.search(rb'^\s*model_checkpoint_path\s*:\s*"((?:[^"\\]|\\.)*)"', text, re.M)
    if found is None or not found.group(1):
        return None
    return _unescape(found.group(1)).decode("utf-8", "replace")


def _unescape(raw: bytes) -> bytes:
    """A protobuf text-format string's bytes: ``\\NNN`` (octal), ``\\xNN`` and ``\\n``-style
    escapes undone."""
    simple = {b"n": b"\n", b"t": b"\t", b"r": b"\r"}

    def one(match: re.Match) -> bytes:
        code = match.group(1)
        if code[:1].isdigit():
            return bytes([int(code, 8) & 0xFF])
        if code[:1] == b"x":
            return bytes([int(code[1:], 16)])
        return simple.get(code, code)

    return re.sub(rb"\\([0-7]{1,3}|x[0-9a-fA-F]{1,2}|.)", one, raw)


def _vocabulary(prefix: str, vocab: str | Path | None) -> list[str]:
    from keras_electra.convert.hf import read_vocab_file

    if vocab is None:
        here = Path(prefix).parent
        candidates = (here / "vocab.txt", here.parent / "vocab.txt")
        vocab = next((c for c in candidates if c.is_file()), None)
        if vocab is None:
            raise ConfigError(
                f"No vocab.txt next to '{prefix}'; pass --vocab with the vocabulary the "
                "checkpoint was trained with."
            )
    return read_vocab_file(vocab)


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
