"""An export's warmup requests, which TF Serving replays when it loads a version
(docs/serving.md): serialized ``PredictionLog`` records, at most 1000."""

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
    """One Predict request of ``inputs`` (input alias to array-like) as a ``PredictionLog``
    record (warmup does not check ``model_name``).

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
    """Writes ``records`` (from :func:`predict_log`) to ``<export_dir>/assets.extra/
    tf_serving_warmup_requests`` and returns that path; no records or more than TF Serving
    accepts are a :class:`ServingError`.

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
