"""Conversion between numpy arrays, ``TensorProto`` and ``tf.train.Example``.

These are the wire formats of TF Serving's gRPC API. Numbers are written to
the typed repeated fields (``float_val``, ``int_val``, ...) the way TF Serving
writes its responses; both those fields and ``tensor_content`` are read back.
String tensors are object arrays of ``bytes``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from tensorflow.core.example import example_pb2, feature_pb2
from tensorflow.core.framework import tensor_pb2, tensor_shape_pb2, types_pb2

from keras_electra.serving.json_codec import NUMPY_DTYPES, as_array

# numpy dtype -> (TF DataType, TensorProto field holding the values).
_FIELDS: dict[np.dtype, tuple[int, str]] = {
    np.dtype(np.float32): (types_pb2.DT_FLOAT, "float_val"),
    np.dtype(np.float64): (types_pb2.DT_DOUBLE, "double_val"),
    np.dtype(np.float16): (types_pb2.DT_HALF, "half_val"),
    np.dtype(np.int8): (types_pb2.DT_INT8, "int_val"),
    np.dtype(np.int16): (types_pb2.DT_INT16, "int_val"),
    np.dtype(np.int32): (types_pb2.DT_INT32, "int_val"),
    np.dtype(np.int64): (types_pb2.DT_INT64, "int64_val"),
    np.dtype(np.uint8): (types_pb2.DT_UINT8, "int_val"),
    np.dtype(np.uint16): (types_pb2.DT_UINT16, "int_val"),
    np.dtype(np.uint32): (types_pb2.DT_UINT32, "uint32_val"),
    np.dtype(np.uint64): (types_pb2.DT_UINT64, "uint64_val"),
    np.dtype(np.bool_): (types_pb2.DT_BOOL, "bool_val"),
}
_FIELD_BY_DTYPE = {dtype: field for dtype, field in _FIELDS.values()}
_FIELD_BY_DTYPE[types_pb2.DT_STRING] = "string_val"


def dtype_name(dtype: int) -> str:
    """Returns the name of a TF ``DataType`` enum value, e.g. ``"DT_STRING"``.

    Args:
        dtype: A ``types_pb2.DataType`` value.

    Returns:
        The enum name.

    Example:
        >>> dtype_name(types_pb2.DT_FLOAT)
        'DT_FLOAT'
    """
    return types_pb2.DataType.Name(dtype)


def _to_bytes(item: Any) -> bytes:
    if isinstance(item, bytes):
        return item
    if isinstance(item, str):
        return item.encode("utf-8")
    raise TypeError(f"a string tensor cannot hold a {type(item).__name__} value")


def ndarray_to_tensor_proto(value: Any) -> tensor_pb2.TensorProto:
    """Converts an array-like to a ``TensorProto``.

    Args:
        value: A numpy array, (nested) list or scalar. ``str`` and ``bytes``
            elements give a ``DT_STRING`` tensor (``str`` is UTF-8 encoded);
            numeric arrays keep their numpy dtype (float64 gives
            ``DT_DOUBLE``: pass float32 arrays for ``DT_FLOAT`` inputs).

    Returns:
        The tensor proto.

    Example:
        >>> proto = ndarray_to_tensor_proto(["hello"])
        >>> (dtype_name(proto.dtype), list(proto.string_val))
        ('DT_STRING', [b'hello'])
    """
    array = as_array(value)
    proto = tensor_pb2.TensorProto(
        tensor_shape=tensor_shape_pb2.TensorShapeProto(
            dim=[tensor_shape_pb2.TensorShapeProto.Dim(size=size) for size in array.shape]
        )
    )
    if array.dtype.kind in "OU":
        proto.dtype = types_pb2.DT_STRING
        proto.string_val.extend(_to_bytes(item) for item in array.reshape(-1))
        return proto
    if array.dtype not in _FIELDS:
        raise TypeError(f"TF Serving has no tensor type for numpy dtype {array.dtype}")
    proto.dtype, field = _FIELDS[array.dtype]
    flat = array.reshape(-1)
    if field == "half_val":
        flat = flat.view(np.uint16)
    getattr(proto, field).extend(flat.tolist())
    return proto


def tensor_proto_to_ndarray(proto: tensor_pb2.TensorProto) -> np.ndarray:
    """Converts a ``TensorProto`` to numpy.

    Args:
        proto: The tensor, with values in ``tensor_content`` or in the typed
            field for its dtype. As in TensorFlow, fewer values than elements
            means the last value repeats, and no values means zeros.

    Returns:
        The array; ``DT_STRING`` gives an object array of ``bytes``.

    Example:
        >>> tensor_proto_to_ndarray(ndarray_to_tensor_proto(np.array([[1, 2]], np.int32)))
        array([[1, 2]], dtype=int32)
    """
    name = dtype_name(proto.dtype)
    if name not in NUMPY_DTYPES:
        raise TypeError(f"cannot convert a {name} tensor to numpy")
    np_dtype = np.dtype(NUMPY_DTYPES[name])
    shape = tuple(dim.size for dim in proto.tensor_shape.dim)
    size = int(np.prod(shape, dtype=np.int64))
    if proto.tensor_content and proto.dtype != types_pb2.DT_STRING:
        return np.frombuffer(proto.tensor_content, dtype=np_dtype).reshape(shape).copy()
    values: list[Any] = list(getattr(proto, _FIELD_BY_DTYPE[proto.dtype]))
    if len(values) > size:
        raise ValueError(f"a {name} tensor of shape {list(shape)} holds {len(values)} values")
    if len(values) < size:
        fill = values[-1] if values else (b"" if np_dtype.kind == "O" else 0)
        values.extend([fill] * (size - len(values)))
    if proto.dtype == types_pb2.DT_HALF:
        return np.array(values, dtype=np.uint16).view(np.float16).reshape(shape)
    if np_dtype.kind == "O":
        array = np.empty(size, dtype=object)
        array[:] = values
        return array.reshape(shape)
    return np.array(values, dtype=np_dtype).reshape(shape)


def _feature(value: Any) -> feature_pb2.Feature:
    items: Sequence[Any] = value if isinstance(value, (list, tuple)) else [value]
    if all(isinstance(item, (str, bytes)) for item in items):
        return feature_pb2.Feature(
            bytes_list=feature_pb2.BytesList(value=[_to_bytes(item) for item in items])
        )
    if all(isinstance(item, (bool, int, np.integer, np.bool_)) for item in items):
        return feature_pb2.Feature(int64_list=feature_pb2.Int64List(value=[int(i) for i in items]))
    if all(isinstance(item, (float, int, np.floating, np.integer)) for item in items):
        return feature_pb2.Feature(
            float_list=feature_pb2.FloatList(value=[float(i) for i in items])
        )
    raise TypeError(f"an Example feature cannot hold {value!r}")


def make_example(features: Mapping[str, Any]) -> example_pb2.Example:
    """Builds a ``tf.train.Example`` the way TF Serving's REST API does.

    Args:
        features: Feature name to value or list of values. ``str``/``bytes``
            give a bytes list, ``int``/``bool`` an int64 list, ``float`` a
            float list.

    Returns:
        The example proto.

    Example:
        >>> example = make_example({"text": "great movie", "stars": 5})
        >>> list(example.features.feature["text"].bytes_list.value)
        [b'great movie']
    """
    return example_pb2.Example(
        features=feature_pb2.Features(
            feature={name: _feature(value) for name, value in features.items()}
        )
    )
