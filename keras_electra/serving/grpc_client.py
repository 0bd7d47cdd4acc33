"""A gRPC client for models served by TensorFlow Serving (port 8500 by default). Only
``UNAVAILABLE`` is retried, and not a TLS failure; every other failure raises at once."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import grpc
import numpy as np
from google.protobuf import json_format
from tensorflow_serving.apis import (
    classification_pb2,
    get_model_metadata_pb2,
    get_model_status_pb2,
    model_pb2,
    model_service_pb2_grpc,
    predict_pb2,
    prediction_service_pb2_grpc,
    regression_pb2,
)

from keras_electra.serving.address import check_grpc_target, host_port, names_no_port
from keras_electra.serving.client import (
    CREDENTIALS_FIX,
    ModelClient,
    RetriesExhausted,
    check_inputs,
)
from keras_electra.serving.credentials import read_pems, speaks_tls
from keras_electra.serving.errors import ServingError, one_line
from keras_electra.serving.tensors import (
    make_example,
    ndarray_to_tensor_proto,
    tensor_proto_to_ndarray,
)

# What gRPC reports when the server at the target answered in HTTP/1 (a REST port).
HTTP1_ANSWER = "Failed parsing HTTP/2"
# What gRPC over TLS reports when the server chose no HTTP/2 in ALPN (a REST port's TLS).
NO_H2 = "ALPN"
# Failures with no server to ask what it speaks: a refused connection, a name not found.
_NOT_A_SERVER = ("refused", "resolv", "dns")


class GrpcClient(ModelClient):
    """Talks to one model on a TF Serving gRPC endpoint; the arguments it shares with
    :class:`~keras_electra.serving.rest_client.RestClient` are
    :class:`~keras_electra.serving.client.ModelClient`'s.

    Args:
        target: ``host:port`` of the server, e.g. ``"localhost:8500"``.
        max_message_mb: Send and receive message size limit, in MiB (gRPC's
            default receive limit is 4 MiB, too small for big batches).
        tls: Encrypt the channel, trusting the system's certificate authorities
            (implied by ``root_certificates`` and a client certificate).

    Raises:
        ServingError: a URL (``http://...``) as ``target``: that is RestClient's; an
            empty target, one with a path, a port outside 1-65535.

    Examples:
        >>> with GrpcClient("localhost:8500", "electra") as client:  # doctest: +SKIP
        ...     outputs = client.predict({"text": ["the chef cooked the meal"]})
        >>> outputs["replaced_prob"].shape  # doctest: +SKIP
        (1, 5)
    """

    _protocol = "grpc"  # headers go as gRPC metadata

    def __init__(
        self,
        target: str,
        model_name: str,
        *,
        max_message_mb: int = 256,
        tls: bool = False,
        **options: Any,
    ) -> None:
        super().__init__(model_name, **options)
        scheme, _, rest = target.partition("://")
        if rest and scheme.lower() in ("http", "https", "grpc", "grpcs"):
            address = rest.split("/", 1)[0]
            raise ServingError(
                f"GrpcClient takes the gRPC port as HOST:PORT, not the URL '{target}'; pass "
                f"'{address}' if that is TF Serving's gRPC port (--port, 8500 by default), or "
                "call its REST port (--rest_api_port) with RestClient and the URL."
            )
        check_grpc_target(target)
        self.target = target
        # Read once: the channel's, and diagnose()'s after a failed TLS handshake.
        self._pems = root, chain, key = read_pems(self._pems)
        self.tls = bool(tls or root is not None or chain is not None)
        if not self.tls:
            self._refuse_plaintext(target)
        limit = max_message_mb * 1024 * 1024
        channel_options = [(f"grpc.max_{way}_message_length", limit) for way in ("send", "receive")]
        if self.tls:
            secure = grpc.ssl_channel_credentials(
                root_certificates=root, private_key=key, certificate_chain=chain
            )
            self._channel = grpc.secure_channel(target, secure, options=channel_options)
        else:
            self._channel = grpc.insecure_channel(target, options=channel_options)
        self._predictions = prediction_service_pb2_grpc.PredictionServiceStub(self._channel)
        self._models = model_service_pb2_grpc.ModelServiceStub(self._channel)

    def _model_spec(self, signature_name: str | None = None) -> model_pb2.ModelSpec:
        spec = model_pb2.ModelSpec(name=self.model_name, signature_name=signature_name or "")
        if self.version is not None:
            spec.version.value = self.version
        elif self.version_label is not None:
            spec.version_label = self.version_label
        return spec

    def _call(self, rpc: str, method: Callable[..., Any], request: Any) -> Any:
        def attempt() -> Any:
            metadata = tuple(self.credentials.headers().items()) or None
            try:
                return method(request, timeout=self.timeout, metadata=metadata)
            except grpc.RpcError as err:
                details = err.details() or ""  # type: ignore[attr-defined]
                if HTTP1_ANSWER in details:
                    raise self._not_grpc(details) from None
                if err.code() == grpc.StatusCode.UNAVAILABLE:  # type: ignore[attr-defined]
                    self._not_retried(details)
                raise

        def retryable(err: Exception) -> bool:
            return isinstance(err, grpc.RpcError) and err.code() == grpc.StatusCode.UNAVAILABLE

        try:
            return self._retrying(attempt, retryable)
        except RetriesExhausted as exhausted:
            details = exhausted.error.details()  # type: ignore[attr-defined]
            where, cause = self.target, f"UNAVAILABLE: {details}"
            check = "serving gRPC on that address"
            if names_no_port(self.target):
                check += (
                    " (it names no port, so gRPC dialed 443; TF Serving's gRPC port is 8500 "
                    f"by default: pass {self.target}:8500)"
                )
            raise self._unreachable(where, exhausted.attempts, cause, check, details) from None
        except grpc.RpcError as err:
            code, details = err.code(), err.details()  # type: ignore[attr-defined]
            call = f" {rpc} for model '{self.model_name}'"
            if code == grpc.StatusCode.DEADLINE_EXCEEDED:
                raise self._too_slow(self.target, call, details=details) from None
            said = one_line(details or "")
            message = f"TF Serving at {self.target} rejected{call} with {code.name}: {said}"
            if code in (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED):
                message = (
                    f"TF Serving at {self.target} refused{call} ({code.name}: {details}); "
                    f"{CREDENTIALS_FIX}."
                )
            raise ServingError(message, code=code.name, details=details) from None

    def _not_retried(self, details: str) -> None:
        """Raises the error of an UNAVAILABLE call that trying again cannot fix: a TLS
        failure; TLS to a port that chose no HTTP/2 (a REST port behind TLS); a plaintext
        call to a port that speaks TLS (gRPC said only "Socket closed"). Returns for any
        other (a refused connection, a name not found, is not asked what it speaks)."""
        host, port = host_port(self.target) or (self.target, None)
        if self.tls:
            if NO_H2 in details:
                raise self._not_grpc(details, tls=True) from None
            self._raise_tls_failure(self.target, host, port, details)
        elif port is not None and not any(w in details.lower() for w in _NOT_A_SERVER):
            if speaks_tls(host, port, min(self.timeout, 5.0)):
                raise ServingError(
                    f"TF Serving at {self.target} closed the plaintext gRPC connection, and "
                    "it speaks TLS: pass --tls or --root-certificates (tls=True or "
                    "root_certificates= from Python).",
                    code="UNAVAILABLE",
                    details=details,
                ) from None

    def _not_grpc(self, details: str, tls: bool = False) -> ServingError:
        """The error for a server that answered in HTTP/1 (a REST port, most often), or
        over ``tls`` chose no HTTP/2 (a REST port behind TLS): not retried, as asking again
        cannot make it speak gRPC."""
        said = "chose HTTP/1 over TLS (no h2 in ALPN)" if tls else "answered in HTTP/1"
        scheme = "https" if tls else "http"
        return ServingError(
            f"{self.target} {said}, not gRPC, so it is most likely TF Serving's REST port "
            "(--rest_api_port); use its gRPC port (--port, 8500 by default), or reach its "
            f"REST API at {scheme}://{self.target} (RestClient; `score --server "
            f"{scheme}://...`).",
            code="UNAVAILABLE",
            details=details,
        )

    def predict(
        self,
        inputs: Mapping[str, Any],
        signature_name: str = "serving_default",
        *,
        output_filter: Sequence[str] | None = None,
    ) -> dict[str, np.ndarray]:
        """Runs a signature through ``PredictionService.Predict``: ``inputs``, input alias to
        array-like (strings as ``str``, sent as UTF-8, or ``bytes``; numbers in their own
        dtype), gives output alias to numpy array (strings as object arrays of ``bytes``),
        only those of ``output_filter`` if given. A batch of more than ``max_batch_size``
        rows goes as consecutive requests whose outputs are joined in order, its texts cut
        as the export cuts them (:mod:`keras_electra.limits`). Raises :class:`ServingError`
        if the server rejects the request or cannot be reached.

        Examples:
            >>> pair = {"text_a": ["a dog"], "text_b": ["a cat"]}
            >>> client.predict(pair, "score_pair")["num_tokens"]  # doctest: +SKIP
            array([4], dtype=int32)
        """
        check_inputs(inputs)
        return self._predict_in_parts(
            inputs, lambda chunk: self._predict(chunk, signature_name, output_filter)
        )

    def _predict(
        self,
        inputs: Mapping[str, Any],
        signature_name: str,
        output_filter: Sequence[str] | None,
    ) -> dict[str, np.ndarray]:
        request = predict_pb2.PredictRequest(
            model_spec=self._model_spec(signature_name), output_filter=list(output_filter or [])
        )
        for alias, value in inputs.items():
            try:
                request.inputs[alias].CopyFrom(ndarray_to_tensor_proto(value))
            except (TypeError, ValueError) as err:
                raise ServingError(f"Input '{alias}' cannot be sent to TF Serving: {err}.") from err
        response = self._call("Predict", self._predictions.Predict, request)
        return {alias: tensor_proto_to_ndarray(proto) for alias, proto in response.outputs.items()}

    def _examples_request(
        self, request_type: Any, examples: Sequence[Mapping[str, Any]], signature_name: str | None
    ) -> Any:
        """A Classification or RegressionRequest of ``examples`` for ``signature_name``."""
        request = request_type(model_spec=self._model_spec(signature_name))
        for example in examples:
            try:
                request.input.example_list.examples.add().CopyFrom(make_example(example))
            except TypeError as err:
                raise ServingError(f"An example cannot be sent to TF Serving: {err}.") from err
        return request

    @property
    def where(self) -> str:
        return self.target

    def _classify(self, examples: Sequence[Mapping[str, Any]], signature_name: str | None) -> list:
        request = self._examples_request(
            classification_pb2.ClassificationRequest, examples, signature_name
        )
        response = self._call("Classify", self._predictions.Classify, request)
        return [
            [(item.label, float(item.score)) for item in result.classes]
            for result in response.result.classifications
        ]

    def _regress(self, examples: Sequence[Mapping[str, Any]], signature_name: str | None) -> list:
        request = self._examples_request(regression_pb2.RegressionRequest, examples, signature_name)
        response = self._call("Regress", self._predictions.Regress, request)
        return [float(item.value) for item in response.result.regressions]

    def _metadata(self) -> tuple:
        request = get_model_metadata_pb2.GetModelMetadataRequest(
            model_spec=self._model_spec(), metadata_field=["signature_def"]
        )
        response = self._call("GetModelMetadata", self._predictions.GetModelMetadata, request)
        signature_map = get_model_metadata_pb2.SignatureDefMap()
        response.metadata["signature_def"].Unpack(signature_map)
        as_json = json_format.MessageToDict(signature_map, preserving_proto_field_name=True)
        spec = response.model_spec
        version = spec.version.value if spec.HasField("version") else None
        return spec.name, version, as_json.get("signature_def", {})

    def _status(self) -> list[tuple]:
        request = get_model_status_pb2.GetModelStatusRequest(model_spec=self._model_spec())
        response = self._call("GetModelStatus", self._models.GetModelStatus, request)
        states = get_model_status_pb2.ModelVersionStatus.State
        return [
            (
                item.version,
                states.Name(item.state),
                item.status.DESCRIPTOR.fields_by_name["error_code"]
                .enum_type.values_by_number[item.status.error_code]
                .name,
                item.status.error_message,
            )
            for item in response.model_version_status
        ]

    def close(self) -> None:
        """Closes the channel."""
        self._channel.close()

    def __enter__(self) -> GrpcClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
