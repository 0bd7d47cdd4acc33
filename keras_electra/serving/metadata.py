"""Model metadata in a plain-dict form shared by the gRPC and REST clients.

TF Serving returns a model's ``SignatureDefMap`` (gRPC ``GetModelMetadata``,
REST ``GET .../metadata``). Both clients reduce it to::

    {"model_name": "electra", "version": 3, "signatures": {
        "serving_default": {
            "method_name": "tensorflow/serving/predict",
            "inputs": {"text": {"dtype": "DT_STRING", "shape": [-1]}},
            "outputs": {"replaced_prob": {"dtype": "DT_FLOAT", "shape": [-1, -1]}, ...}},
        ...}}

``shape`` is ``None`` for a tensor of unknown rank; ``-1`` marks an unknown
dimension. TensorFlow's internal ``__saved_model_init_op`` entry is left out.
This module needs no TensorFlow import.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

TensorSpecDict = dict[str, Any]
SignatureDict = dict[str, Any]

DEFAULT_SIGNATURE = "serving_default"
"""The signature TF Serving runs when a request names none."""


def tensor_info_to_dict(info: Mapping[str, Any]) -> TensorSpecDict:
    """Reduces a JSON ``TensorInfo`` to its dtype and shape.

    Args:
        info: A ``TensorInfo`` in protobuf JSON form (snake_case or
            camelCase keys).

    Returns:
        ``{"dtype": "DT_...", "shape": [dims] or None}``.

    Examples:
        >>> tensor_info_to_dict({"dtype": "DT_STRING", "tensor_shape": {"dim": [{"size": "-1"}]}})
        {'dtype': 'DT_STRING', 'shape': [-1]}
    """
    shape_json = info.get("tensor_shape", info.get("tensorShape", {})) or {}
    unknown_rank = shape_json.get("unknown_rank", shape_json.get("unknownRank", False))
    shape = None if unknown_rank else [int(dim.get("size", 0)) for dim in shape_json.get("dim", [])]
    return {"dtype": info.get("dtype", "DT_INVALID"), "shape": shape}


def signature_defs_to_dict(signature_defs: Mapping[str, Any]) -> dict[str, SignatureDict]:
    """Reduces a JSON ``SignatureDefMap``'s ``signature_def`` map to plain dicts.

    Args:
        signature_defs: Signature name to ``SignatureDef`` in protobuf JSON form.

    Returns:
        Signature name to ``{"method_name", "inputs", "outputs"}``; internal
        signatures (names starting with ``__``) are dropped.

    Examples:
        >>> signature_defs_to_dict({"serving_default": {"method_name": "tensorflow/serving/predict",
        ...     "inputs": {}, "outputs": {}}})["serving_default"]["method_name"]
        'tensorflow/serving/predict'
    """
    result: dict[str, SignatureDict] = {}
    for name, signature in sorted(signature_defs.items()):
        if name.startswith("__"):
            continue
        method = signature.get("method_name", signature.get("methodName", ""))
        result[name] = {"method_name": method}
        for part in ("inputs", "outputs"):
            tensors = sorted(signature.get(part, {}).items())
            result[name][part] = {key: tensor_info_to_dict(info) for key, info in tensors}
    return result


def metadata_to_dict(response: Mapping[str, Any]) -> dict[str, Any]:
    """Reduces a JSON ``GetModelMetadataResponse`` (REST shape) to a plain dict.

    Args:
        response: ``{"model_spec": {...}, "metadata": {"signature_def":
            {"signature_def": {...}}}}`` as TF Serving's REST API returns it.

    Returns:
        ``{"model_name", "version", "signatures"}`` (see the module docstring).

    Examples:
        >>> metadata_to_dict({"model_spec": {"name": "electra", "version": "2"},
        ...     "metadata": {"signature_def": {"signature_def": {}}}})
        {'model_name': 'electra', 'version': 2, 'signatures': {}}
    """
    spec = response.get("model_spec", {})
    version = spec.get("version")
    if isinstance(version, Mapping):  # Int64Value rendered as an object by some encoders
        version = version.get("value")
    signature_map = response.get("metadata", {}).get("signature_def", {})
    return {
        "model_name": spec.get("name", ""),
        "version": int(version) if version not in (None, "") else None,
        "signatures": signature_defs_to_dict(signature_map.get("signature_def", {})),
    }
