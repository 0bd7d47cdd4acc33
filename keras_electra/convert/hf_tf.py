"""transformers' TensorFlow weights (``tf_model.h5``) as a PyTorch-named state dict.

The Keras 2 weights file of ``TFElectraForPreTraining`` / ``TFElectraForMaskedLM``
names each variable from the model down; those names map one to one onto the PyTorch
state dict's, dense kernels transposed, so :mod:`keras_electra.convert.hf` reads either
file the same way. Only arrays are read, with h5py: nothing is deserialized or unpickled.

Examples:
    >>> torch_name("tf_electra_for_pre_training/electra/encoder/layer_._0/output/dense/kernel:0")
    ('electra.encoder.layer.0.output.dense.weight', True)
    >>> torch_name("tf_electra_for_pre_training/electra/embeddings/LayerNorm/gamma:0")
    ('electra.embeddings.LayerNorm.weight', False)
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from keras_electra.errors import ConfigError

WEIGHTS_FILE = "tf_model.h5"
# A variable's last name -> the PyTorch parameter's; kernels are transposed.
_LEAVES = {"kernel": "weight", "gamma": "weight", "beta": "bias", "embeddings": "weight"}


def torch_name(tf_name: str) -> tuple[str, bool]:
    """The PyTorch state-dict name of a TF variable of transformers' ELECTRA, and whether
    its value is transposed (a dense kernel)."""
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
        reason = str(error).strip().splitlines()[0][:200] if str(error).strip() else "unreadable"
        raise ConfigError(
            f"'{path}' cannot be read as HDF5 ({reason}); fetch the file again."
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
