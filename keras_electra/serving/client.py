"""What the gRPC and REST clients share: the model they address, its credentials and
certificates, bounded retry with exponential backoff, the largest batch they send at once,
the result of every call but ``predict`` and the sentences of their errors (stdlib and
:mod:`keras_electra.limits`; TLS and credentials: docs/serving.md, "Exposing the server")."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from keras_electra import limits
from keras_electra.errors import InputDataError
from keras_electra.serving.address import check_timeout
from keras_electra.serving.credentials import (
    CallCredentials,
    Headers,
    Pem,
    Token,
    diagnose,
    tls_failure,
)
from keras_electra.serving.errors import ServingError
from keras_electra.serving.export_reader import signature_defs_to_dict

T = TypeVar("T")
# How TF Serving's Classify and Regress refuse a signature (servables/tensorflow/
# classifier.cc, regressor.cc); "No ... found in SignatureDef" goes on with the whole
# SignatureDef over many lines.
_REFUSALS = {
    "classify": (
        "Expected classification signature method_name",
        "Expected one input Tensor",
        "Expected one or two output Tensors",
        "No classification inputs found",
        "Expected classification signature outputs",
        "Expected Tensor shape",
        "Expected scores Tensor of DT_FLOAT",
        "Expected classes Tensor of DT_STRING",
    ),
    "regress": (
        "Expected regression signature method_name",
        "Expected one input Tensor",
        "Expected one output Tensor",
        "No regression inputs found",
        "No regression outputs found",
        "Expected output Tensor shape to be either",
        "Expected output Tensor of DT_FLOAT",
    ),
}
_KINDS = {
    "classify": ("classification", "tensorflow/serving/classify", "'classes' and/or 'scores'"),
    "regress": ("regression", "tensorflow/serving/regress", "one float output 'outputs'"),
}
CREDENTIALS_FIX = "pass the credentials its proxy expects (token= or headers=; --token-file)"


def _capped(examples: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """``examples`` with their text features cut as the export cuts them; raises
    :class:`~keras_electra.errors.InputDataError` unless they are a list of dicts."""
    if isinstance(examples, Mapping | str | bytes) or any(
        not isinstance(e, Mapping) for e in examples
    ):
        raise InputDataError(
            'Pass the examples as a list of dicts of features, such as [{"text": "a film"}].'
        )
    return [
        {k: limits.cap_text(v) if k in limits.TEXT_INPUTS else v for k, v in e.items()}
        for e in examples
    ]


def check_inputs(inputs: object) -> None:
    """Raises :class:`~keras_electra.errors.InputDataError` unless ``inputs`` (of
    ``predict``) are a dict: a list of texts, or one text, was ``dict()``'s "dictionary
    update sequence element #0 has length 1; 2 is required"."""
    if not isinstance(inputs, Mapping):
        raise InputDataError(
            'Pass the inputs as a dict of input names to values, such as {"text": ["a film"]}.'
        )


class RetriesExhausted(Exception):
    """The last retryable ``error``, raised once all ``attempts`` have failed."""

    def __init__(self, error: Exception, attempts: int) -> None:
        super().__init__(str(error))
        self.error = error
        self.attempts = attempts


