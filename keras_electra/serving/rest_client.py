"""A REST client for models served by TensorFlow Serving (port 8501 by default), and the
JSON encoding of tensors of TF Serving's REST API (numpy and the standard library: no
TensorFlow import).

A tensor is nested JSON lists; ``str`` values go as JSON strings, ``bytes`` always as
``{"b64": ...}`` objects, so any byte string arrives unchanged. The client follows no
redirect (the credentials would go along) and does not retry a TLS failure; retries,
errors, TLS and credentials: docs/serving.md, "Exposing the server".
"""

from __future__ import annotations

import base64
import json
import re
import ssl
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from http.client import HTTPException
from typing import Any, Literal, NoReturn
from urllib.parse import quote, unquote, urlsplit

import numpy as np

from keras_electra.serving.address import check_rest_url
from keras_electra.serving.client import (
    CREDENTIALS_FIX,
    ModelClient,
    RetriesExhausted,
    check_inputs,
)
from keras_electra.serving.credentials import client_context, read_pems
from keras_electra.serving.errors import ServingError, one_line

PredictFormat = Literal["columnar", "row"]
# What a failed TLS connection raises without saying why (the client then asks the server;
# a refused connection has no server to ask).
_UNCLEAR = (ssl.SSLError, ConnectionResetError, ConnectionAbortedError, HTTPException)
# HTTP status -> gRPC code name, the inverse of TF Serving's mapping.
_CODES = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    409: "ABORTED",
    429: "RESOURCE_EXHAUSTED",
    499: "CANCELLED",
    500: "INTERNAL",
    501: "UNIMPLEMENTED",
    503: "UNAVAILABLE",
    504: "DEADLINE_EXCEEDED",
}


