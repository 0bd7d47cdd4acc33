"""REST side of the in-process TF Serving stand-in (see ``server.py``).

Requests are routed like ``tensorflow_model_server`` routes them
(``/v1/models/NAME[/versions/N|/labels/L]:verb`` and ``GET .../metadata``),
converted to protos (:mod:`._rest_codec`), answered by
:class:`ServedModel`, and failures returned as ``{"error": ...}`` with TF
Serving's status-to-HTTP mapping.
"""

from __future__ import annotations

import json
import re
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import unquote

from tensorflow_serving.apis import get_model_metadata_pb2, get_model_status_pb2, model_pb2

from keras_electra.serving.errors import ServingError

from ._rest_codec import (
    classification_request_from_json,
    classification_response_to_json,
    metadata_response_to_json,
    predict_request_from_json,
    predict_response_to_json,
    regression_request_from_json,
    regression_response_to_json,
    status_response_to_json,
)
from .servable import SIGNATURE_DEF_FIELD, ServedModel

_PREDICTION_PATH = re.compile(
    r"/v1/models/([^/:]+)(?:(?:/versions/(\d+))|(?:/labels/([^/:]+)))?:(classify|regress|predict)",
    re.IGNORECASE,
)
_MODEL_PATH = re.compile(
    r"/v1/models(?:/([^/:]+))?(?:(?:/versions/(\d+))|(?:/labels/([^/:]+)))?(?:/(metadata))?",
    re.IGNORECASE,
)
# TF Serving's status-code to HTTP mapping (model_servers/http_server.cc).
HTTP_STATUS = {
    "OK": 200,
    "CANCELLED": 499,
    "UNKNOWN": 500,
    "INVALID_ARGUMENT": 400,
    "DEADLINE_EXCEEDED": 504,
    "NOT_FOUND": 404,
    "ALREADY_EXISTS": 409,
    "PERMISSION_DENIED": 403,
    "RESOURCE_EXHAUSTED": 429,
    "FAILED_PRECONDITION": 400,
    "ABORTED": 409,
    "OUT_OF_RANGE": 400,
    "UNIMPLEMENTED": 501,
    "INTERNAL": 500,
    "UNAVAILABLE": 503,
    "DATA_LOSS": 500,
    "UNAUTHENTICATED": 401,
}


def _invalid(message: str) -> ServingError:
    return ServingError(message, code="INVALID_ARGUMENT")


def _model_spec(name: str, version: str | None, label: str | None) -> model_pb2.ModelSpec:
    spec = model_pb2.ModelSpec(name=unquote(name))
    if version:
        spec.version.value = int(version)
    if label:
        spec.version_label = unquote(label)
    return spec


def handle(model: ServedModel, method: str, path: str, body: bytes) -> tuple[int, Any]:
    """Answers one REST request; returns the HTTP status and the JSON body.

    Example:
        >>> handle(model, "GET", "/v1/models/electra", b"")[0]
        200
    """
    try:
        return 200, _dispatch(model, method, path, body)
    except ServingError as err:
        return HTTP_STATUS.get(err.code or "UNKNOWN", 500), {"error": str(err)}
    except Exception as err:  # a server must answer, not crash
        return 500, {"error": f"{type(err).__name__}: {err}"}


def _dispatch(model: ServedModel, method: str, path: str, body: bytes) -> Any:
    match = _PREDICTION_PATH.fullmatch(path) if method == "POST" else None
    if match:
        name, version, label, verb = match.groups()
        spec = _model_spec(name, version, label)
        verb = verb.lower()
        if verb == "predict":
            request, request_format = predict_request_from_json(body, spec, model)
            return predict_response_to_json(model.predict(request), request_format)
        if verb == "classify":
            request = classification_request_from_json(body, spec)
            return classification_response_to_json(model.classify(request))
        request = regression_request_from_json(body, spec)
        return regression_response_to_json(model.regress(request))
    match = _MODEL_PATH.fullmatch(path) if method == "GET" else None
    if match:
        name, version, label, subresource = match.groups()
        if not name:
            raise _invalid("Missing model name in request.")
        spec = _model_spec(name, version, label)
        if subresource:
            request = get_model_metadata_pb2.GetModelMetadataRequest(
                model_spec=spec, metadata_field=[SIGNATURE_DEF_FIELD]
            )
            return metadata_response_to_json(model.metadata(request))
        return status_response_to_json(
            model.status(get_model_status_pb2.GetModelStatusRequest(model_spec=spec))
        )
    raise _invalid(f"Malformed request: {method} {path}")


def make_handler(model: ServedModel) -> type[BaseHTTPRequestHandler]:
    """Returns an ``http.server`` handler class serving TF Serving's REST API for ``model``."""

    class Handler(BaseHTTPRequestHandler):
        server_version = "keras-electra-test-serving"

        def _respond(self, method: str) -> None:
            path = self.path.split("?", 1)[0]
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            if not path.lower().startswith("/v1/"):
                status, payload = 404, {"error": f"Not found: {path}"}
            else:
                status, payload = handle(model, method, path, body)
            data = json.dumps(payload, ensure_ascii=False, indent=1).encode(
                "utf-8", "surrogateescape"
            )
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            self._respond("GET")

        def do_POST(self) -> None:
            self._respond("POST")

        def log_message(self, format: str, *args: Any) -> None:
            """Keeps test output quiet."""

    return Handler
