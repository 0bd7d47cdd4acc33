"""Write SavedModel warmup requests for TF Serving.

TF Serving (``--enable_model_warmup``, on by default) replays
``<export_dir>/assets.extra/tf_serving_warmup_requests`` when it loads a version, and a
failing record fails the load (docs/serving.md). Each record is a serialized
``tensorflow.serving.PredictionLog``; at most 1000 are allowed.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import Any

import tensorflow as tf
from tensorflow_serving.apis import model_pb2, predict_pb2, prediction_log_pb2

from keras_electra.serving.errors import ServingError
from keras_electra.serving.tensors import ndarray_to_tensor_proto

ASSETS_EXTRA = "assets.extra"
"""The export's folder for files TF Serving does not load: warmup requests, and the
model's own files (``config.json``, ``vocab.txt``; ``finetune.json``, ``labels.txt``)."""
WARMUP_FILE = os.path.join(ASSETS_EXTRA, "tf_serving_warmup_requests")
MAX_WARMUP_RECORDS = 1000


def predict_log(
    inputs: Mapping[str, Any], signature_name: str = "serving_default", model_name: str = ""
) -> prediction_log_pb2.PredictionLog:
    """Wraps one Predict request in a ``PredictionLog`` record.

    Args:
        inputs: Input alias to array-like (strings as ``str`` or ``bytes``).
        signature_name: The signature the request targets.
        model_name: Optional model name (warmup does not check it).

    Examples:
        >>> print(predict_log({"text": ["the cat"]}).predict_log.request.model_spec, end="")
        signature_name: "serving_default"
    """
    request = predict_pb2.PredictRequest(
        model_spec=model_pb2.ModelSpec(name=model_name, signature_name=signature_name)
    )
    for alias, value in inputs.items():
        request.inputs[alias].CopyFrom(ndarray_to_tensor_proto(value))
    return prediction_log_pb2.PredictionLog(
        predict_log=prediction_log_pb2.PredictLog(request=request)
    )


def write_warmup_requests(
    export_dir: str | os.PathLike[str], records: Iterable[prediction_log_pb2.PredictionLog]
) -> str:
    """Writes warmup records to ``<export_dir>/assets.extra/tf_serving_warmup_requests``.

    Args:
        export_dir: The SavedModel version directory.
        records: ``PredictionLog`` records, e.g. from :func:`predict_log`.

    Returns:
        The path written.

    Raises:
        ServingError: If there are no records or more than TF Serving accepts.

    Examples:
        >>> records = [predict_log({"text": ["hello"]})]
        >>> write_warmup_requests("saved_models/electra/1", records)  # doctest: +SKIP
        'saved_models/electra/1/assets.extra/tf_serving_warmup_requests'
    """
    records = list(records)
    if not records or len(records) > MAX_WARMUP_RECORDS:
        raise ServingError(
            f"A warmup file needs 1 to {MAX_WARMUP_RECORDS} records, not {len(records)}."
        )
    path = os.path.join(os.fspath(export_dir), WARMUP_FILE)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with tf.io.TFRecordWriter(path) as writer:
        for record in records:
            writer.write(record.SerializeToString())
    return path
