"""Hugging Face ELECTRA directories (``config.json`` + ``model.safetensors``), without torch.

The weights are ``model.safetensors``, else transformers' TensorFlow ``tf_model.h5`` (read
with h5py: its variables' names map one to one onto the PyTorch state dict's, dense kernels
transposed: :func:`torch_name`), never the pickle ``pytorch_model.bin``. Which directories
are read and written: docs/checkpoints.md, "What each source needs".
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import numpy as np

from keras_electra.atomic import write_json
from keras_electra.config import ElectraConfig
from keras_electra.convert.core import (
    Converted,
    config_with_generator,
    read_model,
    special_token_ids,
)
from keras_electra.convert.names import (
    DISCRIMINATOR,
    GENERATOR,
    from_hf,
    generator_embedding_name,
    to_hf,
    weight_table,
)
from keras_electra.errors import ConfigError, InputDataError, first_line, read_json

WEIGHTS_FILE = "model.safetensors"
TF_WEIGHTS_FILE = "tf_model.h5"
VOCAB_FILE = "vocab.txt"
# What transformers 5's tokenizers save in place of vocab.txt: the vocabulary is in it.
TOKENIZER_FILE = "tokenizer.json"
IGNORED = ("electra.embeddings.position_ids",)
_RESTORE = "restore the model's files"  # a buffer older versions saved
# Our config's fields and transformers' ElectraConfig's names for them: the REQUIRED ones
# must be in a config.json that is read (the others default as ours do; embedding_size
# to hidden_size), the TOWER ones differ between the discriminator and the generator.
HF_CONFIG = (
    ("vocab_size", "vocab_size"),
    ("embedding_size", "embedding_size"),
    ("hidden_size", "hidden_size"),
    ("num_layers", "num_hidden_layers"),
    ("num_heads", "num_attention_heads"),
    ("intermediate_size", "intermediate_size"),
    ("dropout", "hidden_dropout_prob"),
    ("max_position_embeddings", "max_position_embeddings"),
    ("type_vocab_size", "type_vocab_size"),
    ("initializer_range", "initializer_range"),
    ("layer_norm_epsilon", "layer_norm_eps"),
)
TOWER = ("hidden_size", "num_layers", "num_heads", "intermediate_size")
REQUIRED = (*TOWER, "vocab_size", "max_position_embeddings")
# A TF variable's last name -> the PyTorch parameter's; kernels are transposed.
_LEAVES = {"kernel": "weight", "gamma": "weight", "beta": "bias", "embeddings": "weight"}


def read_hf(path: str | Path, generator: str | Path | None = None) -> Converted:
    """Read Hugging Face ELECTRA weights into canonical names.

    Args:
        path: the discriminator's directory, or a directory holding
            ``discriminator/`` and ``generator/``.
        generator: the generator's directory (``ElectraForMaskedLM``), if separate.

    Examples:
        >>> converted = read_hf("electra-small-discriminator",
        ...                     generator="electra-small-generator")  # doctest: +SKIP
    """
    path = Path(path)
    if generator is None and (path / DISCRIMINATOR).is_dir():
        path, generator = path / DISCRIMINATOR, path / GENERATOR
        generator = generator if generator.is_dir() else None
    disc_config, disc_state = _read_dir(path)
    gen_config, gen_state = _read_dir(Path(generator)) if generator else (None, {})
    if any(k.startswith("generator_predictions.") for k in disc_state):
        raise ConfigError(
            f"'{path}' holds a generator (ElectraForMaskedLM); pass the discriminator "
            "directory first and the generator with --generator."
        )
    if generator and _is_discriminator(gen_config, gen_state):
        raise ConfigError(
            f"'{generator}' holds a discriminator (ElectraForPreTraining), not a generator "
            "(ElectraForMaskedLM); pass the generator's directory with --generator."
        )
    _check_layers(disc_config, disc_state, path)
    if generator:
        _check_layers(gen_config, gen_state, generator)
    tokens, lowercase, vocab_file = _vocabulary(path)
    config = _config(disc_config, gen_config, tokens, lowercase, str(path), vocab_file)
    towers = (DISCRIMINATOR, GENERATOR) if generator else (DISCRIMINATOR,)
    states = {DISCRIMINATOR: disc_state, GENERATOR: gen_state}
    used = {t: set(IGNORED) for t in towers}
    weights = {}
    for weight in weight_table(config, towers):
        values = []
        for tower, name in weight.hf:
            if name in states[tower]:
                values.append(states[tower][name])
                used[tower].add(name)
        if values:
            _check_shared(weight.google, values, path, generator)
            weights[weight.google] = from_hf(weight, values[0])
    if generator:
        _check_tied_output(gen_state, weights, generator)
        used[GENERATOR].add("generator_lm_head.weight")
    for tower in towers:
        extra = sorted(set(states[tower]) - used[tower])
        if extra:
            where = path if tower == DISCRIMINATOR else generator
            raise ConfigError(
                f"'{where}' has {len(extra)} weight(s) ELECTRA has no place for, e.g. "
                f"{', '.join(repr(e) for e in extra[:3])}; is it an ELECTRA model?"
            )
    source = f"{path}" + (f" + {generator}" if generator else "")
    return Converted(config, tokens, weights, source, "hf")


def write_hf(model, tokens: list[str], output: str | Path) -> Path:
    """Write an ``ElectraPretrainer`` as Hugging Face ``discriminator/`` and ``generator/``.

    Each directory holds the embeddings its tower reads: with ``embedding_sharing``
    other than ``all`` the two differ (the discriminator's are folded for ``gdes``),
    so each loads alone in transformers but :func:`read_hf` reads back only the
    discriminator (it converts into ``all``).
    """
    from safetensors.numpy import save_file

    output = Path(output)
    config = model.config
    weights = read_model(model)
    towers = (DISCRIMINATOR, GENERATOR) if model.generator is not None else (DISCRIMINATOR,)
    states = {t: {} for t in towers}
    tokenizer = {
        "tokenizer_class": "ElectraTokenizer",
        "do_lower_case": config.lowercase,
        "model_max_length": config.max_position_embeddings,
    }
    for weight in weight_table(config, towers):
        for tower, name in weight.hf:
            value = weights[weight.google]
            if tower == GENERATOR:  # its own embeddings when it does not share them all
                value = weights.get(generator_embedding_name(weight.google), value)
            states[tower][name] = to_hf(weight, value)
    for tower in towers:
        folder = output / tower
        folder.mkdir(parents=True, exist_ok=True)
        tensors = {k: np.ascontiguousarray(v, dtype="float32") for k, v in states[tower].items()}
        _save_safetensors(tensors, folder / WEIGHTS_FILE, save_file)
        write_json(folder / "config.json", _hf_config(config, tower))
        (folder / "vocab.txt").write_text("\n".join(tokens) + "\n", encoding="utf-8")
        write_json(folder / "tokenizer_config.json", tokenizer)
    return output


def _load_safetensors(path: Path, load_file) -> dict[str, np.ndarray]:
    """``path``'s tensors, or one sentence for a file that is not whole safetensors (cut
    short by a download or a full disk, or another file under that name)."""
    from safetensors import SafetensorError

    try:
        return load_file(str(path))
    except SafetensorError as error:
        raise ConfigError(
            f"'{path}' cannot be read as safetensors ({first_line(error)}); "
            + _damaged(path, "the file is damaged or incomplete: fetch or save it again")
            + "."
        ) from None


def hub_cache_folder(path: str | Path) -> Path | None:
    """The folder of a Hugging Face cache that holds ``path`` (``.../models--ORG--NAME``,
    whose ``snapshots/COMMIT/`` huggingface_hub fetches a model into), or None when
    ``path`` is not in one.

    Examples:
        >>> hub_cache_folder("hub/models--google--electra-small/snapshots/0123abc/vocab.txt")
        PosixPath('hub/models--google--electra-small')
        >>> hub_cache_folder("runs/electra-small/vocab.txt") is None
        True
    """
    for folder in Path(path).parents:
        if folder.parent.name == "snapshots" and folder.parent.parent.name.startswith("models--"):
            return folder.parent.parent
    return None


def _damaged(path: str | Path, fix: str) -> str:
    """What to do about a file that cannot be read: ``fix``; for a file in Hugging Face's
    cache, which huggingface_hub never checks again once fetched (and has no option to
    fetch again), delete the model's cache folder so that the next run fetches it afresh."""
    folder = hub_cache_folder(path)
    if folder is None:
        return fix
    return (
        f"the copy in Hugging Face's cache is damaged: delete '{folder}' so that the next run "
        "fetches the model again"
    )


