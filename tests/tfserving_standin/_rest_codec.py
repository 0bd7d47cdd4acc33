"""TF Serving's REST JSON <-> ``tensorflow.serving`` request/response protos.

Follows TF Serving's REST API document and its JSON rules
(``util/json_tensor.cc``): row and columnar predict, ``{"b64": ...}`` binary
values, ``_bytes`` output names, float32 numbers printed at float32 precision,
``results`` for classify and regress. Used by the in-process test server.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Mapping
from typing import Any

import numpy as np
from google.protobuf import json_format
from tensorflow_serving.apis import (
    classification_pb2,
    get_model_metadata_pb2,
    get_model_status_pb2,
    model_pb2,
    predict_pb2,
    regression_pb2,
)

from keras_electra.serving.errors import ServingError
from keras_electra.serving.export_reader import DEFAULT_SIGNATURE
from keras_electra.serving.rest_client import NUMPY_DTYPES
from keras_electra.serving.tensors import (
    dtype_name,
    make_example,
    ndarray_to_tensor_proto,
    tensor_proto_to_ndarray,
)

from .servable import SIGNATURE_DEF_FIELD, ServedModel


def _invalid(message: str) -> ServingError:
    return ServingError(message, code="INVALID_ARGUMENT")


def _json_text(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


def _json_type(value: Any) -> str:
    if value is None:
        return "Null"
    if isinstance(value, bool):
        return "True" if value else "False"
    if isinstance(value, (int, float)):
        return "Number"
    if isinstance(value, str):
        return "String"
    return "Array" if isinstance(value, list) else "Object"


def _is_b64(value: Any) -> bool:
    return isinstance(value, dict) and set(value) == {"b64"} and isinstance(value["b64"], str)


def _b64_decode(value: dict[str, str]) -> bytes:
    try:
        return base64.b64decode(value["b64"].encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError):
        raise _invalid("Unable to base64 decode") from None


# -- JSON -> tensors ----------------------------------------------------------------


def _json_scalar(value: Any, dtype: str) -> Any:
    def type_error() -> ServingError:
        return _invalid(
            f"JSON Value: {_json_text(value)} Type: {_json_type(value)} is not of expected "
            f"type: {dtype[3:].lower()}"
        )

    if dtype == "DT_STRING":
        if isinstance(value, str):
            return value.encode("utf-8", "surrogateescape")
        if _is_b64(value):
            return _b64_decode(value)
        raise type_error()
    if isinstance(value, dict):
        raise type_error()
    if dtype == "DT_BOOL":
        if not isinstance(value, bool):
            raise type_error()
        return value
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise type_error()
    if dtype in ("DT_FLOAT", "DT_DOUBLE", "DT_HALF"):
        return float(value)
    if not isinstance(value, int):
        raise type_error()
    return value


def _dense_shape(value: Any) -> tuple[int, ...]:
    if not isinstance(value, list):
        return ()
    return (len(value), *(_dense_shape(value[0]) if value else ()))


def json_to_array(value: Any, dtype: str) -> np.ndarray:
    """Converts a JSON tensor value to numpy with TF Serving's checks.

    Args:
        value: The JSON value (nested lists of numbers, strings or b64 objects).
        dtype: The signature's dtype name for this input, e.g. ``"DT_STRING"``.

    Returns:
        The array (object array of bytes for strings).

    Raises:
        ServingError: ``INVALID_ARGUMENT`` for a type or shape mismatch.

    Example:
        >>> json_to_array(["a", {"b64": "/w=="}], "DT_STRING")
        array([b'a', b'\\xff'], dtype=object)
    """
    if dtype not in NUMPY_DTYPES:
        raise ServingError(
            f"Conversion of JSON to type {dtype} is not supported", code="UNIMPLEMENTED"
        )
    shape = _dense_shape(value)
    flat: list[Any] = []

    def fill(item: Any, level: int) -> None:
        if not isinstance(item, list):
            if level != len(shape):
                raise _invalid(
                    f"JSON Value: {_json_text(item)} found at incorrect level: {level + 1} in "
                    f"the JSON DOM. Expected at level: {len(shape)}"
                )
            flat.append(_json_scalar(item, dtype))
            return
        if level >= len(shape):
            raise _invalid(f"Encountered list at unexpected level: {level} expected < {len(shape)}")
        if len(item) != shape[level]:
            raise _invalid(
                f"Encountered list at unexpected size: {len(item)} at level: {level} "
                f"expected size: {shape[level]}"
            )
        for child in item:
            fill(child, level + 1)

    fill(value, 0)
    np_dtype = NUMPY_DTYPES[dtype]
    if np_dtype is object:
        array = np.empty(len(flat), dtype=object)
        array[:] = flat
        return array.reshape(shape)
    try:
        return np.array(flat, dtype=np_dtype).reshape(shape)
    except OverflowError:
        raise _invalid(f"A JSON value does not fit type {dtype[3:].lower()}") from None


def _instances_to_inputs(
    instances: list[Any], input_types: Mapping[str, str]
) -> dict[str, np.ndarray]:
    first = instances[0]
    as_objects = isinstance(first, dict) and not _is_b64(first)
    if not as_objects and len(input_types) > 1:
        raise _invalid(
            "instances is a plain list, but expecting list of objects as multiple input "
            "tensors required as per tensorinfo_map"
        )
    columns: dict[str, list[np.ndarray]] = {name: [] for name in input_types}
    for index, item in enumerate(instances):
        item_is_object = isinstance(item, dict) and not _is_b64(item)
        if as_objects != item_is_object:
            kind = "object but got list" if as_objects else "value/list but got object"
            raise _invalid(f"Expecting {kind} at item {index} of input list")
        values = item if as_objects else {next(iter(input_types)): item}
        if set(values) != set(input_types):
            raise _invalid(
                f"Failed to process element: {index} of 'instances' list. JSON object: "
                f"{_json_text(item)} keys must be equal to: {','.join(sorted(input_types))}"
            )
        for name, value in values.items():
            array = json_to_array(value, input_types[name])
            if columns[name] and columns[name][0].shape != array.shape:
                raise _invalid(
                    f"Failed to process element: {index} key: {name} of 'instances' list. "
                    f"Expecting shape {list(columns[name][0].shape)} but got: {list(array.shape)}"
                )
            columns[name].append(array)
    return {name: np.stack(arrays) for name, arrays in columns.items()}


def _columns_to_inputs(inputs: Any, input_types: Mapping[str, str]) -> dict[str, np.ndarray]:
    if not isinstance(inputs, dict) or _is_b64(inputs):
        if len(input_types) > 1:
            raise _invalid(
                "inputs is a plain value/list, but expecting an object as multiple input "
                "tensors required as per tensorinfo_map"
            )
        name = next(iter(input_types))
        return {name: json_to_array(inputs, input_types[name])}
    result = {}
    for name, dtype in sorted(input_types.items()):
        if name not in inputs:
            raise _invalid(f"Missing named input: {name} in 'inputs' object.")
        result[name] = json_to_array(inputs[name], dtype)
    return result


def _parse_body(body: bytes) -> dict[str, Any]:
    if not body:
        raise _invalid("JSON Parse error: The document is empty")
    try:
        document = json.loads(body.decode("utf-8", "surrogateescape"))
    except json.JSONDecodeError as err:
        raise _invalid(f"JSON Parse error: {err.msg} at offset: {err.pos}") from None
    if not isinstance(document, dict):
        raise _invalid(f"JSON Value: {_json_text(document)} Is not object")
    signature_name = document.get("signature_name", "")
    if not isinstance(signature_name, str):
        raise _invalid(
            f"JSON Value: {_json_text(document)} not formatted correctly. 'signature_name' key "
            "must be a string value."
        )
    return document


def predict_request_from_json(
    body: bytes, spec: model_pb2.ModelSpec, model: ServedModel
) -> tuple[predict_pb2.PredictRequest, str]:
    """Builds a ``PredictRequest`` from a REST body; returns it with the format used.

    Raises:
        ServingError: For a malformed body, as TF Serving reports it.
    """
    document = _parse_body(body)
    request = predict_pb2.PredictRequest(model_spec=spec)
    request.model_spec.signature_name = document.get("signature_name", "")
    _, runner = model.resolve(request.model_spec)
    signature_name = request.model_spec.signature_name or DEFAULT_SIGNATURE
    if signature_name not in runner.signatures:
        raise _invalid(f'Serving signature name: "{signature_name}" not found in signature def')
    input_types = {
        name: dtype_name(info.dtype)
        for name, info in runner.signatures[signature_name].inputs.items()
    }
    if not input_types:
        raise _invalid(f"Failed to get input map for signature: {signature_name}")
    if "instances" in document and "inputs" in document:
        raise _invalid("Not formatted correctly expecting only one of 'inputs' or 'instances' keys")
    if "instances" in document:
        instances = document["instances"]
        if not isinstance(instances, list):
            raise _invalid("Excepting 'instances' to be an list/array")
        if not instances:
            raise _invalid("No values in 'instances' array")
        arrays, request_format = _instances_to_inputs(instances, input_types), "row"
    elif "inputs" in document:
        arrays, request_format = _columns_to_inputs(document["inputs"], input_types), "columnar"
    else:
        raise _invalid("Missing 'inputs' or 'instances' key")
    for name, array in arrays.items():
        request.inputs[name].CopyFrom(ndarray_to_tensor_proto(array))
    return request, request_format


def _feature_kind(value: Any, name: str) -> str:
    if value is None or isinstance(value, list) or (isinstance(value, dict) and not _is_b64(value)):
        raise _invalid(
            f"Feature: {name} has element with unexpected JSON type: {_json_type(value)}"
        )
    if isinstance(value, (str, dict)):
        return "bytes"
    if isinstance(value, float):
        return "float"
    return "int64"


def _example_from_json(value: Any) -> Any:
    if not isinstance(value, dict):
        raise _invalid(f"Example must be JSON object but got JSON {_json_type(value)}")
    features: dict[str, Any] = {}
    for name, content in value.items():
        items = content if isinstance(content, list) else [content]
        kinds = {_feature_kind(item, name) for item in items}
        if len(kinds) > 1:
            raise _invalid(f"Unexpected element type in feature: {name} expecting type: {kinds}")
        converted = []
        for item in items:
            if _is_b64(item):
                converted.append(_b64_decode(item))
            elif isinstance(item, str):
                converted.append(item.encode("utf-8", "surrogateescape"))
            elif isinstance(item, bool):
                converted.append(int(item))
            else:
                converted.append(item)
        features[name] = converted
    return make_example(features)


def _fill_examples(document: dict, request: Any) -> Any:
    """Fills a Classification or RegressionRequest's signature name and examples from a
    parsed REST body, as TF Serving's one parser for both does (whose message for missing
    examples says "classify" for regress too)."""
    request.model_spec.signature_name = document.get("signature_name", "")
    examples = document.get("examples")
    if examples is None:
        raise _invalid("When method is classify, key 'examples' is expected and was not found")
    if not isinstance(examples, list):
        raise _invalid("Expecting 'examples' value to be an list/array")
    if not examples:
        raise _invalid("'examples' value is an empty array")
    if "context" in document:
        target = request.input.example_list_with_context
        target.context.CopyFrom(_example_from_json(document["context"]))
    else:
        target = request.input.example_list
    for example in examples:
        target.examples.add().CopyFrom(_example_from_json(example))
    return request


def classification_request_from_json(
    body: bytes, spec: model_pb2.ModelSpec
) -> classification_pb2.ClassificationRequest:
    """Builds a ``ClassificationRequest`` from a REST ``:classify`` body.

    Raises:
        ServingError: For a malformed body, as TF Serving reports it.
    """
    request = classification_pb2.ClassificationRequest(model_spec=spec)
    return _fill_examples(_parse_body(body), request)


def regression_request_from_json(
    body: bytes, spec: model_pb2.ModelSpec
) -> regression_pb2.RegressionRequest:
    """Builds a ``RegressionRequest`` from a REST ``:regress`` body (the format of
    ``:classify``'s).

    Raises:
        ServingError: For a malformed body, as TF Serving reports it.
    """
    request = regression_pb2.RegressionRequest(model_spec=spec)
    return _fill_examples(_parse_body(body), request)


# -- tensors -> JSON ----------------------------------------------------------------


def _decimal(value: float, precision: int, np_type: Any) -> float:
    """Formats a float like TF Serving: 6 significant digits unless that does not round-trip."""
    if not np.isfinite(value):
        return float(value)
    text = f"{value:g}"
    if np_type(text) != np_type(value):
        text = f"{value:.{precision}g}"
    return float(text)


def _json_value(array: np.ndarray, as_bytes: bool) -> Any:
    """Nested JSON lists for a tensor; strings raw (or b64 for ``_bytes`` names)."""

    def convert(item: Any) -> Any:
        if isinstance(item, bytes):
            if as_bytes:
                return {"b64": base64.b64encode(item).decode("ascii")}
            return item.decode("utf-8", "surrogateescape")  # written back as the raw bytes
        if array.dtype in (np.float32, np.float16):
            return _decimal(item, 9, np.float32)
        if array.dtype == np.float64:
            return _decimal(item, 17, np.float64)
        return item  # bool and int are already JSON-ready after tolist()

    def walk(item: Any) -> Any:
        return [walk(child) for child in item] if isinstance(item, list) else convert(item)

    return walk(array.tolist())


def predict_response_to_json(response: predict_pb2.PredictResponse, request_format: str) -> Any:
    """Writes a ``PredictResponse`` as TF Serving's ``predictions``/``outputs`` JSON."""
    outputs = {
        name: tensor_proto_to_ndarray(proto) for name, proto in sorted(response.outputs.items())
    }
    if not outputs:
        raise _invalid("Cannot convert empty tensor map to JSON")
    single = len(outputs) == 1
    if request_format == "columnar":
        values = {
            name: _json_value(array, name.endswith("_bytes")) for name, array in outputs.items()
        }
        return {"outputs": next(iter(values.values())) if single else values}
    batch = None
    for name, array in outputs.items():
        if array.ndim == 0:
            raise _invalid(f"Tensor name: {name} has no shape information ")
        if batch is not None and array.shape[0] != batch:
            raise _invalid(
                f"Tensor name: {name} has inconsistent batch size: {array.shape[0]} "
                f"expecting: {batch}"
            )
        batch = array.shape[0]
    rows = []
    for i in range(batch or 0):
        row = {
            name: _json_value(array[i], name.endswith("_bytes")) for name, array in outputs.items()
        }
        rows.append(next(iter(row.values())) if single else row)
    return {"predictions": rows}


def classification_response_to_json(response: classification_pb2.ClassificationResponse) -> Any:
    """Writes a ``ClassificationResponse`` as TF Serving's ``{"results": ...}`` JSON."""
    if not response.result.classifications:
        raise _invalid("Cannot convert empty ClassificationResults to JSON")
    return {
        "results": [
            [[item.label, _decimal(item.score, 9, np.float32)] for item in result.classes]
            for result in response.result.classifications
        ]
    }


def regression_response_to_json(response: regression_pb2.RegressionResponse) -> Any:
    """Writes a ``RegressionResponse`` as TF Serving's ``{"results": [...]}`` JSON, a
    value per example (``util/json_tensor.cc``; its REST document shows ``result``, but
    the server writes ``results``, as for classify)."""
    if not response.result.regressions:
        raise _invalid("Cannot convert empty RegressionResults to JSON")
    return {
        "results": [_decimal(item.value, 9, np.float32) for item in response.result.regressions]
    }


def _proto_json(message: Any) -> Any:
    return json_format.MessageToDict(
        message, always_print_fields_with_no_presence=True, preserving_proto_field_name=True
    )


def metadata_response_to_json(response: get_model_metadata_pb2.GetModelMetadataResponse) -> Any:
    """Writes a ``GetModelMetadataResponse`` the way TF Serving's REST API does."""
    signature_map = get_model_metadata_pb2.SignatureDefMap()
    response.metadata[SIGNATURE_DEF_FIELD].Unpack(signature_map)
    return {
        "model_spec": _proto_json(response.model_spec),
        "metadata": {SIGNATURE_DEF_FIELD: _proto_json(signature_map)},
    }


def status_response_to_json(response: get_model_status_pb2.GetModelStatusResponse) -> Any:
    """Writes a ``GetModelStatusResponse`` as JSON (its fields carry snake_case JSON names)."""
    return json_format.MessageToDict(response, always_print_fields_with_no_presence=True)
