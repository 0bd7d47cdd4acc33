"""Clients and export helpers for keras-electra models served by TensorFlow Serving.

- :class:`GrpcClient` (port 8500) and :class:`RestClient` (port 8501) call a
  running ``tensorflow_model_server``; both raise :class:`ServingError`.
- :func:`predict_log` and :func:`write_warmup_requests` write an export's
  warmup file (``assets.extra/tf_serving_warmup_requests``).
- :func:`set_signature_method_name` marks a TF2-saved signature as a
  ``tensorflow/serving/classify`` signature.

The in-process TF Serving stand-in the tests serve exports with is test code
(``tests/tfserving_standin`` in the repository), not part of this package.

Names are imported lazily: ``RestClient`` does not import TensorFlow.

Examples:
    >>> from keras_electra.serving import RestClient
    >>> RestClient("localhost:8501", "electra").status()[0]["state"]  # doctest: +SKIP
    'AVAILABLE'
"""

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