def _save_safetensors(tensors: dict[str, np.ndarray], path: Path, save_file) -> None:
    """Write ``tensors`` to ``path``; a failed write is the OSError it was (safetensors
    reports one as its own error, "I/O error: ... (os error 28)")."""
    from safetensors import SafetensorError

    try:
        save_file(tensors, str(path), metadata={"format": "pt"})
    except SafetensorError as error:
        number = re.search(r"os error (\d+)", str(error))
        if number is None:
            raise
        code = int(number.group(1))
        raise OSError(code, os.strerror(code), str(path)) from None


def _read_dir(path: Path) -> tuple[dict, dict[str, np.ndarray]]:
    from safetensors.numpy import load_file

    if not (path / "config.json").is_file():
        raise ConfigError(f"'{path}' is not a Hugging Face model directory (no config.json).")
    config = read_json(path / "config.json", _damaged(path / "config.json", _RESTORE))
    if config.get("model_type") != "electra":
        kind = config.get("model_type")
        raise ConfigError(f"'{path}/config.json' describes a '{kind}' model, not ELECTRA.")
    missing = [theirs for ours, theirs in HF_CONFIG if ours in REQUIRED and theirs not in config]
    if missing:
        raise ConfigError(
            f"'{path}/config.json' has no {', '.join(missing)}; a Hugging Face ELECTRA config "
            "names the model's sizes (save it with transformers' save_pretrained)."
        )
    if (path / WEIGHTS_FILE).is_file():
        state = _load_safetensors(path / WEIGHTS_FILE, load_file)
    elif (path / TF_WEIGHTS_FILE).is_file():
        state = read_tf_weights(path / TF_WEIGHTS_FILE)
    else:
        hint = "."
        if (path / "pytorch_model.bin").is_file():
            hint = (
                " (only pytorch_model.bin, a pickle keras-electra does not open); re-save it "
                "with transformers' save_pretrained(DIR), which writes model.safetensors."
            )
        raise ConfigError(f"'{path}' has no {WEIGHTS_FILE} or {TF_WEIGHTS_FILE}{hint}")
    if not any(k.startswith("electra.") for k in state):  # a bare ElectraModel
        state = {f"electra.{k}": v for k, v in state.items()}
    return config, state


