"""A REST client for models served by TensorFlow Serving (port 8501 by default).

Standard library only, no TensorFlow import. It follows no redirect (the credentials
would go along) and does not retry a TLS failure; retries, errors, TLS and credentials:
docs/serving.md, "Exposing the server".
"""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from http.client import HTTPException
from typing import Any, Literal, NoReturn
from urllib.parse import quote, urlsplit

import numpy as np

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
)
from keras_electra.serving.errors import ServingError
from keras_electra.serving.json_codec import as_array, decode_tensor, encode_tensor
from keras_electra.serving.metadata import metadata_to_dict

PredictFormat = Literal["columnar", "row"]
# HTTP status -> gRPC code name, the inverse of TF Serving's mapping.
_CODES = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    409: "ABORTED",
    429: "RESOURCE_EXHAUSTED",
    499: "CANCELLED",
    500: "INTERNAL",
    501: "UNIMPLEMENTED",
    503: "UNAVAILABLE",
    504: "DEADLINE_EXCEEDED",
}


def _is_b64(value: Any) -> bool:
    return isinstance(value, dict) and set(value) == {"b64"}


def predict_body(
    inputs: Mapping[str, Any], signature_name: str | None, format: PredictFormat
) -> dict[str, Any]:
    """Builds the JSON body of a REST predict request.

    Args:
        inputs: Input alias to array-like (``str`` → JSON string, ``bytes`` →
            ``{"b64": ...}``).
        signature_name: The signature; omitted from the body if ``None``.
        format: ``"columnar"`` (``{"inputs": {name: tensor}}``) or ``"row"``
            (``{"instances": [...]}``: one item per batch row, an object per row
            when there are several inputs, the bare value when there is one).

    Raises:
        ServingError: For row format with inputs of different batch sizes.

    Examples:
        >>> predict_body({"x": [1.0, 2.0]}, None, "row")
        {'instances': [1.0, 2.0]}
    """
    body: dict[str, Any] = {} if signature_name is None else {"signature_name": signature_name}
    if format == "columnar":
        body["inputs"] = {name: encode_tensor(value) for name, value in inputs.items()}
        return body
    if format != "row":
        raise ValueError(f"format must be 'columnar' or 'row', not {format!r}")
    arrays = {name: as_array(value) for name, value in inputs.items()}
    sizes = {name: (array.shape[0] if array.ndim else None) for name, array in arrays.items()}
    if None in sizes.values() or len(set(sizes.values())) > 1:
        raise ServingError(
            f"The row format needs every input to have the same batch size (got {sizes}); "
            "use format='columnar'."
        )
    if len(arrays) == 1:
        body["instances"] = encode_tensor(next(iter(arrays.values())))
    else:
        batch = next(iter(sizes.values())) or 0
        body["instances"] = [
            {name: encode_tensor(array[i]) for name, array in arrays.items()} for i in range(batch)
        ]
    return body


