"""JSON encoding of tensors for TF Serving's REST API (numpy and stdlib only).

A tensor is nested JSON lists; ``str`` values go as JSON strings, ``bytes`` always as
``{"b64": ...}`` objects, so any byte string arrives unchanged.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from typing import Any

import numpy as np

# TF DataType names (as in metadata) mapped to the numpy dtype of a decoded tensor.
NUMPY_DTYPES: dict[str, Any] = {
    "DT_FLOAT": np.float32,
    "DT_DOUBLE": np.float64,
    "DT_HALF": np.float16,
    "DT_INT8": np.int8,
    "DT_INT16": np.int16,
    "DT_INT32": np.int32,
    "DT_INT64": np.int64,
    "DT_UINT8": np.uint8,
    "DT_UINT16": np.uint16,
    "DT_UINT32": np.uint32,
    "DT_UINT64": np.uint64,
    "DT_BOOL": np.bool_,
    "DT_STRING": object,
}


def as_array(value: Any) -> np.ndarray:
    """Converts an array-like to numpy, keeping byte strings intact.

    Lists of ``bytes`` or ``str`` become object arrays: numpy's fixed-width
    ``S`` dtype would silently drop trailing NUL bytes, and it cannot hold a
    mix of ``str`` and non-ASCII ``bytes``.

    Args:
        value: A numpy array, a (nested) list, or a scalar.

    Returns:
        The array; string data has dtype ``object`` or a unicode dtype.

    Examples:
        >>> as_array([b"a\\x00", b"b"]).dtype
        dtype('O')
    """
    if isinstance(value, np.ndarray):
        return value.astype(object) if value.dtype.kind == "S" else value
    if any(isinstance(item, (str, bytes)) for item in _flatten(value)):
        return _object_fill(value, _nested_shape(value))
    return np.asarray(value)


def _nested_shape(value: Any) -> tuple[int, ...]:
    if isinstance(value, (list, tuple)):
        return (len(value), *(_nested_shape(value[0]) if value else ()))
    return ()


def _encode_scalar(value: Any) -> Any:
    if isinstance(value, bytes):
        return {"b64": base64.b64encode(value).decode("ascii")}
    if isinstance(value, str):
        return value
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (np.float32, np.float16)):
        # str() of a numpy float is the shortest decimal that round-trips in its own type.
        return float(str(value))
    if isinstance(value, (float, np.floating)):
        return float(value)
    raise TypeError(f"cannot encode a {type(value).__name__} value as a JSON tensor element")


def _encode_nested(array: Any) -> Any:
    if not isinstance(array, np.ndarray):
        return _encode_scalar(array)
    if array.ndim == 0:
        return _encode_scalar(array[()])
    return [_encode_nested(item) for item in array]


def encode_tensor(value: Any) -> Any:
    """Encodes an array-like as TF Serving's JSON tensor value.

    Args:
        value: A numpy array, a (nested) list, or a scalar. ``str`` elements
            become JSON strings, ``bytes`` elements ``{"b64": ...}`` objects,
            float32 elements their shortest float32 decimal.

    Returns:
        A JSON-serializable nested list (or scalar).

    Examples:
        >>> encode_tensor(np.array([0.1, 2.0], np.float32))
        [0.1, 2.0]
        >>> encode_tensor([b"\\xff"])
        [{'b64': '/w=='}]
    """
    return _encode_nested(as_array(value))


def _decode_nested(value: Any) -> Any:
    if isinstance(value, list):
        return [_decode_nested(item) for item in value]
    if isinstance(value, Mapping):
        if set(value) == {"b64"} and isinstance(value["b64"], str):
            return base64.b64decode(value["b64"].encode("ascii"), validate=True)
        raise ValueError(f"a JSON object that is not a b64 value appears inside a tensor: {value}")
    if isinstance(value, str):
        # Response bodies are decoded with surrogateescape, so this restores raw bytes.
        return value.encode("utf-8", "surrogateescape")
    return value


def _infer_dtype(flat: list[Any]) -> Any:
    if any(isinstance(item, bytes) for item in flat):
        return object
    if flat and all(isinstance(item, bool) for item in flat):
        return np.bool_
    if any(isinstance(item, float) for item in flat):
        return np.float32
    return np.int64


def _flatten(value: Any) -> list[Any]:
    if isinstance(value, (list, tuple)):
        return [leaf for item in value for leaf in _flatten(item)]
    return [value]


def decode_tensor(value: Any, dtype: str | None = None) -> np.ndarray:
    """Decodes a JSON tensor value from a TF Serving response into numpy.

    Args:
        value: The parsed JSON value (nested lists, numbers, strings or
            ``{"b64": ...}`` objects).
        dtype: The TF dtype name of the tensor (``"DT_FLOAT"``, ...). If
            ``None``, it is inferred: strings give bytes, decimals float32,
            whole numbers int64.

    Returns:
        The array; strings come back as an object array of ``bytes``.

    Examples:
        >>> decode_tensor([[1.5, 2.0]], "DT_FLOAT").dtype
        dtype('float32')
        >>> decode_tensor(["caf\\u00e9"])[0]
        b'caf\\xc3\\xa9'
    """
    decoded = _decode_nested(value)
    np_dtype = NUMPY_DTYPES.get(dtype) if dtype else _infer_dtype(_flatten(decoded))
    if np_dtype is None:
        raise ValueError(f"the REST client cannot decode tensors of type {dtype}")
    if np_dtype is object:
        return _object_fill(decoded, _nested_shape(decoded))
    return np.array(decoded, dtype=np_dtype)


def _object_fill(nested: Any, shape: tuple[int, ...]) -> np.ndarray:
    """Builds an object array of ``shape`` from nested lists without numpy guessing."""
    out = np.empty(shape, dtype=object)

    def fill(item: Any, depth: int, index: tuple[int, ...]) -> None:
        is_list = isinstance(item, (list, tuple))
        if depth == len(shape):
            if is_list:
                raise ValueError(f"a tensor must be a regular nested list, not shape {shape}+")
            out[index] = item
            return
        if not is_list or len(item) != shape[depth]:
            raise ValueError(f"a tensor must be a regular nested list; it does not fit {shape}")
        for i, child in enumerate(item):
            fill(child, depth + 1, (*index, i))

    fill(nested, 0, ())
    return out