def torch_name(tf_name: str) -> tuple[str, bool]:
    """The PyTorch state-dict name of a TF variable of transformers' ELECTRA, and whether
    its value is transposed (a dense kernel).

    Examples:
        >>> torch_name("tf_electra_for_pre_training/electra/encoder/layer_._0/output/dense/kernel:0")
        ('electra.encoder.layer.0.output.dense.weight', True)
        >>> torch_name("tf_electra_for_pre_training/electra/embeddings/LayerNorm/gamma:0")
        ('electra.embeddings.LayerNorm.weight', False)
    """  # noqa: E501
    parts = tf_name.removesuffix(":0").split("/")[1:]  # the first is the model's own name
    parts = [re.sub(r"^layer_\._(\d+)$", r"layer.\1", part) for part in parts]
    leaf = parts[-1] if parts else ""
    parts[-1:] = [_LEAVES.get(leaf, leaf)]
    return ".".join(parts), leaf == "kernel"


def read_tf_weights(path: str | Path) -> dict[str, np.ndarray]:
    """The arrays of transformers' ``tf_model.h5`` under PyTorch state-dict names and layout.

    Raises:
        ConfigError: the file is not a Keras weights file of float arrays (one sentence).
    """
    import h5py

    path = Path(path)
    state: dict[str, np.ndarray] = {}
    try:
        with h5py.File(path, "r") as weights:
            layers = _names(weights, "layer_names")
            if not layers:
                raise ConfigError(
                    f"'{path}' is not a Keras weights file (it lists no layer_names); "
                    "pass the tf_model.h5 that transformers' save_pretrained wrote."
                )
            for layer in layers:
                group = weights[layer]
                for tf_name in _names(group, "weight_names"):
                    value = group.get(tf_name)
                    if not isinstance(value, h5py.Dataset) or value.dtype.kind != "f":
                        raise ConfigError(
                            f"'{path}' lists the weight '{tf_name}' but holds no array of "
                            "floats under that name; pass the tf_model.h5 that transformers' "
                            "save_pretrained wrote."
                        )
                    name, transpose = torch_name(tf_name)
                    state[name] = _torch_layout(name, np.asarray(value[()]), transpose)
    except OSError as error:  # not HDF5, truncated
        raise ConfigError(
            f"'{path}' cannot be read as HDF5 ({first_line(error)}); "
            + _damaged(path, "fetch the file again")
            + "."
        ) from None
    return state


