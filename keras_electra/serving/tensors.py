"""numpy arrays as TF Serving's gRPC wire formats, ``TensorProto`` (through
``tf.make_tensor_proto`` and ``tf.make_ndarray``; strings as object arrays of ``bytes``)
and ``tf.train.Example``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import tensorflow as tf
from tensorflow.core.example import example_pb2, feature_pb2
from tensorflow.core.framework import tensor_pb2, types_pb2

from keras_electra.serving.rest_client import as_array


def dtype_name(dtype: int) -> str:
    """Returns the name of a TF ``DataType`` enum value, e.g. ``"DT_STRING"``.

    Examples:
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
    """An array-like as a ``TensorProto``: ``str`` (UTF-8 encoded) and ``bytes`` (whole,
    trailing NULs included) give ``DT_STRING``, numbers keep their numpy dtype (float64 is
    ``DT_DOUBLE``: pass float32 for ``DT_FLOAT``); else one sentence as a ``TypeError``.

    Examples:
        >>> proto = ndarray_to_tensor_proto(["hello"])
        >>> (dtype_name(proto.dtype), list(proto.string_val))
        ('DT_STRING', [b'hello'])
    """
    array = as_array(value)
    if array.dtype.kind == "O":
        for item in array.reshape(-1):
            _to_bytes(item)  # one sentence for a non-string element
    try:
        return tf.make_tensor_proto(array)
    except (TypeError, ValueError):
        raise TypeError(f"TF Serving has no tensor type for numpy dtype {array.dtype}") from None


def tensor_proto_to_ndarray(proto: tensor_pb2.TensorProto) -> np.ndarray:
    """A ``TensorProto`` as numpy (as TensorFlow reads it: fewer values than elements repeat
    the last, none are zeros); ``DT_STRING`` gives an object array of ``bytes``.

    Examples:
        >>> tensor_proto_to_ndarray(ndarray_to_tensor_proto(np.array([[1, 2]], np.int32)))
        array([[1, 2]], dtype=int32)
    """
    try:
        return tf.make_ndarray(proto)
    except TypeError:
        raise TypeError(f"cannot convert a {dtype_name(proto.dtype)} tensor to numpy") from None


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
    """A ``tf.train.Example`` as TF Serving's REST API builds one: feature name to value or
    list of values, ``str``/``bytes`` as a bytes list, ``int``/``bool`` int64, ``float`` float.

    Examples:
        >>> example = make_example({"text": "great movie", "stars": 5})
        >>> list(example.features.feature["text"].bytes_list.value)
        [b'great movie']
    """
    feature = {name: _feature(value) for name, value in features.items()}
    return example_pb2.Example(features=feature_pb2.Features(feature=feature))
