"""A gRPC client for models served by TensorFlow Serving (port 8500 by default).

Uses the ``tensorflow-serving-api`` stubs: ``PredictionService`` (Predict,
Classify, GetModelMetadata) and ``ModelService`` (GetModelStatus). Only ``UNAVAILABLE``
is retried; every other failure raises :class:`ServingError` at once with the server's
message. TLS and an authenticating proxy's credentials: docs/serving.md and
:mod:`keras_electra.serving.credentials`.
"""

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
)

from keras_electra.serving._retry import ModelClient, RetriesExhausted, call_with_retries
from keras_electra.serving.credentials import (
    CallCredentials,
    Headers,
    Pem,
    Token,
    check_client_pair,
    read_pem,
)
from keras_electra.serving.errors import ServingError
from keras_electra.serving.metadata import signature_defs_to_dict
from keras_electra.serving.tensors import (
    make_example,
    ndarray_to_tensor_proto,
    tensor_proto_to_ndarray,
)


class GrpcClient(ModelClient):
    """Talks to one model on a TF Serving gRPC endpoint.

    Args:
        target: ``host:port`` of the server, e.g. ``"localhost:8500"``.
        model_name: The served model's name.
        version: Pin a model version; the latest loaded version if ``None``.
        version_label: Or pin a version label such as ``"stable"``.
        timeout: Deadline of each call, in seconds.
        retries: Extra attempts for calls failing with ``UNAVAILABLE``.
        max_message_mb: Send and receive message size limit, in MiB (gRPC's
            default receive limit is 4 MiB, too small for big batches).
        backoff: First wait between attempts, in seconds (doubles each time).
        tls: Encrypt the channel, trusting the system's certificate authorities
            (implied by ``root_certificates`` and a client certificate).
        root_certificates: The CA that signed the server's certificate (PEM bytes,
            text or file), for a private CA.
        client_certificate: For mutual TLS: this client's certificate (PEM), with
            ``client_key``.
        client_key: The client certificate's private key (PEM).
        token: Sent with every call as ``authorization: Bearer TOKEN`` metadata; a
            function is called before each call (for tokens that expire).
        headers: More metadata for every call (``{"x-api-key": KEY}``), or a
            function returning it.

    Examples:
        >>> with GrpcClient("localhost:8500", "electra") as client:  # doctest: +SKIP
        ...     outputs = client.predict({"text": ["the chef cooked the meal"]})
        >>> outputs["replaced_prob"].shape  # doctest: +SKIP
        (1, 5)
        >>> secured = GrpcClient("serving.example.com:443", "electra", tls=True,
        ...                      token=lambda: fetch_token())  # doctest: +SKIP
    """

    def __init__(
        self,
        target: str,
        model_name: str,
        *,
        version: int | None = None,
        version_label: str | None = None,
        timeout: float = 10.0,
        retries: int = 3,
        max_message_mb: int = 256,
        backoff: float = 0.5,
        tls: bool = False,
        root_certificates: Pem | None = None,
        client_certificate: Pem | None = None,
        client_key: Pem | None = None,
        token: Token | None = None,
        headers: Headers | None = None,
    ) -> None:
        super().__init__(model_name, version, version_label, timeout, retries, backoff)
        self.target = target
        check_client_pair(client_certificate, client_key)
        self.tls = bool(tls or root_certificates is not None or client_certificate is not None)
        self.credentials = CallCredentials(token, headers)
        limit = max_message_mb * 1024 * 1024
        options = [(f"grpc.max_{way}_message_length", limit) for way in ("send", "receive")]
        if self.tls:
            secure = grpc.ssl_channel_credentials(
                root_certificates=read_pem(root_certificates, "root certificate"),
                private_key=read_pem(client_key, "client key"),
                certificate_chain=read_pem(client_certificate, "client certificate"),
            )
            self._channel = grpc.secure_channel(target, secure, options=options)
        else:
            self._channel = grpc.insecure_channel(target, options=options)
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
            return method(request, timeout=self.timeout, metadata=metadata)

        def retryable(err: Exception) -> bool:
            return isinstance(err, grpc.RpcError) and err.code() == grpc.StatusCode.UNAVAILABLE

        try:
            return call_with_retries(
                attempt, retries=self.retries, backoff=self.backoff, retryable=retryable
            )
        except RetriesExhausted as exhausted:
            details = exhausted.error.details()  # type: ignore[attr-defined]
            if self.tls and "ssl" in details.lower():
                raise ServingError(
                    f"Could not open a TLS connection to TF Serving at {self.target} "
                    f"({details.split(': ')[-1]}); pass root_certificates= the CA that "
                    "signed its certificate (--root-certificates), and a client "
                    "certificate if it asks for one.",
                    code="UNAVAILABLE",
                    details=details,
                ) from None
            raise ServingError(
                f"Could not reach TF Serving at {self.target} after {exhausted.attempts} "
                f"attempts (UNAVAILABLE: {details}); check that the server is running and "
                "serving gRPC on that address.",
                code="UNAVAILABLE",
                details=details,
            ) from None
        except grpc.RpcError as err:
            code, details = err.code(), err.details()  # type: ignore[attr-defined]
            if code in (grpc.StatusCode.UNAUTHENTICATED, grpc.StatusCode.PERMISSION_DENIED):
                message = (
                    f"TF Serving at {self.target} refused {rpc} for model "
                    f"'{self.model_name}' ({code.name}: {details}); pass the credentials "
                    "its proxy expects (token= or headers=; --token-file)."
                )
            elif code == grpc.StatusCode.DEADLINE_EXCEEDED:
                message = (
                    f"TF Serving at {self.target} did not answer {rpc} for model "
                    f"'{self.model_name}' within {self.timeout:g} s; raise the timeout or "
                    "check the server's load."
                )
            else:
                message = (
                    f"TF Serving at {self.target} rejected {rpc} for model "
                    f"'{self.model_name}' with {code.name}: {details}"
                )
            raise ServingError(message, code=code.name, details=details) from None

    def predict(
        self,
        inputs: Mapping[str, Any],
        signature_name: str = "serving_default",
        *,
        output_filter: Sequence[str] | None = None,
    ) -> dict[str, np.ndarray]:
        """Runs a signature through ``PredictionService.Predict``.

        Args:
            inputs: Input alias to array-like. Strings may be ``str`` (sent as
                UTF-8) or ``bytes``; numeric dtypes are sent as they are.
            signature_name: The signature to run.
            output_filter: Output aliases to return; all if ``None``.

        Returns:
            Output alias to numpy array (strings as object arrays of ``bytes``).

        Raises:
            ServingError: If the server rejects the request or cannot be reached.

        Examples:
            >>> pair = {"text_a": ["a dog"], "text_b": ["a cat"]}
            >>> client.predict(pair, "score_pair")["num_tokens"]  # doctest: +SKIP
            array([4], dtype=int32)
        """
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

    def classify(
        self, examples: Sequence[Mapping[str, Any]], signature_name: str = "classify"
    ) -> list[list[tuple[str, float]]]:
        """Classifies examples through ``PredictionService.Classify``.

        Args:
            examples: One dict per example, feature name to ``str``/``bytes``
                (bytes list), ``int`` (int64 list), ``float`` (float list), or a
                list of those, e.g. ``{"text": "great movie"}``.
            signature_name: A signature following the Classify contract.

        Returns:
            Per example, the ``(label, score)`` pairs in the model's class order.

        Raises:
            ServingError: If the server rejects the request or cannot be reached.

        Examples:
            >>> client.classify([{"text": "a wonderful film"}])  # doctest: +SKIP
            [[('negative', 0.03), ('positive', 0.97)]]
        """
        request = classification_pb2.ClassificationRequest(
            model_spec=self._model_spec(signature_name)
        )
        for example in examples:
            try:
                request.input.example_list.examples.add().CopyFrom(make_example(example))
            except TypeError as err:
                raise ServingError(f"An example cannot be sent to TF Serving: {err}.") from err
        response = self._call("Classify", self._predictions.Classify, request)
        return [
            [(item.label, float(item.score)) for item in result.classes]
            for result in response.result.classifications
        ]

    def metadata(self) -> dict[str, Any]:
        """Returns the model's signatures via ``GetModelMetadata``.

        Returns:
            ``{"model_name", "version", "signatures"}``; see
            :mod:`keras_electra.serving.metadata` for the layout.

        Examples:
            >>> client.metadata()["signatures"]["serving_default"]["inputs"]  # doctest: +SKIP
            {'text': {'dtype': 'DT_STRING', 'shape': [-1]}}
        """
        request = get_model_metadata_pb2.GetModelMetadataRequest(
            model_spec=self._model_spec(), metadata_field=["signature_def"]
        )
        response = self._call("GetModelMetadata", self._predictions.GetModelMetadata, request)
        signature_map = get_model_metadata_pb2.SignatureDefMap()
        response.metadata["signature_def"].Unpack(signature_map)
        as_json = json_format.MessageToDict(signature_map, preserving_proto_field_name=True)
        spec = response.model_spec
        return {
            "model_name": spec.name,
            "version": spec.version.value if spec.HasField("version") else None,
            "signatures": signature_defs_to_dict(as_json.get("signature_def", {})),
        }

    def status(self) -> list[dict[str, Any]]:
        """Returns the state of the model's versions via ``ModelService.GetModelStatus``.

        Returns:
            One dict per version: ``version``, ``state`` (e.g. ``"AVAILABLE"``),
            ``error_code`` and ``error_message``.

        Examples:
            >>> client.status()  # doctest: +SKIP
            [{'version': 1, 'state': 'AVAILABLE', 'error_code': 'OK', 'error_message': ''}]
        """
        request = get_model_status_pb2.GetModelStatusRequest(model_spec=self._model_spec())
        response = self._call("GetModelStatus", self._models.GetModelStatus, request)
        states = get_model_status_pb2.ModelVersionStatus.State
        return [
            {
                "version": item.version,
                "state": states.Name(item.state),
                "error_code": item.status.DESCRIPTOR.fields_by_name["error_code"]
                .enum_type.values_by_number[item.status.error_code]
                .name,
                "error_message": item.status.error_message,
            }
            for item in response.model_version_status
        ]

    def close(self) -> None:
        """Closes the channel."""
        self._channel.close()

    def __enter__(self) -> GrpcClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