def _torch_layout(name: str, array: np.ndarray, transpose: bool) -> np.ndarray:
    """``array`` as the PyTorch parameter ``name`` holds it. Some transformers releases
    built the attention's dense layers as ``EinsumDense``, whose weights are split into
    heads (q/k/v kernels ``[in, heads, head_dim]``, biases ``[heads, head_dim]``, the
    output kernel ``[heads, head_dim, out]``): joined back into ``Dense``'s shapes first."""
    if transpose and array.ndim == 3:
        output = ".attention.output.dense." in name
        array = array.reshape(-1, array.shape[-1]) if output else array.reshape(array.shape[0], -1)
    elif name.endswith(".bias") and array.ndim == 2:
        array = array.reshape(-1)
    return np.ascontiguousarray(array.T) if transpose else array


def _names(group, attribute: str) -> list[str]:
    """A Keras HDF5 name list: one attribute, or ``attribute0``, ``attribute1``, ... when
    it outgrew HDF5's 64 KB header limit."""
    if attribute in group.attrs:
        chunks = [group.attrs[attribute]]
    else:
        chunks, index = [], 0
        while f"{attribute}{index}" in group.attrs:
            chunks.append(group.attrs[f"{attribute}{index}"])
            index += 1
    return [n.decode("utf-8") if isinstance(n, bytes) else str(n) for c in chunks for n in c]


def _is_discriminator(config: dict, state: dict) -> bool:
    """Whether a directory holds an ``ElectraForPreTraining``: its config's
    ``architectures`` say so, or its weights hold the discriminator's head."""
    return "ElectraForPreTraining" in (config.get("architectures") or []) or any(
        k.startswith("discriminator_predictions.") for k in state
    )


def _check_layers(config: dict, state: dict, where) -> None:
    """Refuse a config.json whose layer count is not the weights' (the weights of the
    missing or extra layers would otherwise be named one by one)."""
    found = {
        int(m.group(1)) for k in state if (m := re.match(r"electra\.encoder\.layer\.(\d+)\.", k))
    }
    layers, said = (max(found) + 1 if found else 0), config["num_hidden_layers"]
    if found and layers != said:
        raise ConfigError(
            f"'{where}/config.json' says num_hidden_layers {said}, but the weights hold "
            f"{layers} layers; restore the config.json saved with these weights."
        )


def _vocabulary(path: Path) -> tuple[list[str], bool, str]:
    """The vocabulary of the Hugging Face directory ``path``, whether it is lowercased,
    and the file it was read from: ``vocab.txt`` (lowercasing from
    ``tokenizer_config.json``'s ``do_lower_case``), else the WordPiece ``tokenizer.json``
    that transformers 5's ``save_pretrained`` writes in its place
    (:func:`read_tokenizer_json`)."""
    settings = path / "tokenizer_config.json"
    spec = read_json(settings, _damaged(settings, _RESTORE), missing={})
    lowercase = bool(spec.get("do_lower_case", True))
    if (path / VOCAB_FILE).is_file():
        return read_vocab_file(path / VOCAB_FILE), lowercase, VOCAB_FILE
    if (path / TOKENIZER_FILE).is_file():
        tokens, said = read_tokenizer_json(path / TOKENIZER_FILE)
        return tokens, lowercase if said is None else said, TOKENIZER_FILE
    raise ConfigError(
        f"'{path}' has no {VOCAB_FILE} or {TOKENIZER_FILE}; copy the model's vocabulary next "
        "to it, or save its tokenizer there with transformers' save_pretrained."
    )


