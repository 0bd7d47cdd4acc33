"""The stand-in server: TF Serving's gRPC and REST APIs on 127.0.0.1, and warmup replay.

The TF Serving binary is not needed: :class:`ModelServer` loads SavedModels
with TF Serving's loader semantics (:class:`SignatureRunner`) and serves TF
Serving's gRPC services (``PredictionService``: Predict, Classify, Regress,
GetModelMetadata; ``ModelService``: GetModelStatus) and REST API (predict in
row and columnar form, classify, regress, metadata, status) on 127.0.0.1. Bad requests
come back as ``INVALID_ARGUMENT`` / HTTP 400 and the server keeps serving.
:func:`replay_warmup` runs a SavedModel's warmup file the way the server does
when it loads a version.
"""

from __future__ import annotations

import json
import os
import ssl
import tempfile
import threading
from collections.abc import Mapping
from concurrent import futures
from http.server import ThreadingHTTPServer
from types import TracebackType

import grpc
import tensorflow as tf
from tensorflow_serving.apis import prediction_log_pb2

from keras_electra.serving.errors import ServingError
from keras_electra.serving.warmup import MAX_WARMUP_RECORDS, WARMUP_FILE

from ._grpc_server import add_servicers
from ._rest_server import make_handler
from .runner import SignatureRunner
from .servable import ServedModel, find_versions

__all__ = ["ModelServer", "SignatureRunner", "replay_warmup"]


def replay_warmup(export_dir: str | os.PathLike[str], *, model_name: str = "model") -> int:
    """Replays a SavedModel's warmup requests like TF Serving does at load time.

    Reads ``assets.extra/tf_serving_warmup_requests`` (a TFRecord file of
    ``PredictionLog``) and runs each Predict or Classify record through the
    same path a server request takes. A missing file is fine (TF Serving
    treats warmup data as optional) and counts 0.

    Args:
        export_dir: The SavedModel version directory.
        model_name: The name the requests are resolved against (any record's
            model name is replaced, as TF Serving ignores it during warmup).

    Returns:
        The number of records replayed.

    Raises:
        ServingError: If a record cannot be parsed, has an unsupported type,
            fails, or there are more than 1000 records.

    Example:
        >>> replay_warmup("saved_models/electra/1")
        4
    """
    path = os.path.join(os.fspath(export_dir), WARMUP_FILE)
    if not os.path.exists(path):
        return 0
    runner = SignatureRunner(export_dir)
    model = ServedModel(model_name, {1: runner})
    count = 0
    try:
        for record in tf.data.TFRecordDataset(path).as_numpy_iterator():
            count += 1
            if count > MAX_WARMUP_RECORDS:
                raise ServingError(
                    f"Number of warmup records exceeds the maximum ({MAX_WARMUP_RECORDS}) "
                    f"at {path}."
                )
            log = prediction_log_pb2.PredictionLog()
            try:
                log.ParseFromString(record)
            except Exception as err:  # protobuf raises DecodeError
                raise ServingError(f"Failed to parse warmup record {count} from {path}.") from err
            kind = log.WhichOneof("log_type")
            try:
                if kind == "predict_log":
                    request = log.predict_log.request
                    request.model_spec.name = model_name
                    request.model_spec.ClearField("version")
                    model.predict(request)
                elif kind == "classify_log":
                    request = log.classify_log.request
                    request.model_spec.name = model_name
                    request.model_spec.ClearField("version")
                    model.classify(request)
                elif kind == "regress_log":
                    request = log.regress_log.request
                    request.model_spec.name = model_name
                    request.model_spec.ClearField("version")
                    model.regress(request)
                else:
                    raise ServingError(
                        f"Unsupported log_type for warmup: {kind}", code="UNIMPLEMENTED"
                    )
            except ServingError as err:
                raise ServingError(
                    f"Warmup record {count} ({kind}) in {path} failed: {err}", code=err.code
                ) from err
    except tf.errors.DataLossError as err:
        raise ServingError(
            f"{path} is not a valid TFRecord file ({err.message}); warmup data must be TFRecords."
        ) from err
    finally:
        runner.close()
    return count


class _HTTPServer(ThreadingHTTPServer):
    """A threading HTTP server whose request threads do not hold up the process's exit;
    it answers until :meth:`ModelServer.stop`, however many requests come."""

    daemon_threads = True


class _RequireMetadata(grpc.ServerInterceptor):
    """What an authenticating proxy in front of TF Serving does: a call without the
    expected metadata is refused with UNAUTHENTICATED."""

    def __init__(self, name: str, value: str) -> None:
        self.expected = (name.lower(), value)

    def intercept_service(self, continuation, handler_call_details):
        if self.expected in tuple(handler_call_details.invocation_metadata or ()):
            return continuation(handler_call_details)

        def refuse(request, context):
            context.abort(grpc.StatusCode.UNAUTHENTICATED, "missing or wrong credentials")

        return grpc.unary_unary_rpc_method_handler(refuse)


def _requiring_header(handler: type, name: str, value: str) -> type:
    """The REST handler behind a proxy: a request without the header gets HTTP 401."""

    class Checked(handler):
        def parse_request(self) -> bool:
            if not super().parse_request():
                return False
            if self.headers.get(name) == value:
                return True
            data = json.dumps({"error": "missing or wrong credentials"}).encode("utf-8")
            self.send_response(401)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            return False

    return Checked


