"""Clients and export helpers for keras-electra models served by TensorFlow Serving
(docs/serving.md): :class:`GrpcClient` (port 8500) and :class:`RestClient` (port 8501),
both raising :class:`ServingError`; :func:`predict_log` and :func:`write_warmup_requests`
for an export's warmup file; :func:`set_signature_method_name` for a Classify signature.
Names are imported lazily: ``RestClient`` does not import TensorFlow."""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "GrpcClient": "keras_electra.serving.grpc_client",
    "RestClient": "keras_electra.serving.rest_client",
    "ServingError": "keras_electra.serving.errors",
    "set_signature_method_name": "keras_electra.serving.signatures",
    "CLASSIFY_METHOD_NAME": "keras_electra.serving.signatures",
    "PREDICT_METHOD_NAME": "keras_electra.serving.signatures",
    "predict_log": "keras_electra.serving.warmup",
    "write_warmup_requests": "keras_electra.serving.warmup",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'keras_electra.serving' has no attribute {name!r}")