def read_vocab_file(path: str | Path) -> list[str]:
    """A ``vocab.txt``'s tokens, as :func:`keras_electra.data.load_vocab` reads them, also
    when it starts with a UTF-8 byte-order mark (which Windows editors write, and which
    would otherwise stick to the first token, BERT vocabularies' ``[PAD]``); a file in
    Hugging Face's cache that is not UTF-8 says which folder to delete."""
    from keras_electra.data import load_vocab, validate_vocab
    from keras_electra.data.files import is_remote

    if is_remote(str(path)) or not Path(path).is_file():
        return load_vocab(path)  # through tf.io.gfile, or the sentence for a missing file
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read().removeprefix("\ufeff")
    except UnicodeDecodeError as error:
        raise InputDataError(
            f"Vocabulary file '{path}' is not valid UTF-8 (byte {error.start}); "
            + _damaged(path, "save it as UTF-8 text")
            + "."
        ) from None
    tokens = [line.strip() for line in text.removesuffix("\n").split("\n")] if text else []
    validate_vocab(tokens, f"Vocabulary '{path}'")
    return tokens


def read_tokenizer_json(path: str | Path) -> tuple[list[str], bool | None]:
    """The vocabulary of a ``tokenizers`` ``tokenizer.json`` with a WordPiece model (its
    ``model.vocab``, token -> id, ordered by id; added tokens past it appended), and
    whether its normalizer lowercases (None when it has no normalizer).

    Raises:
        ConfigError: not JSON, not a WordPiece model (BPE, Unigram: ELECTRA's
            vocabularies are WordPiece), or ids that do not run 0..N-1 (one sentence).

    Examples:
        >>> import json, tempfile, os
        >>> path = os.path.join(tempfile.mkdtemp(), "tokenizer.json")
        >>> vocab = {"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "[SEP]": 3, "[MASK]": 4, "the": 5}
        >>> normalizer = {"type": "BertNormalizer", "lowercase": True}
        >>> with open(path, "w") as f:
        ...     json.dump({"normalizer": normalizer,
        ...                "model": {"type": "WordPiece", "vocab": vocab}}, f)
        >>> read_tokenizer_json(path)
        (['[PAD]', '[UNK]', '[CLS]', '[SEP]', '[MASK]', 'the'], True)
    """
    spec = read_json(path, _damaged(path, "save the tokenizer again with save_pretrained"))
    model = spec.get("model")
    kind = model.get("type") if isinstance(model, dict) else None
    vocab = model.get("vocab") if isinstance(model, dict) else None
    if kind != "WordPiece" or not isinstance(vocab, dict):
        raise ConfigError(
            f"'{path}' holds a {kind or 'tokenizer without a model type'} tokenizer, but "
            "ELECTRA conversion needs a WordPiece vocabulary (a BERT-style vocab.txt, or a "
            "tokenizer.json whose model is WordPiece); pass the model's own vocabulary."
        )
    ids, taken = dict(vocab), set(vocab.values())
    for added in spec.get("added_tokens") or []:  # tokens added past the model's vocabulary
        token = added.get("content") if isinstance(added, dict) else None
        if token is not None and token not in ids and added.get("id") not in taken:
            ids[token] = added.get("id")
    by_id = sorted((i, t) for t, i in ids.items() if isinstance(i, int) and isinstance(t, str))
    gaps = [n for n, (i, _) in enumerate(by_id) if i != n]
    if len(by_id) != len(ids) or gaps:
        where = f"id {by_id[gaps[0]][0]} where {gaps[0]} comes next" if gaps else "a non-integer id"
        raise ConfigError(
            f"The WordPiece vocabulary in '{path}' does not number its {len(ids)} tokens "
            f"0 to {len(ids) - 1} ({where}); save the tokenizer again with save_pretrained."
        )
    from keras_electra.data import validate_vocab

    tokens = [t for _, t in by_id]
    validate_vocab(tokens, f"The vocabulary in '{path}'")
    return tokens, _lowercases(spec.get("normalizer"))