class ModelServer:
    """A TF Serving stand-in on 127.0.0.1 with real gRPC and HTTP servers.

    Like TF Serving's default version policy, only the highest numeric version
    folder under the base path is loaded (a directory that is itself a
    SavedModel is served as version 1).

    Args:
        export_base_dir_or_dir: The model base path (version folders inside) or
            a SavedModel directory.
        model_name: The name clients use.
        host: The interface to bind; keep the default.
        grpc_port: The gRPC port; 0 picks a free one (see :attr:`grpc_target`).
        rest_port: The REST port; 0 picks a free one (see :attr:`rest_url`).
        version_labels: Optional version labels, e.g. ``{"stable": 1}``.
        method_name_check: Mirror of ``--enable_signature_method_name_check``.
        tls: ``(private key, certificate chain)`` PEM bytes: both servers speak TLS
            (gRPC over TLS, HTTPS), as behind a TLS-terminating proxy.
        client_ca: With ``tls``, require client certificates signed by this CA (PEM).
        required_header: ``(name, value)`` every call must carry (gRPC metadata or an
            HTTP header), as an authenticating proxy requires; else UNAUTHENTICATED
            (gRPC) or HTTP 401.

    Example:
        >>> with ModelServer("saved_models/electra", "electra") as server:
        ...     with GrpcClient(server.grpc_target, "electra") as client:
        ...         client.predict({"text": ["the chef cooked the meal"]})
    """

    def __init__(
        self,
        export_base_dir_or_dir: str | os.PathLike[str],
        model_name: str,
        *,
        host: str = "127.0.0.1",
        grpc_port: int = 0,
        rest_port: int = 0,
        version_labels: Mapping[str, int] | None = None,
        method_name_check: bool = False,
        tls: tuple[bytes, bytes] | None = None,
        client_ca: bytes | None = None,
        required_header: tuple[str, str] | None = None,
    ) -> None:
        self._tls, self._client_ca, self._required = tls, client_ca, required_header
        versions = find_versions(export_base_dir_or_dir)
        self.version = max(versions)
        self.export_dir = versions[self.version]
        self.model_name = model_name
        self.host = host
        self._ports = (grpc_port, rest_port)
        self._labels = dict(version_labels or {})
        self._method_name_check = method_name_check
        self._runner: SignatureRunner | None = None
        self._grpc: grpc.Server | None = None
        self._http: _HTTPServer | None = None
        self._http_thread: threading.Thread | None = None
        self._stopping = threading.Event()
        self.grpc_port = 0
        self.rest_port = 0

    @property
    def grpc_target(self) -> str:
        """``host:port`` of the gRPC server."""
        return f"{self.host}:{self.grpc_port}"

    @property
    def rest_url(self) -> str:
        """Base URL of the REST server, e.g. ``http://127.0.0.1:8501``."""
        return f"{'https' if self._tls else 'http'}://{self.host}:{self.rest_port}"

    def start(self) -> ModelServer:
        """Loads the model and starts both servers."""
        self._runner = SignatureRunner(self.export_dir)
        model = ServedModel(
            self.model_name,
            {self.version: self._runner},
            version_labels=self._labels,
            method_name_check=self._method_name_check,
        )
        options = [("grpc.max_send_message_length", -1), ("grpc.max_receive_message_length", -1)]
        interceptors = [_RequireMetadata(*self._required)] if self._required else []
        self._grpc = grpc.server(
            futures.ThreadPoolExecutor(max_workers=4), options=options, interceptors=interceptors
        )
        add_servicers(self._grpc, model)
        address = f"{self.host}:{self._ports[0]}"
        if self._tls:
            secure = grpc.ssl_server_credentials(
                [self._tls],
                root_certificates=self._client_ca,
                require_client_auth=self._client_ca is not None,
            )
            self.grpc_port = self._grpc.add_secure_port(address, secure)
        else:
            self.grpc_port = self._grpc.add_insecure_port(address)
        if not self.grpc_port:
            raise ServingError(f"Cannot bind the gRPC port {self.host}:{self._ports[0]}.")
        self._grpc.start()
        handler = make_handler(model)
        if self._required:
            handler = _requiring_header(handler, *self._required)
        self._http = _HTTPServer((self.host, self._ports[1]), handler)
        if self._tls:
            self._http.socket = _server_tls(self._tls, self._client_ca).wrap_socket(
                self._http.socket, server_side=True
            )
        self._http.timeout = 0.1
        self.rest_port = self._http.server_address[1]
        self._http_thread = threading.Thread(target=self._serve_http, daemon=True)
        self._http_thread.start()
        return self

    def _serve_http(self) -> None:
        server = self._http
        assert server is not None
        while not self._stopping.is_set():
            server.handle_request()  # returns after one request or a 0.1 s timeout

    def stop(self) -> None:
        """Stops both servers and closes the model session."""
        self._stopping.set()
        if self._grpc is not None:
            self._grpc.stop(grace=None).wait()
        if self._http_thread is not None:
            self._http_thread.join(timeout=5)
        if self._http is not None:
            self._http.server_close()
        if self._runner is not None:
            self._runner.close()

    def __enter__(self) -> ModelServer:
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def _server_tls(pair: tuple[bytes, bytes], client_ca: bytes | None) -> ssl.SSLContext:
    """The HTTPS side's TLS context (``ssl`` reads key and chain from a file)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    with tempfile.NamedTemporaryFile(suffix=".pem") as handle:
        handle.write(pair[1] + b"\n" + pair[0])
        handle.flush()
        context.load_cert_chain(handle.name)
    if client_ca is not None:
        context.verify_mode = ssl.CERT_REQUIRED
        context.load_verify_locations(cadata=client_ca.decode("ascii"))
    return context