def _is_b64(value: Any) -> bool:
    return isinstance(value, Mapping) and set(value) == {"b64"}


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
    """An array-like (a numpy array, a nested list, a scalar) as numpy, byte strings intact:
    strings give an object array (numpy's fixed-width ``S`` dtype would drop trailing NUL
    bytes, and cannot hold a mix of ``str`` and non-ASCII ``bytes``).

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
    raise TypeError(f"a JSON tensor cannot hold a {type(value).__name__} value")


def _encode_nested(array: Any) -> Any:
    if not isinstance(array, np.ndarray):
        return _encode_scalar(array)
    if array.ndim == 0:
        return _encode_scalar(array[()])
    return [_encode_nested(item) for item in array]


def encode_tensor(value: Any) -> Any:
    """An array-like as TF Serving's JSON tensor value (nested lists or a scalar), float32
    elements as their shortest float32 decimal.

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
        if _is_b64(value) and isinstance(value["b64"], str):
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
    """A JSON tensor value of a TF Serving response as numpy, strings as an object array of
    ``bytes``; ``dtype``, the TF dtype name (``"DT_FLOAT"``), or if ``None`` inferred:
    strings give bytes, decimals float32, whole numbers int64.

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


def _no_rows(inputs: Mapping[str, Any]) -> bool:
    """Whether ``inputs`` are a batch of no rows (every input an empty list or array)."""
    return bool(inputs) and all(
        (isinstance(value, list | tuple) or (isinstance(value, np.ndarray) and value.ndim > 0))
        and len(value) == 0
        for value in inputs.values()
    )


def _empty_as(value: np.ndarray, spec: Mapping[str, Any] | None) -> np.ndarray:
    """An output of no rows in the rank its signature gives it (``(0, L)`` for ``[-1,
    L]``, unknown sizes 0), as gRPC's tensor has it: JSON's ``[]`` carries only one
    dimension. Other outputs, and any without a known shape, as they are."""
    shape = (spec or {}).get("shape")
    if value.size or not shape or len(shape) <= value.ndim or shape[0] != -1:
        return value
    return value.reshape((0, *(max(int(size), 0) for size in shape[1:])))


def _body(signature_name: str | None) -> dict[str, Any]:
    return {} if signature_name is None else {"signature_name": signature_name}


def predict_body(
    inputs: Mapping[str, Any], signature_name: str | None, format: PredictFormat
) -> dict[str, Any]:
    """The JSON body of a REST predict request, ``signature_name`` left out if ``None``:
    ``"columnar"`` (``{"inputs": {name: tensor}}``) or ``"row"`` (``{"instances": [...]}``,
    an item per batch row: an object when there are several inputs, else the bare value;
    a :class:`ServingError` for inputs of different batch sizes).

    Examples:
        >>> predict_body({"x": [1.0, 2.0]}, None, "row")
        {'instances': [1.0, 2.0]}
    """
    body = _body(signature_name)
    if format == "columnar":
        body["inputs"] = {
            name: _sendable(name, encode_tensor, value) for name, value in inputs.items()
        }
        return body
    if format != "row":
        raise ValueError(f"format must be 'columnar' or 'row', not {format!r}")
    arrays = {name: _sendable(name, _batch, value) for name, value in inputs.items()}
    sizes = {name: (array.shape[0] if array.ndim else None) for name, array in arrays.items()}
    if None in sizes.values() or len(set(sizes.values())) > 1:
        raise ServingError(
            f"The row format needs every input to have the same batch size (got {sizes}); "
            "use format='columnar'."
        )
    if len(arrays) == 1:
        name, array = next(iter(arrays.items()))
        body["instances"] = _sendable(name, encode_tensor, array)
    else:
        batch = next(iter(sizes.values())) or 0
        body["instances"] = [
            {name: _sendable(name, encode_tensor, array[i]) for name, array in arrays.items()}
            for i in range(batch)
        ]
    return body


def _batch(value: Any) -> np.ndarray:
    """``value`` as an array whose rows the row format sends; a scalar (which the row format
    refuses) checked first for what JSON can carry (a generator is one)."""
    array = as_array(value)
    if array.ndim == 0:
        _encode_scalar(array[()])
    return array


def _sendable(name: str, convert: Any, value: Any) -> Any:
    """``convert(value)`` for the input ``name``, or the gRPC client's sentence for a value
    that cannot be sent (a ``None``, a generator, a ragged list) as a :class:`ServingError`."""
    try:
        return convert(value)
    except (TypeError, ValueError) as err:
        raise ServingError(f"Input '{name}' cannot be sent to TF Serving: {err}.") from None


def _encode_feature(value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        return [_encode_feature(item) for item in value]
    if isinstance(value, (bytes, str, bool, int, float, np.generic)):
        return encode_tensor(value)
    raise ServingError(f"An example feature cannot hold a {type(value).__name__} value.")


def classify_body(examples: Sequence[Mapping[str, Any]], signature_name: str | None) -> dict:
    """The JSON body of a REST classify or regress request (``bytes`` features go as b64).

    Examples:
        >>> classify_body([{"text": "fine"}], "classify")
        {'signature_name': 'classify', 'examples': [{'text': 'fine'}]}
    """
    body = _body(signature_name)
    body["examples"] = [
        {name: _encode_feature(value) for name, value in example.items()} for example in examples
    ]
    return body


def _closed(url: str, reason: BaseException, times: str = "", tls: str = "") -> ServingError:
    said = str(reason) or type(reason).__name__
    if not said.isprintable():  # binary frames: an HTTP/2 server, most often a gRPC port
        said = "it answered in binary frames, as TF Serving's gRPC port (--port) does"
    return ServingError(
        f"TF Serving at {url} closed the connection without an answer "
        f"({said}){times}; check that the URL is its REST port "
        f"(--rest_api_port) and whether a proxy in front of it wants credentials{tls}.",
        code="UNAVAILABLE",
    )


class _RefuseRedirects(urllib.request.HTTPRedirectHandler):
    """urllib's redirect handler follows a 30x to any URL, resending the request's headers
    (the credentials) there, https to http included; this one follows none."""

    def redirect_request(self, req, fp, code, msg, headers, newurl) -> NoReturn:  # noqa: ANN001
        fp.close()
        location = newurl if len(newurl) <= 200 else newurl[:200] + "..."
        raise ServingError(
            f"TF Serving at {req.full_url} answered with a redirect (HTTP {code}) to "
            f"{location}, which the client does not follow (the request's credentials would "
            "go there too); use that address as the URL if you trust it.",
            http_status=code,
        )


def _refuse_api_path(url: str) -> None:
    """One sentence for a base URL that holds TF Serving's API path, as copied from a
    ``curl`` line (``http://host:8501/v1/models/NAME:predict``): the client adds that path
    itself, and the server answered the doubled one with "Malformed request". A path
    before it (a proxy's prefix) is kept."""
    parts = urlsplit(url)
    found = re.search(r"/v1/models(?:/([^/:]+))?(?=$|[/:])", parts.path)
    if found is None:
        return
    base = f"{parts.scheme}://{parts.netloc}{parts.path[: found.start()]}"
    name = found.group(1) and unquote(found.group(1))
    apart = f", and the model's name apart (--model-name {name})" if name else ""
    raise ServingError(
        f"'{url}' holds the path of TF Serving's REST API ({parts.path[found.start() :]}), "
        f"which the client adds itself; give the server's URL, '{base}'{apart}."
    )


class RestClient(ModelClient):
    """Talks to one model on a TF Serving REST endpoint; the arguments it shares with
    :class:`~keras_electra.serving.grpc_client.GrpcClient` are
    :class:`~keras_electra.serving.client.ModelClient`'s (``root_certificates`` and a
    client certificate for an ``https://`` URL).

    Args:
        base_url: The server, e.g. ``"http://localhost:8501"`` (``http://`` is
            added if missing).
        typed_outputs: Cast predict outputs to the signature's dtypes (float32,
            int32, ...) using the model's metadata, fetched once and cached.
            If ``False``, dtypes are inferred from the JSON (decimals → float32,
            whole numbers → int64, strings → bytes).

    Raises:
        ServingError: certificates for an ``http://`` URL, a URL with ``user:password@``,
            a URL that holds the REST API's path (``/v1/models/NAME``) where the server's
            own URL belongs; an empty URL, one without a host, a port outside 1-65535.

    Examples:
        >>> client = RestClient("http://localhost:8501", "electra")  # doctest: +SKIP
        >>> text = {"text": ["the chef cooked the meal"]}
        >>> client.predict(text, format="row")["num_tokens"]  # doctest: +SKIP
        array([5], dtype=int32)
    """

    def __init__(
        self, base_url: str, model_name: str, *, typed_outputs: bool = True, **options: Any
    ) -> None:
        super().__init__(model_name, **options)
        if "://" not in base_url:
            base_url = "http://" + base_url.strip()
        if "@" in base_url.split("://", 1)[1].split("/", 1)[0]:
            raise ServingError(
                "Pass credentials with token= or headers=, not in the URL (where errors "
                "and logs would show them)."
            )
        check_rest_url(base_url)
        _refuse_api_path(base_url)
        self.base_url = base_url.rstrip("/")
        self._tls = None
        if self.base_url.startswith("https://"):
            self._pems = read_pems(self._pems)  # read once: the context's, and diagnose()'s
            self._tls = client_context(*self._pems)
        elif self._pems[0] is not None or self._pems[1] is not None:
            raise ServingError(
                f"Certificates were given but '{self.base_url}' is not an https:// URL."
            )
        else:
            self._refuse_plaintext(self.base_url)
        self._opener = urllib.request.build_opener(
            urllib.request.HTTPSHandler(context=self._tls), _RefuseRedirects()
        )
        self.typed_outputs = typed_outputs
        self._signatures: dict[str, Any] | None = None

    @property
    def model_url(self) -> str:
        """``base_url/v1/models/NAME[/versions/N|/labels/L]``."""
        url = f"{self.base_url}/v1/models/{quote(self.model_name, safe='')}"
        if self.version is not None:
            url += f"/versions/{self.version}"
        elif self.version_label is not None:
            url += f"/labels/{quote(self.version_label, safe='')}"
        return url

    def _request(self, url: str, body: Mapping[str, Any] | None = None) -> Any:
        data = None if body is None else json.dumps(body).encode("utf-8")

        def attempt() -> bytes:
            headers = self.credentials.headers()
            if body is not None:
                headers["Content-Type"] = "application/json"
            request = urllib.request.Request(
                url, data=data, method="GET" if body is None else "POST", headers=headers
            )
            try:
                with self._opener.open(request, timeout=self.timeout) as answer:
                    return answer.read()
            except (urllib.error.URLError, ssl.SSLError, ConnectionError, HTTPException) as err:
                reason = err.reason if isinstance(err, urllib.error.URLError) else err
                if self._tls is not None and isinstance(reason, OSError | HTTPException):
                    address = urlsplit(url)
                    port = (address.port or 443) if isinstance(reason, _UNCLEAR) else None
                    self._raise_tls_failure(url, address.hostname or "", port, reason)
                raise

        def retryable(err: Exception) -> bool:
            if isinstance(err, urllib.error.HTTPError):
                return err.code == 503
            reason = err.reason if isinstance(err, urllib.error.URLError) else err
            return isinstance(reason, ConnectionRefusedError | ConnectionResetError)

        try:
            raw = self._retrying(attempt, retryable)
        except RetriesExhausted as exhausted:
            err = exhausted.error
            if isinstance(err, urllib.error.HTTPError):
                raise self._http_error(url, err) from None
            reason = getattr(err, "reason", err)
            if not isinstance(reason, ConnectionRefusedError):  # a reset, a hang-up
                times = f" on all {exhausted.attempts} attempts" if exhausted.attempts > 1 else ""
                raise _closed(url, reason, times) from None
            check = "that its REST port (--rest_api_port) is the one in the URL"
            raise self._unreachable(url, exhausted.attempts, reason, check) from None
        except urllib.error.HTTPError as err:
            raise self._http_error(url, err) from None
        except TimeoutError as err:
            raise self._too_slow(url) from err
        except (urllib.error.URLError, ssl.SSLError, ConnectionError, HTTPException) as err:
            # urllib wraps only what fails while connecting: a reset or closed connection
            # later (or an SSLError that tls did not recognize) reaches us bare.
            reason = err.reason if isinstance(err, urllib.error.URLError) else err
            if isinstance(reason, ssl.SSLError):
                raise ServingError(
                    f"Could not open a TLS connection to TF Serving at {url} "
                    f"({getattr(reason, 'reason', None) or reason}).",
                    code="UNAVAILABLE",
                ) from None
            if isinstance(reason, (ConnectionError, HTTPException)):
                tls = " or a client certificate" if self._tls is not None else ""
                raise _closed(url, reason, tls=tls) from None
            raise ServingError(
                f"Could not reach TF Serving at {url} ({reason}); check the URL.",
                code="UNAVAILABLE",
            ) from None
        try:
            return json.loads(raw.decode("utf-8", "surrogateescape"))
        except json.JSONDecodeError as err:
            raise ServingError(
                f"TF Serving at {url} sent a body that is not JSON ({err.msg})."
            ) from None

    def _http_error(self, url: str, err: urllib.error.HTTPError) -> ServingError:
        raw = err.read().decode("utf-8", "replace")
        try:
            message = json.loads(raw).get("error", raw)
        except (json.JSONDecodeError, AttributeError):
            message = raw.strip() or err.reason
        advice = ""
        if err.code in (401, 403):
            advice = f"; {CREDENTIALS_FIX}"
        return ServingError(
            f"TF Serving at {url} rejected the request with HTTP {err.code}: "
            f"{one_line(str(message))}{advice}",
            code=_CODES.get(err.code),
            http_status=err.code,
            details=str(message),
        )

    def _output_specs(self, signature_name: str | None) -> dict[str, dict[str, Any]]:
        """The signature's outputs, name to ``dtype`` and ``shape`` (from the metadata,
        fetched once), or nothing without ``typed_outputs``."""
        if not self.typed_outputs:
            return {}
        if self._signatures is None:
            self._signatures = self.metadata()["signatures"]
        signature = self._signatures.get(signature_name or "serving_default", {})
        return dict(signature.get("outputs", {}))

    def predict(
        self,
        inputs: Mapping[str, Any],
        signature_name: str | None = "serving_default",
        format: PredictFormat = "columnar",
    ) -> dict[str, np.ndarray]:
        """Runs a signature through ``:predict``; batches, texts, the result and the errors
        are those of :meth:`~keras_electra.serving.grpc_client.GrpcClient.predict`.
        ``signature_name=None`` leaves it out of the body (the server runs
        ``serving_default``); ``format`` is ``"columnar"`` or ``"row"`` (:func:`predict_body`).
        The one output of a signature that the server leaves unnamed is keyed by its name
        with ``typed_outputs``, else ``"outputs"`` / ``"predictions"``. A batch of no rows
        gives each output in its signature's rank (``(0, L)``, as gRPC does; JSON's ``[]``
        says one dimension), with ``typed_outputs``; the row format sends it columnar (TF
        Serving refuses an empty ``"instances"``).

        Examples:
            >>> client.predict({"text": ["a b"]})["tokens"]  # doctest: +SKIP
            array([[b'a', b'b']], dtype=object)
        """
        check_inputs(inputs)
        specs = self._output_specs(signature_name)
        types = {name: spec["dtype"] for name, spec in specs.items()}
        if format == "row" and _no_rows(inputs):
            format = "columnar"  # TF Serving refuses an empty "instances"; the answer is alike
        outputs = self._predict_in_parts(
            inputs, lambda chunk: self._predict(chunk, signature_name, format, types)
        )
        return {name: _empty_as(value, specs.get(name)) for name, value in outputs.items()}

    def _predict(
        self,
        inputs: Mapping[str, Any],
        signature_name: str | None,
        format: PredictFormat,
        types: dict[str, str],
    ) -> dict[str, np.ndarray]:
        body = predict_body(inputs, signature_name, format)
        response = self._request(f"{self.model_url}:predict", body)
        key = "outputs" if format == "columnar" else "predictions"
        if key not in response:
            raise ServingError(f"TF Serving's predict response has no '{key}' key: {response}")
        single_name = next(iter(types)) if len(types) == 1 else None
        values = response[key]
        first = values[0] if format == "row" and values else values  # a row tells the names
        if not isinstance(first, dict) or _is_b64(first) or single_name is not None:
            values = {single_name or key: values}
        elif format == "row":
            values = {name: [row[name] for row in values] for name in first}
        return {name: decode_tensor(value, types.get(name)) for name, value in values.items()}

    @property
    def where(self) -> str:
        return self.base_url

    def _classify(self, examples: Sequence[Mapping[str, Any]], signature_name: str | None) -> list:
        body = classify_body(examples, signature_name)
        response = self._request(f"{self.model_url}:classify", body)
        results = response.get("results", response.get("result"))
        if results is None:
            raise ServingError(f"TF Serving's classify response has no 'results' key: {response}")
        # Scores are float32 on the server; read them at that precision, as gRPC gives them.
        return [
            [(str(label), float(np.float32(score))) for label, score in result]
            for result in results
        ]

    def _regress(self, examples: Sequence[Mapping[str, Any]], signature_name: str | None) -> list:
        # The body is classify's; the answer {"results": [value, ...]}, a value per example.
        body = classify_body(examples, signature_name)
        response = self._request(f"{self.model_url}:regress", body)
        results = response.get("results", response.get("result"))
        if not isinstance(results, list):
            raise ServingError(f"TF Serving's regress response has no 'results' list: {response}")
        # Values are float32 on the server; read them at that precision, as gRPC gives them.
        return [float(np.float32(value)) for value in results]

    def _metadata(self) -> tuple:
        response = self._request(f"{self.model_url}/metadata")
        spec = response.get("model_spec", {})
        version = spec.get("version")
        if isinstance(version, Mapping):  # Int64Value rendered as an object by some encoders
            version = version.get("value")
        signature_map = response.get("metadata", {}).get("signature_def", {})
        version = int(version) if version not in (None, "") else None
        return spec.get("name", ""), version, signature_map.get("signature_def", {})

    def _status(self) -> list[tuple]:
        response = self._request(self.model_url)
        return [
            (
                int(item.get("version", 0)),
                item.get("state", "UNKNOWN"),
                item.get("status", {}).get("error_code", "OK"),
                item.get("status", {}).get("error_message", ""),
            )
            for item in response.get("model_version_status", [])
        ]
