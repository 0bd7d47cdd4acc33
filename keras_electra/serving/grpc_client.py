"""A gRPC client for models served by TensorFlow Serving (port 8500 by default).

Only ``UNAVAILABLE`` is retried, and not a TLS failure (:mod:`keras_electra.serving.tls`);
every other failure raises :class:`ServingError` at once. TLS and credentials:
docs/serving.md, "Exposing the server".
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

from keras_electra.limits import MAX_BATCH_SIZE
from keras_electra.serving import tls as tls_failures
from keras_electra.serving._retry import ModelClient, RetriesExhausted, call_with_retries
from keras_electra.serving.credentials import (
    CallCredentials,
    Headers,
    Pem,
    Token,
    check_client_pair,
    check_plaintext,
    read_pem,
)
from keras_electra.serving.errors import ServingError
from keras_electra.serving.metadata import signature_defs_to_dict
from keras_electra.serving.tensors import (
    make_example,
    ndarray_to_tensor_proto,
    tensor_proto_to_ndarray,
)


def host_port(target: str) -> tuple[str, int] | None:
    """The host and port of a gRPC target (``host:port``, ``[::1]:port``,
    ``dns:///host:port``, ``ipv4:``/``ipv6:`` addresses), or None (a Unix socket).

    Examples:
        >>> host_port("dns:///localhost:8500"), host_port("[::1]:8500"), host_port("unix:/s")
        (('localhost', 8500), ('::1', 8500), None)
    """
    for prefix in ("dns:///", "dns:", "ipv4:", "ipv6:"):
        target = target.removeprefix(prefix)
    host, _, port = target.rpartition(":")
    if not host or not port.isdigit():
        return None
    return host.strip("[]"), int(port)


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
            function is called before each call (for tokens that expire). Only over
            TLS, unless ``insecure``.
        headers: More metadata for every call (``{"x-api-key": KEY}``), or a
            function returning it. Only over TLS, unless ``insecure``.
        insecure: Send ``token`` and ``headers`` over a plaintext channel too (else a
            client without TLS refuses them).
        max_batch_size: Most rows per request (:data:`~keras_electra.limits.MAX_BATCH_SIZE`,
            TF Serving's batching limit); larger batches go as consecutive requests.

    Raises:
        ServingError: credentials without TLS and without ``insecure``; a client
            certificate without its key.

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
        insecure: bool = False,
        max_batch_size: int | None = MAX_BATCH_SIZE,
    ) -> None:
        super().__init__(
            model_name, version, version_label, timeout, retries, backoff, max_batch_size
        )
        self.target = target
        check_client_pair(client_certificate, client_key)
        self.tls = bool(tls or root_certificates is not None or client_certificate is not None)
        self.credentials = CallCredentials(token, headers)
        if not self.tls:
            check_plaintext(target, self.credentials, insecure)
        limit = max_message_mb * 1024 * 1024
        options = [(f"grpc.max_{way}_message_length", limit) for way in ("send", "receive")]
        # The certificates, kept to tell a TLS failure's cause (tls.diagnose).
        self._pems = (
            read_pem(root_certificates, "root certificate"),
            read_pem(client_certificate, "client certificate"),
            read_pem(client_key, "client key"),
        )
        if self.tls:
            root, chain, key = self._pems
            secure = grpc.ssl_channel_credentials(
                root_certificates=root, private_key=key, certificate_chain=chain
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

    def _tls_failure(self, details: str) -> ServingError | None:
        """The error of a failed TLS connection, from gRPC's text or, where that does not
        say (a closed socket; another address's error), a handshake of our own; else None."""
        address = host_port(self.target)
        host = address[0] if address else self.target
        sent_certificate = self._pems[1] is not None
        failure = tls_failures.failure_from_text(details, host, sent_certificate)
        if failure is None and address is not None:
            failure = tls_failures.diagnose(*address, min(self.timeout, 5.0), *self._pems)
        if failure is None:
            return None
        return ServingError(
            f"TLS to TF Serving at {self.target} failed: {failure}.",
            code="UNAVAILABLE",
            details=details,
        )

    def _call(self, rpc: str, method: Callable[..., Any], request: Any) -> Any:
        def attempt() -> Any:
            metadata = tuple(self.credentials.headers().items()) or None
            try:
                return method(request, timeout=self.timeout, metadata=metadata)
            except grpc.RpcError as err:
                if self.tls and err.code() == grpc.StatusCode.UNAVAILABLE:  # type: ignore[attr-defined]
                    failure = self._tls_failure(err.details())  # type: ignore[attr-defined]
                    if failure is not None:  # not retried: trying again cannot fix it
                        raise failure from None
                raise

        def retryable(err: Exception) -> bool:
            return isinstance(err, grpc.RpcError) and err.code() == grpc.StatusCode.UNAVAILABLE

        try:
            return call_with_retries(
                attempt, retries=self.retries, backoff=self.backoff, retryable=retryable
            )
        except RetriesExhausted as exhausted:
            details = exhausted.error.details()  # type: ignore[attr-defined]
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

        A batch of more than ``max_batch_size`` rows goes as consecutive requests, whose
        outputs are joined in order (:func:`keras_electra.limits.join_outputs`); the
        strings of the text inputs are cut as the export cuts them
        (:func:`keras_electra.limits.cap_texts`).

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
            Per example, the ``(label, score)`` pairs in the model's class order
            (``max_batch_size`` examples per request, as :meth:`predict`).

        Raises:
            ServingError: If the server rejects the request or cannot be reached.

        Examples:
            >>> client.classify([{"text": "a wonderful film"}])  # doctest: +SKIP
            [[('negative', 0.03), ('positive', 0.97)]]
        """
        return self._classify_in_parts(examples, lambda part: self._classify(part, signature_name))

    def _classify(
        self, examples: Sequence[Mapping[str, Any]], signature_name: str
    ) -> list[list[tuple[str, float]]]:
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