def _lowercases(normalizer) -> bool | None:
    """Whether a ``tokenizer.json`` normalizer lowercases: a ``BertNormalizer`` with
    ``lowercase`` (its default is to), a ``Lowercase``, or a ``Sequence`` holding one;
    None for no normalizer."""
    if not isinstance(normalizer, dict):
        return None
    kind = normalizer.get("type")
    if kind == "BertNormalizer":
        return bool(normalizer.get("lowercase", True))
    if kind == "Sequence":
        return any(_lowercases(n) for n in normalizer.get("normalizers") or [])
    return kind == "Lowercase"


def _config(
    disc: dict, gen: dict | None, tokens, lowercase, source, vocab_file=VOCAB_FILE
) -> ElectraConfig:
    for name, values in (("discriminator", disc), ("generator", gen or {})):
        act = values.get("hidden_act", "gelu")
        if act != "gelu":
            raise ConfigError(
                f"The {name} in '{source}' uses hidden_act '{act}'; ELECTRA uses exact "
                "'gelu', the only activation this library implements."
            )
        if values.get("position_embedding_type", "absolute") != "absolute":
            raise ConfigError(
                f"The {name} in '{source}' uses relative positions; ELECTRA's are absolute."
            )
    if len(tokens) != disc["vocab_size"]:
        raise ConfigError(
            f"'{source}/{vocab_file}' has {len(tokens)} tokens but config.json says "
            f"vocab_size {disc['vocab_size']}."
        )
    values = {
        ours: disc[theirs] for ours, theirs in HF_CONFIG if theirs in disc or ours in REQUIRED
    }
    values.setdefault("embedding_size", disc["hidden_size"])
    values.update(lowercase=lowercase, **special_token_ids(tokens, source))
    if gen is None:
        return ElectraConfig.from_dict(values)
    for name in ("vocab_size", "embedding_size", "max_position_embeddings", "type_vocab_size"):
        if gen.get(name) != disc.get(name):
            raise ConfigError(
                f"The generator's {name} ({gen.get(name)}) differs from the discriminator's "
                f"({disc.get(name)}); ELECTRA's towers share one embedding block."
            )
    sizes = ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size")
    return config_with_generator(values, tuple(gen[k] for k in sizes), source)


def _check_shared(name: str, values: list[np.ndarray], disc, gen) -> None:
    if len(values) > 1 and not np.array_equal(values[0], values[1]):
        gap = float(np.max(np.abs(values[0] - values[1])))
        raise ConfigError(
            f"The generator's '{name}' differs from the discriminator's (max |difference| "
            f"{gap:.3g}), but a converted pair shares one embedding block: '{gen}' was "
            f"trained apart from '{disc}' or with its own embeddings; convert the "
            "discriminator alone."
        )


def _check_tied_output(state: dict, weights: dict, generator) -> None:
    head = state.get("generator_lm_head.weight")
    table = weights["electra/embeddings/word_embeddings"]
    if head is not None and not np.array_equal(head, table):
        raise ConfigError(
            f"'{generator}' has an output projection that is not its word embeddings; "
            "ELECTRA's generator ties them (tie_word_embeddings)."
        )


def _hf_config(config: ElectraConfig, tower: str) -> dict:
    sizes = config.discriminator_config() if tower == DISCRIMINATOR else config.generator_config()
    architecture = "ElectraForPreTraining" if tower == DISCRIMINATOR else "ElectraForMaskedLM"
    values = {theirs: getattr(config, ours) for ours, theirs in HF_CONFIG}
    values.update({theirs: getattr(sizes, ours) for ours, theirs in HF_CONFIG if ours in TOWER})
    return {
        "architectures": [architecture],
        "model_type": "electra",
        **values,
        "hidden_act": "gelu",
        "attention_probs_dropout_prob": config.dropout,
        "pad_token_id": config.pad_token_id,
        "position_embedding_type": "absolute",
        "tie_word_embeddings": True,
    }