class ModelClient:
    """What :class:`~keras_electra.serving.grpc_client.GrpcClient` and
    :class:`~keras_electra.serving.rest_client.RestClient` share, and the arguments they
    both take. A transport defines ``where`` (its address, for messages), ``_classify``,
    ``_regress``, ``_metadata`` and ``_status``.

    Args:
        model_name: The served model's name.
        version: Pin a model version; the latest loaded version if ``None``.
        version_label: Or pin a version label such as ``"stable"``.
        timeout: Deadline of each call, in seconds (positive and finite).
        retries: Extra attempts for a call that failed for a passing reason (gRPC's
            ``UNAVAILABLE``; a refused or reset connection, HTTP 503).
        backoff: First wait between attempts, in seconds (doubles each time).
        root_certificates: A private CA that signed the server's certificate (PEM bytes,
            text or file); TLS and credentials: docs/serving.md, "Exposing the server".
        client_certificate: This client's certificate (PEM), for mutual TLS.
        client_key: The client certificate's private key (PEM).
        token: Sent as ``authorization: Bearer TOKEN``; a function is called before each
            call (for tokens that expire).
        headers: More headers (gRPC metadata), or a function returning them; a name that is
            not one, or a value with a line break or a control or non-ASCII character, is
            refused in one sentence that names the header, not its value.
        insecure: Send ``token`` and ``headers`` over a plaintext channel (gRPC without
            TLS, an ``http://`` URL) too; else the client refuses them there.
        max_batch_size: Most rows per request (:data:`~keras_electra.limits.MAX_BATCH_SIZE`,
            TF Serving's batching limit); larger batches go as consecutive requests, their
            outputs joined in order; None sends any batch whole.

    Raises:
        ValueError: when both a version and a version label are given, or
            ``max_batch_size`` is not positive.
        ServingError: a client certificate without its key, or not its key's; credentials
            over a plaintext channel without ``insecure``; a header that cannot be sent; a
            timeout that is not a positive number of seconds.
    """

    _protocol = "http"  # what the headers travel as: HTTP headers, or "grpc" metadata

    def __init__(
        self,
        model_name: str,
        *,
        version: int | None = None,
        version_label: str | None = None,
        timeout: float = 10.0,
        retries: int = 3,
        backoff: float = 0.5,
        root_certificates: Pem | None = None,
        client_certificate: Pem | None = None,
        client_key: Pem | None = None,
        token: Token | None = None,
        headers: Headers | None = None,
        insecure: bool = False,
        max_batch_size: int | None = limits.MAX_BATCH_SIZE,
    ) -> None:
        if version is not None and version_label is not None:
            raise ValueError("give a model version or a version label, not both")
        if max_batch_size is not None and max_batch_size < 1:
            raise ValueError(f"max_batch_size must be positive or None, not {max_batch_size}")
        if (client_certificate is None) != (client_key is None):
            raise ServingError(
                "Mutual TLS needs both client_certificate and client_key (or neither)."
            )
        self.model_name = model_name
        self.version = version
        self.version_label = version_label
        self.timeout = check_timeout(timeout)
        self.retries = retries
        self.backoff = backoff
        self.max_batch_size = max_batch_size
        self.credentials = CallCredentials(token, headers, self._protocol)
        self._pems = (root_certificates, client_certificate, client_key)
        self._insecure = insecure

    def _refuse_plaintext(self, where: str) -> None:
        """Refuses credentials bound for a plaintext channel, unless ``insecure``."""
        if self.credentials and not self._insecure:
            raise ServingError(
                f"A token or headers would go to {where} unencrypted; connect over TLS "
                "(tls=True or an https:// URL; --tls or --root-certificates), or pass "
                "insecure=True (--insecure) to send them in plaintext anyway."
            )

    def _retrying(self, call: Callable[[], T], retryable: Callable[[Exception], bool]) -> T:
        """Calls ``call``; on an error ``retryable`` accepts, tries again after ``backoff``,
        ``2 * backoff``, ... seconds, at most ``retries`` more times, then raises
        :class:`RetriesExhausted`. Other errors propagate at once."""
        attempts = max(0, self.retries) + 1
        for attempt in range(attempts):
            try:
                return call()
            except Exception as err:
                if not retryable(err):
                    raise
                if attempt == attempts - 1:
                    raise RetriesExhausted(err, attempts) from err
                time.sleep(self.backoff * (2**attempt))

    def _raise_tls_failure(
        self, where: str, host: str, port: int | None, cause: BaseException | str
    ) -> None:
        """Raises a failed TLS connection's error (never retried: trying again cannot fix
        it), from ``cause`` (an ``ssl`` error, gRPC's text) or, where that does not say, a
        handshake of our own with ``host:port``; returns if neither shows a TLS failure."""
        failure = tls_failure(cause, host, self._pems[1] is not None)
        if failure is None and port is not None:
            failure = diagnose(host, port, min(self.timeout, 5.0), *self._pems)
        if failure is not None:
            details = cause if isinstance(cause, str) else None
            message = f"TLS to TF Serving at {where} failed: {failure}."
            raise ServingError(message, code="UNAVAILABLE", details=details) from None

    def _unreachable(
        self, where: str, attempts: int, cause: object, check: str, details: str | None = None
    ) -> ServingError:
        return ServingError(
            f"Could not reach TF Serving at {where} after {attempts} attempts ({cause}); check "
            f"that the server is running and {check}.",
            code="UNAVAILABLE",
            details=details,
        )

    def _too_slow(self, where: str, call: str = "", details: str | None = None) -> ServingError:
        return ServingError(
            f"TF Serving at {where} did not answer{call} within {self.timeout:g} s; raise the "
            "timeout or check the server's load.",
            code="DEADLINE_EXCEEDED",
            details=details,
        )

    def _predict_in_parts(self, inputs: Mapping[str, Any], send: Callable[[Any], Any]) -> Any:
        """``send``'s outputs for ``inputs`` (texts cut as the export cuts them), at most
        ``max_batch_size`` rows per request, joined in order."""
        check_inputs(inputs)
        chunks = limits.split_inputs(limits.cap_texts(inputs), self.max_batch_size)
        return limits.join_outputs([send(chunk) for chunk in chunks])

    def classify(
        self, examples: Sequence[Mapping[str, Any]], signature_name: str | None = "classify"
    ) -> list[list[tuple[str, float]]]:
        """Classifies examples through TF Serving's Classify API (gRPC ``Classify``, REST
        ``:classify``).

        ``examples``: one dict per example, feature name to ``str``/``bytes`` (bytes list),
        ``int`` (int64 list), ``float`` (float list) or a list of those, e.g. ``{"text":
        "great movie"}``; ``signature_name``: a signature following the Classify contract.
        Gives per example the ``(label, score)`` pairs in the model's class order
        (``max_batch_size`` examples per request, texts cut as ``predict`` cuts them); no
        examples give ``[]``, with no request.

        Examples:
            >>> client.classify([{"text": "a wonderful film"}])  # doctest: +SKIP
            [[('negative', 0.03), ('positive', 0.97)]]
        """
        return self._by_examples("classify", examples, signature_name)

    def regress(
        self, examples: Sequence[Mapping[str, Any]], signature_name: str | None = "regress"
    ) -> list[float]:
        """Regresses examples through TF Serving's Regress API (gRPC ``Regress``, REST
        ``:regress``): one value per example, in order.

        ``examples`` are :meth:`classify`'s (one dict of features per example, texts cut as
        ``predict`` cuts them, ``max_batch_size`` per request); ``signature_name``: a
        regression signature (method ``tensorflow/serving/regress``, input ``inputs``, one
        float output ``outputs``), as a fine-tuned regressor's export has in ``regress``.
        A signature that is not one raises a :class:`ServingError` saying so.

        Examples:
            >>> client.regress([{"text": "a cat sat"}, {"text": "a dog ran"}])  # doctest: +SKIP
            [3.1875, 0.4921875]
        """
        return self._by_examples("regress", examples, signature_name)

    def _by_examples(
        self, api: str, examples: Sequence[Mapping[str, Any]], signature_name: str | None
    ) -> list:
        """The transport's ``_classify`` or ``_regress`` answers, ``max_batch_size``
        examples (texts cut) per request, joined in order; a signature the API refuses is
        one sentence (:meth:`_wrong_signature`)."""
        capped = _capped(examples)
        if not capped:  # no answers to ask for (TF Serving refuses an empty request)
            return []
        send = self._classify if api == "classify" else self._regress
        answers = []
        for part in limits.batch_slices(len(capped), self.max_batch_size):
            try:
                answers += send(capped[part], signature_name)
            except ServingError as err:
                raise self._wrong_signature(err, signature_name, api) or err from None
        return answers

    def _wrong_signature(
        self, err: ServingError, signature_name: str | None, api: str
    ) -> ServingError | None:
        """TF Serving's refusal of a signature that ``api`` (``classify`` or ``regress``)
        cannot use as one sentence, or None for another error. The server's reason is kept
        up to its first line break, and a missing input's or output's up to its ``:``."""
        said = (err.details or "").strip()
        if not said.startswith(_REFUSALS[api]):
            return None
        said = said.splitlines()[0]
        if said.startswith("No "):
            said = said.split(":", 1)[0]
        kind, method, outputs = _KINDS[api]
        other = "classify() for a classifier" if api == "regress" else "regress() for a regressor"
        name = signature_name or "serving_default"
        return ServingError(
            f"TF Serving at {self.where} cannot {api} with signature '{name}' of model "
            f"'{self.model_name}', which is not a {kind} signature ({said.rstrip('.')}); "
            f"pass the signature_name of one (method {method}, input 'inputs', {outputs}, "
            f"as a fine-tuned export's '{api}'), or call {other}.",
            code=err.code,
            http_status=err.http_status,
            details=err.details,
        )

    def metadata(self) -> dict[str, Any]:
        """The model's signatures (gRPC ``GetModelMetadata``, REST ``GET .../metadata``)::

            {"model_name": "electra", "version": 3, "signatures": {
                "serving_default": {
                    "method_name": "tensorflow/serving/predict",
                    "inputs": {"text": {"dtype": "DT_STRING", "shape": [-1]}},
                    "outputs": {"replaced_prob": {"dtype": "DT_FLOAT", "shape": [-1, -1]}}},
                ...}}

        ``shape`` is ``None`` for a tensor of unknown rank; ``-1`` marks an unknown
        dimension; TensorFlow's internal ``__saved_model_init_op`` is left out.
        """
        name, version, signature_defs = self._metadata()
        signatures = signature_defs_to_dict(signature_defs)
        return {"model_name": name, "version": version, "signatures": signatures}

    def status(self) -> list[dict[str, Any]]:
        """The state of the model's versions (gRPC ``ModelService.GetModelStatus``, REST
        ``GET /v1/models/NAME``): one dict per version, ``version``, ``state`` (e.g.
        ``"AVAILABLE"``), ``error_code`` and ``error_message``.

        Examples:
            >>> client.status()  # doctest: +SKIP
            [{'version': 1, 'state': 'AVAILABLE', 'error_code': 'OK', 'error_message': ''}]
        """
        keys = ("version", "state", "error_code", "error_message")
        return [dict(zip(keys, row, strict=True)) for row in self._status()]