def _encode_feature(value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        return [_encode_feature(item) for item in value]
    if isinstance(value, (bytes, str, bool, int, float, np.generic)):
        return encode_tensor(value)
    raise ServingError(f"An example feature cannot hold a {type(value).__name__} value.")


def classify_body(examples: Sequence[Mapping[str, Any]], signature_name: str | None) -> dict:
    """Builds the JSON body of a REST classify request.

    Args:
        examples: One dict per example: feature name to ``str``, ``bytes``
            (sent as b64), ``int``, ``float`` or a list of those.
        signature_name: The signature; omitted if ``None``.

    Returns:
        ``{"signature_name": ..., "examples": [...]}``.

    Examples:
        >>> classify_body([{"text": "fine"}], "classify")
        {'signature_name': 'classify', 'examples': [{'text': 'fine'}]}
    """
    body: dict[str, Any] = {} if signature_name is None else {"signature_name": signature_name}
    body["examples"] = [
        {name: _encode_feature(value) for name, value in example.items()} for example in examples
    ]
    return body


def _closed(url: str, reason: BaseException, times: str = "", tls: str = "") -> ServingError:
    return ServingError(
        f"TF Serving at {url} closed the connection without an answer "
        f"({reason or type(reason).__name__}){times}; check that the URL is its REST port "
        f"(--rest_api_port) and whether a proxy in front of it wants credentials{tls}.",
        code="UNAVAILABLE",
    )


class _RefuseRedirects(urllib.request.HTTPRedirectHandler):
    """urllib's redirect handler follows a 30x to any URL, resending the request's headers
    (the credentials) there, https to http included; this one follows none."""

    def redirect_request(self, req, fp, code, msg, headers, newurl) -> NoReturn:  # noqa: ANN001
        fp.close()
        location = newurl if len(newurl) <= 200 else newurl[:200] + "..."
        raise ServingError(
            f"TF Serving at {req.full_url} answered with a redirect (HTTP {code}) to "
            f"{location}, which the client does not follow (the request's credentials would "
            "go there too); use that address as the URL if you trust it.",
            http_status=code,
        )


class RestClient(ModelClient):
    """Talks to one model on a TF Serving REST endpoint.

    Args:
        base_url: The server, e.g. ``"http://localhost:8501"`` (``http://`` is
            added if missing).
        model_name: The served model's name.
        version: Pin a model version; the latest if ``None``.
        version_label: Or pin a version label such as ``"canary"``.
        timeout: Socket timeout of each request, in seconds.
        retries: Extra attempts when the connection is refused or the server
            answers 503.
        backoff: First wait between attempts, in seconds (doubles each time).
        typed_outputs: Cast predict outputs to the signature's dtypes (float32,
            int32, ...) using the model's metadata, fetched once and cached.
            If ``False``, dtypes are inferred from the JSON (decimals → float32,
            whole numbers → int64, strings → bytes).
        root_certificates: For an ``https://`` URL signed by a private CA: that CA
            (PEM bytes, text or file).
        client_certificate: For mutual TLS: this client's certificate (PEM), with
            ``client_key``.
        client_key: The client certificate's private key (PEM).
        token: Sent with every request as ``Authorization: Bearer TOKEN``; a
            function is called before each request (for tokens that expire). Only to
            an ``https://`` URL, unless ``insecure``.
        headers: More headers for every request (``{"X-Api-Key": KEY}``), or a
            function returning them. Only to an ``https://`` URL, unless ``insecure``.
        insecure: Send ``token`` and ``headers`` to an ``http://`` URL too (else they
            are refused there).
        max_batch_size: Most rows per request (:data:`~keras_electra.limits.MAX_BATCH_SIZE`,
            TF Serving's batching limit); larger batches go as consecutive requests.

    Raises:
        ServingError: credentials for an ``http://`` URL without ``insecure``,
            certificates for one, a URL with ``user:password@``.

    Examples:
        >>> client = RestClient("http://localhost:8501", "electra")  # doctest: +SKIP
        >>> text = {"text": ["the chef cooked the meal"]}
        >>> client.predict(text, format="row")["num_tokens"]  # doctest: +SKIP
        array([5], dtype=int32)
    """

    def __init__(
        self,
        base_url: str,
        model_name: str,
        *,
        version: int | None = None,
        version_label: str | None = None,
        timeout: float = 10.0,
        retries: int = 3,
        backoff: float = 0.5,
        typed_outputs: bool = True,
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
        if "://" not in base_url:
            base_url = "http://" + base_url
        if "@" in base_url.split("://", 1)[1].split("/", 1)[0]:
            raise ServingError(
                "Pass credentials with token= or headers=, not in the URL (where errors "
                "and logs would show them)."
            )
        self.base_url = base_url.rstrip("/")
        check_client_pair(client_certificate, client_key)
        self.credentials = CallCredentials(token, headers)
        self._tls = None
        self._pems = (root_certificates, client_certificate, client_key)
        if self.base_url.startswith("https://"):
            self._tls = tls_failures.client_context(*self._pems)
        elif root_certificates is not None or client_certificate is not None:
            raise ServingError(
                f"Certificates were given but '{self.base_url}' is not an https:// URL."
            )
        else:
            check_plaintext(self.base_url, self.credentials, insecure)
        self._opener = urllib.request.build_opener(
            urllib.request.HTTPSHandler(context=self._tls), _RefuseRedirects()
        )
        self.typed_outputs = typed_outputs
        self._metadata: dict[str, Any] | None = None

    @property
    def model_url(self) -> str:
        """``base_url/v1/models/NAME[/versions/N|/labels/L]``."""
        url = f"{self.base_url}/v1/models/{quote(self.model_name, safe='')}"
        if self.version is not None:
            url += f"/versions/{self.version}"
        elif self.version_label is not None:
            url += f"/labels/{quote(self.version_label, safe='')}"
        return url

    def _tls_failure(self, url: str, error: BaseException) -> ServingError | None:
        """The error of a failed TLS connection (from the ``ssl`` error, or where a closed
        or reset connection does not say, a handshake of our own), else None."""
        if self._tls is None or not isinstance(error, OSError | HTTPException):
            return None
        address = urlsplit(url)
        host, port = address.hostname or "", address.port or 443
        sent_certificate = self._pems[1] is not None
        failure = tls_failures.failure_from_error(error, host, sent_certificate)
        unclear = ssl.SSLError | ConnectionResetError | ConnectionAbortedError | HTTPException
        if failure is None and isinstance(error, unclear):  # (a refusal: no server to ask)
            failure = tls_failures.diagnose(host, port, min(self.timeout, 5.0), *self._pems)
        if failure is None:
            return None
        return ServingError(f"TLS to TF Serving at {url} failed: {failure}.", code="UNAVAILABLE")

    def _request(self, url: str, body: Mapping[str, Any] | None = None) -> Any:
        data = None if body is None else json.dumps(body).encode("utf-8")

        def attempt() -> bytes:
            headers = self.credentials.headers()
            if body is not None:
                headers["Content-Type"] = "application/json"
            request = urllib.request.Request(
                url, data=data, method="GET" if body is None else "POST", headers=headers
            )
            try:
                with self._opener.open(request, timeout=self.timeout) as answer:
                    return answer.read()
            except (urllib.error.URLError, ssl.SSLError, ConnectionError, HTTPException) as err:
                reason = err.reason if isinstance(err, urllib.error.URLError) else err
                failure = self._tls_failure(url, reason)
                if failure is not None:  # not retried: trying again cannot fix it
                    raise failure from None
                raise

        def retryable(err: Exception) -> bool:
            if isinstance(err, urllib.error.HTTPError):
                return err.code == 503
            reason = err.reason if isinstance(err, urllib.error.URLError) else err
            return isinstance(reason, ConnectionRefusedError | ConnectionResetError)

        try:
            raw = call_with_retries(
                attempt, retries=self.retries, backoff=self.backoff, retryable=retryable
            )
        except RetriesExhausted as exhausted:
            err = exhausted.error
            if isinstance(err, urllib.error.HTTPError):
                raise self._http_error(url, err) from None
            reason = getattr(err, "reason", err)
            if not isinstance(reason, ConnectionRefusedError):  # a reset, a hang-up
                times = f" on all {exhausted.attempts} attempts" if exhausted.attempts > 1 else ""
                raise _closed(url, reason, times) from None
            raise ServingError(
                f"Could not reach TF Serving at {url} after {exhausted.attempts} attempts "
                f"({reason}); check that the server is running and that its REST port "
                "(--rest_api_port) is the one in the URL.",
                code="UNAVAILABLE",
            ) from None
        except urllib.error.HTTPError as err:
            raise self._http_error(url, err) from None
        except TimeoutError as err:
            raise ServingError(
                f"TF Serving at {url} did not answer within {self.timeout:g} s; raise the "
                "timeout or check the server's load.",
                code="DEADLINE_EXCEEDED",
            ) from err
        except (urllib.error.URLError, ssl.SSLError, ConnectionError, HTTPException) as err:
            # urllib wraps only what fails while connecting: a reset or closed connection
            # later (or an SSLError that tls did not recognize) reaches us bare.
            reason = err.reason if isinstance(err, urllib.error.URLError) else err
            if isinstance(reason, ssl.SSLError):
                raise ServingError(
                    f"Could not open a TLS connection to TF Serving at {url} "
                    f"({getattr(reason, 'reason', None) or reason}).",
                    code="UNAVAILABLE",
                ) from None
            if isinstance(reason, (ConnectionError, HTTPException)):
                tls = " or a client certificate" if self._tls is not None else ""
                raise _closed(url, reason, tls=tls) from None
            raise ServingError(
                f"Could not reach TF Serving at {url} ({reason}); check the URL.",
                code="UNAVAILABLE",
            ) from None
        try:
            return json.loads(raw.decode("utf-8", "surrogateescape"))
        except json.JSONDecodeError as err:
            raise ServingError(
                f"TF Serving at {url} sent a body that is not JSON ({err.msg})."
            ) from None

    def _http_error(self, url: str, err: urllib.error.HTTPError) -> ServingError:
        raw = err.read().decode("utf-8", "replace")
        try:
            message = json.loads(raw).get("error", raw)
        except (json.JSONDecodeError, AttributeError):
            message = raw.strip() or err.reason
        advice = ""
        if err.code in (401, 403):
            advice = "; pass the credentials its proxy expects (token= or headers=; --token-file)"
        return ServingError(
            f"TF Serving at {url} rejected the request with HTTP {err.code}: {message}{advice}",
            code=_CODES.get(err.code),
            http_status=err.code,
            details=str(message),
        )

    def _output_types(self, signature_name: str | None) -> dict[str, str]:
        if not self.typed_outputs:
            return {}
        if self._metadata is None:
            self._metadata = self.metadata()
        signature = self._metadata["signatures"].get(signature_name or "serving_default", {})
        return {name: spec["dtype"] for name, spec in signature.get("outputs", {}).items()}

    def predict(
        self,
        inputs: Mapping[str, Any],
        signature_name: str | None = "serving_default",
        format: PredictFormat = "columnar",
    ) -> dict[str, np.ndarray]:
        """Runs a signature through ``:predict``.

        Args:
            inputs: Input alias to array-like (``str`` or ``bytes`` strings).
            signature_name: The signature; ``None`` leaves it out of the body
                (the server then uses ``serving_default``).
            format: ``"columnar"`` or ``"row"`` (see :func:`predict_body`).

        Returns:
            Output alias to numpy array (strings as object arrays of
            ``bytes``). If the server omits the name because the signature has
            a single output, the key is that output's name when
            ``typed_outputs`` is on, else ``"outputs"`` / ``"predictions"``.
            A batch of more than ``max_batch_size`` rows goes as consecutive
            requests, joined in order, its texts cut as
            :meth:`~keras_electra.serving.grpc_client.GrpcClient.predict` cuts them.

        Raises:
            ServingError: If the server rejects the request or cannot be reached.

        Examples:
            >>> client.predict({"text": ["a b"]})["tokens"]  # doctest: +SKIP
            array([[b'a', b'b']], dtype=object)
        """
        types = self._output_types(signature_name)
        return self._predict_in_parts(
            inputs, lambda chunk: self._predict(chunk, signature_name, format, types)
        )

    def _predict(
        self,
        inputs: Mapping[str, Any],
        signature_name: str | None,
        format: PredictFormat,
        types: dict[str, str],
    ) -> dict[str, np.ndarray]:
        body = predict_body(inputs, signature_name, format)
        response = self._request(f"{self.model_url}:predict", body)
        key = "outputs" if format == "columnar" else "predictions"
        if key not in response:
            raise ServingError(f"TF Serving's predict response has no '{key}' key: {response}")
        single_name = next(iter(types)) if len(types) == 1 else None
        values = response[key]
        first = values[0] if format == "row" and values else values  # a row tells the names
        if not isinstance(first, dict) or _is_b64(first) or single_name is not None:
            values = {single_name or key: values}
        elif format == "row":
            values = {name: [row[name] for row in values] for name in first}
        return {name: decode_tensor(value, types.get(name)) for name, value in values.items()}

    def classify(
        self, examples: Sequence[Mapping[str, Any]], signature_name: str | None = "classify"
    ) -> list[list[tuple[str, float]]]:
        """Classifies examples through ``:classify``; the examples (see
        :func:`classify_body`), the result and the errors are those of
        :meth:`~keras_electra.serving.grpc_client.GrpcClient.classify`."""
        return self._classify_in_parts(examples, lambda part: self._classify(part, signature_name))

    def _classify(
        self, examples: Sequence[Mapping[str, Any]], signature_name: str | None
    ) -> list[list[tuple[str, float]]]:
        response = self._request(
            f"{self.model_url}:classify", classify_body(examples, signature_name)
        )
        results = response.get("results", response.get("result"))
        if results is None:
            raise ServingError(f"TF Serving's classify response has no 'results' key: {response}")
        # Scores are float32 on the server; read them at that precision, as gRPC gives them.
        return [
            [(str(label), float(np.float32(score))) for label, score in result]
            for result in results
        ]

    def metadata(self) -> dict[str, Any]:
        """Returns the model's signatures via ``GET .../metadata``.

        Returns:
            ``{"model_name", "version", "signatures"}``; see
            :mod:`keras_electra.serving.metadata`.

        Examples:
            >>> client.metadata()["signatures"]["classify"]["method_name"]  # doctest: +SKIP
            'tensorflow/serving/classify'
        """
        return metadata_to_dict(self._request(f"{self.model_url}/metadata"))

    def status(self) -> list[dict[str, Any]]:
        """The state of the model's versions via ``GET /v1/models/NAME``, as
        :meth:`~keras_electra.serving.grpc_client.GrpcClient.status` gives it."""
        response = self._request(self.model_url)
        return [
            {
                "version": int(item.get("version", 0)),
                "state": item.get("state", "UNKNOWN"),
                "error_code": item.get("status", {}).get("error_code", "OK"),
                "error_message": item.get("status", {}).get("error_message", ""),
            }
            for item in response.get("model_version_status", [])
        ]
