"""gRPC servicers of the in-process TF Serving stand-in (see ``server.py``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import grpc
from tensorflow_serving.apis import model_service_pb2_grpc, prediction_service_pb2_grpc

from keras_electra.serving.errors import ServingError

from .servable import ServedModel

T = TypeVar("T")


def _call(context: grpc.ServicerContext, handler: Callable[[], T]) -> T:
    """Runs a request handler and turns a ServingError into the gRPC status."""
    try:
        return handler()
    except ServingError as err:
        code = getattr(grpc.StatusCode, err.code or "UNKNOWN", grpc.StatusCode.UNKNOWN)
        context.abort(code, str(err))
    except Exception as err:  # a server must answer, not crash
        context.abort(grpc.StatusCode.INTERNAL, f"{type(err).__name__}: {err}")
    raise AssertionError("unreachable: context.abort raises")


class PredictionServicer(prediction_service_pb2_grpc.PredictionServiceServicer):
    """``tensorflow.serving.PredictionService`` backed by a :class:`ServedModel`."""

    def __init__(self, model: ServedModel) -> None:
        self.model = model

    def Predict(self, request: Any, context: grpc.ServicerContext) -> Any:
        return _call(context, lambda: self.model.predict(request))

    def Classify(self, request: Any, context: grpc.ServicerContext) -> Any:
        return _call(context, lambda: self.model.classify(request))

    def Regress(self, request: Any, context: grpc.ServicerContext) -> Any:
        return _call(context, lambda: self.model.regress(request))

    def GetModelMetadata(self, request: Any, context: grpc.ServicerContext) -> Any:
        return _call(context, lambda: self.model.metadata(request))


class ModelServicer(model_service_pb2_grpc.ModelServiceServicer):
    """``tensorflow.serving.ModelService`` (status only) backed by a :class:`ServedModel`."""

    def __init__(self, model: ServedModel) -> None:
        self.model = model

    def GetModelStatus(self, request: Any, context: grpc.ServicerContext) -> Any:
        return _call(context, lambda: self.model.status(request))


def add_servicers(server: grpc.Server, model: ServedModel) -> None:
    """Registers the PredictionService and ModelService servicers on ``server``."""
    prediction_service_pb2_grpc.add_PredictionServiceServicer_to_server(
        PredictionServicer(model), server
    )
    model_service_pb2_grpc.add_ModelServiceServicer_to_server(ModelServicer(model), server)
