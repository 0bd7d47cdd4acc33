"""What the clients send to a TF Serving behind TLS and an authenticating proxy (a bearer
token and/or headers, certificates), and what a failed TLS handshake means (docs/serving.md,
"Exposing the server"). Nothing here shows a credential (the repr names the headers only).

Examples:
    >>> credentials = CallCredentials(token="s3cret")
    >>> credentials.headers()
    {'authorization': 'Bearer s3cret'}
    >>> credentials
    CallCredentials(authorization=<hidden>)
    >>> tls_failure("Tls handshake failed ... CERTIFICATE_VERIFY_FAILED: "
    ...             "unable to get local issuer certificate: OK", "h:1", False)[:40]
    'its certificate is not signed by a CA th'
"""

from __future__ import annotations

import os
import re
import socket
import ssl
import tempfile
from collections.abc import Callable, Mapping
from http.client import HTTPException
from pathlib import Path

from keras_electra.serving.errors import ServingError

Token = str | Callable[[], str]
Headers = Mapping[str, str] | Callable[[], Mapping[str, str]]
Pem = str | bytes | Path
TOKEN_ENV = "KERAS_ELECTRA_TOKEN"
_TOKEN = re.compile(r"[\x21-\x7e]+")  # printable ASCII, no space: what a header value carries
# OpenSSL's X509_V_ERR_HOSTNAME_MISMATCH and X509_V_ERR_IP_ADDRESS_MISMATCH.
_NAME_MISMATCH = (62, 64)
_TRUST_FIX = (
    "pass the CA that signed it as root_certificates= (--root-certificates), or use tls=True "
    "(--tls) only for a certificate from a public CA"
)
_NAME_FIX = "connect by a name the certificate lists, or have it issued for this name"
_CLIENT_FIX = "pass client_certificate= and client_key= (--client-certificate, --client-key)"
_REFUSED_FIX = "pass a client certificate signed by a CA the server trusts"
# OpenSSL's and BoringSSL's reasons when the other side answers a handshake in plaintext.
_NOT_TLS = (
    "WRONG_VERSION_NUMBER",
    "RECORD_LAYER_FAILURE",
    "HTTP_REQUEST",
    "PACKET_LENGTH_TOO_LONG",
)


# What a header's name may hold (lower-cased first, as the clients send it): HTTP's token
# characters (RFC 9110), and gRPC's metadata keys (grpc core's validate_metadata.cc).
_HEADER_NAMES = {
    "http": (
        re.compile(r"[!#$%&'*+.^_`|~0-9a-z-]+"),
        "an HTTP header name",
        "letters, digits and !#$%&'*+-.^_`|~",
    ),
    "grpc": (re.compile(r"[0-9a-z_.-]+"), "a gRPC metadata key", "letters, digits, -, _ and ."),
}
_CARRIER = {"http": "an HTTP header", "grpc": "gRPC metadata"}


def _shown(name: str) -> str:
    """A header's name for a message, on one line."""
    return f"'{name}'" if name.isprintable() else ascii(name)


def check_header(name: object, value: object, protocol: str) -> tuple[str, str | bytes]:
    """A header as it is sent (the name lower-cased, as gRPC metadata requires), or a
    :class:`ServingError` naming the header, never its value: a name that is not one for
    ``protocol`` (``"http"`` or ``"grpc"``), a value with a line break, a control or a
    non-ASCII character (gRPC: a key ending in ``-bin`` carries bytes, sent as given).

    Examples:
        >>> check_header("X-Api-Key", "k3y", "grpc")
        ('x-api-key', 'k3y')
        >>> check_header("X-Api-Key", "k3y\\n", "http")
        Traceback (most recent call last):
        ...
        keras_electra.serving.errors.ServingError: The value of header 'X-Api-Key' holds a \
line break (a key read from a file keeps its newline: strip it).
    """
    name = name.decode("latin-1") if isinstance(name, bytes) else str(name)
    lowered = name.lower()
    pattern, what, others = _HEADER_NAMES[protocol]
    if not pattern.fullmatch(lowered):
        said = f"the header name {_shown(name)}" if name else "a header name that is empty"
        raise ServingError(
            f"The headers hold {said}, which is not {what} ({others} only); fix the name."
        )
    if protocol == "grpc" and lowered.startswith("grpc-"):
        raise ServingError(
            f"The header name {_shown(name)} is gRPC's own (a name starting grpc- is "
            "reserved); use another name."
        )
    if protocol == "grpc" and lowered.endswith("-bin"):  # binary metadata: any bytes
        return lowered, value if isinstance(value, bytes) else str(value).encode("utf-8")
    text = value.decode("latin-1") if isinstance(value, bytes) else str(value)
    if "\n" in text or "\r" in text:
        raise ServingError(
            f"The value of header {_shown(name)} holds a line break (a key read from a file "
            "keeps its newline: strip it)."
        )
    allowed = "\t" if protocol == "http" else ""
    if any((c < " " and c not in allowed) or c == "\x7f" for c in text):
        raise ServingError(
            f"The value of header {_shown(name)} holds a control character, which "
            f"{_CARRIER[protocol]} cannot carry; pass the value alone, in printable ASCII."
        )
    if not text.isascii():
        binary = ", or a name ending in -bin for binary metadata" if protocol == "grpc" else ""
        raise ServingError(
            f"The value of header {_shown(name)} holds a non-ASCII character, which "
            f"{_CARRIER[protocol]} cannot carry; pass ASCII (base64 for other bytes{binary})."
        )
    return lowered, text


def check_headers(headers: object, protocol: str) -> dict[str, str | bytes]:
    """``headers`` (a mapping of names to values) as sent, each checked by
    :func:`check_header`; anything else is a :class:`ServingError`."""
    if not isinstance(headers, Mapping):
        raise ServingError(
            f"The headers are a {type(headers).__name__}, not a dict of header names to "
            'values; pass them as one, such as headers={"x-api-key": KEY}.'
        )
    return dict(check_header(name, value, protocol) for name, value in headers.items())


class CallCredentials:
    """A bearer token and/or headers sent with every call (a client's ``token`` and
    ``headers``; a function is called before every call). Headers are checked here for
    ``protocol`` (``"http"`` or ``"grpc"``, :func:`check_header`): a mapping when the
    credentials are made, a function's answer at each call."""

    def __init__(
        self, token: Token | None = None, headers: Headers | None = None, protocol: str = "http"
    ) -> None:
        self._token = token
        self._headers = headers
        self._protocol = protocol
        self._checked = (
            None if headers is None or callable(headers) else check_headers(headers, protocol)
        )

    def __bool__(self) -> bool:
        return self._token is not None or callable(self._headers) or bool(self._headers)

    def headers(self) -> dict[str, str | bytes]:
        """The headers of one call, names lower-cased (as gRPC metadata requires)."""
        if callable(self._headers):
            out = check_headers(self._headers() or {}, self._protocol)
        else:
            out = dict(self._checked or {})
        if self._token is not None:
            token = self._token() if callable(self._token) else self._token
            token = (token or "").strip()
            if not token:
                raise ServingError("The token is empty (or the token function returned none).")
            if not _TOKEN.fullmatch(token):
                raise ServingError(
                    "The token holds a space, a control or a non-ASCII character; pass the "
                    "token alone, one word of printable ASCII."
                )
            out["authorization"] = f"Bearer {token}"
        return out

    def __repr__(self) -> str:
        names = []
        if self._headers is not None:
            names += list(self._checked or {}) or ["headers()"]
        if self._token is not None:
            names.append("authorization")
        return f"CallCredentials({', '.join(f'{n}=<hidden>' for n in names)})"


def read_token(path: str | os.PathLike | None) -> str | None:
    """The bearer token of the command line: the one line of text in the file ``path``,
    else ``$KERAS_ELECTRA_TOKEN``, else None; surrounding whitespace (a final newline,
    blank lines) stripped.

    Raises:
        ServingError: the file cannot be read, holds no text, or holds more than one
            line of text (several tokens, or a token beside other settings: which to send
            is a guess); the sentence never shows the file's contents.

    Examples:
        >>> import os
        >>> os.environ["KERAS_ELECTRA_TOKEN"] = "s3cret\\n"
        >>> read_token(None)
        's3cret'
        >>> del os.environ["KERAS_ELECTRA_TOKEN"]
    """
    if path is None:
        return os.environ.get(TOKEN_ENV, "").strip() or None
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        reason = getattr(error, "strerror", None) or "not UTF-8 text"
        raise ServingError(f"Cannot read --token-file '{path}' ({reason}).") from None
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if not lines:
        raise ServingError(f"--token-file '{path}' is empty; write the token in it.")
    if len(lines) > 1:
        raise ServingError(
            f"--token-file '{path}' holds {len(lines)} lines of text, not one token; write "
            "the token alone in it, on one line."
        )
    return lines[0]


def read_pem(value: Pem | None, what: str) -> bytes | None:
    """PEM bytes from bytes, PEM text, or a file path; None stays None."""
    if value is None:
        return None
    if isinstance(value, bytes):
        data = value
    elif isinstance(value, str) and "-----BEGIN" in value:
        data = value.encode("ascii")
    else:
        try:
            data = Path(value).read_bytes()
        except OSError as error:
            raise ServingError(
                f"Cannot read the {what} '{value}' ({error.strerror or error}); pass a PEM file."
            ) from None
    if b"-----BEGIN" not in data:
        raise ServingError(f"The {what} is not in PEM format (no -----BEGIN line).")
    return data


def read_pems(pems: tuple[Pem | None, Pem | None, Pem | None]) -> tuple:
    """The root certificate, client certificate and client key, each read by
    :func:`read_pem`; a client certificate and key that are not a pair are refused here,
    once, by :func:`load_client_pair`."""
    read = tuple(map(read_pem, pems, ("root certificate", "client certificate", "client key")))
    if read[1] is not None and read[2] is not None:
        names = (_pem_name("client certificate", pems[1]), _pem_name("client key", pems[2]))
        load_client_pair(ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT), read[1], read[2], names)
    return read


def _pem_name(what: str, value: Pem | None) -> str:
    """A certificate or key as a message names it: its file, or how it was given."""
    if isinstance(value, bytes) or (isinstance(value, str) and "-----BEGIN" in value):
        return f"{what} (given as PEM)"
    return f"{what} '{value}'"


class _Encrypted(Exception):
    """Raised by the password callback: the client key is encrypted."""


def _no_password() -> bytes:
    raise _Encrypted  # never OpenSSL's prompt on the terminal


def load_client_pair(
    context: ssl.SSLContext,
    certificate: bytes,
    key: bytes,
    names: tuple[str, str] = ("client certificate", "client key"),
) -> None:
    """Loads a client certificate and its private key into ``context`` (``ssl`` reads them
    from files only: each goes to a private temporary file for the call), or one sentence
    naming both (``names``): files swapped, a key that is not the certificate's (gRPC logged
    "Invalid private key" and retried the call as unreachable), an encrypted key."""
    certificate_name, key_name = names
    has_certificate, has_key = b"CERTIFICATE-----" in certificate, b"PRIVATE KEY-----" in key
    if not has_certificate and not has_key:
        if b"PRIVATE KEY-----" in certificate and b"CERTIFICATE-----" in key:
            raise ServingError(
                f"The {certificate_name} does not match the {key_name}: the one holds a "
                "private key, the other a certificate (swapped?); pass them the other way round."
            )
    if not has_certificate:
        raise ServingError(
            f"The {certificate_name} holds no certificate (no BEGIN CERTIFICATE line); pass "
            "this client's certificate in PEM."
        )
    if not has_key:
        raise ServingError(
            f"The {key_name} holds no private key (no BEGIN PRIVATE KEY line); pass the "
            "certificate's private key in PEM."
        )
    with (
        tempfile.NamedTemporaryFile(suffix=".pem") as chain,  # created 0600
        tempfile.NamedTemporaryFile(suffix=".key") as private,
    ):
        chain.write(certificate)
        private.write(key)
        chain.flush()
        private.flush()
        try:
            context.load_cert_chain(chain.name, private.name, password=_no_password)
        except _Encrypted:
            raise ServingError(
                f"The {key_name} is encrypted and the clients take no passphrase; pass it "
                "decrypted (openssl pkey -in KEY -out PLAIN_KEY), kept private."
            ) from None
        except ssl.SSLError as error:
            if "KEY_VALUES_MISMATCH" in str(error).upper():
                raise ServingError(
                    f"The {certificate_name} does not match the {key_name} (swapped? or a "
                    "file of another pair); pass the certificate and the key made with it."
                ) from None
            raise ServingError(
                f"The {certificate_name} and the {key_name} cannot be loaded "
                f"({error.reason or error}); pass this client's certificate and its private "
                "key, both in PEM."
            ) from None


def client_context(root: Pem | None, certificate: Pem | None, key: Pem | None) -> ssl.SSLContext:
    """A verifying TLS context: the system's CAs, or ``root``; a client certificate for
    mutual TLS (:func:`load_client_pair`)."""
    roots, certificate, key = read_pems((root, certificate, key))
    context = ssl.create_default_context(cadata=roots.decode("ascii") if roots else None)
    if certificate is not None:
        load_client_pair(context, certificate, key)
    return context


def speaks_tls(host: str, port: int, timeout: float) -> bool:
    """Whether the server at ``host:port`` answers a TLS handshake (its certificate
    unchecked: this only asks what the port speaks); an alert counts (a server that wants
    a client certificate)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    context.set_alpn_protocols(["h2", "http/1.1"])
    try:
        addresses = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError:
        return False
    for family, kind, protocol, _, address in addresses:
        try:
            with socket.socket(family, kind, protocol) as raw:
                raw.settimeout(timeout)
                raw.connect(address)
                with context.wrap_socket(raw, server_hostname=host):
                    return True
        except ssl.SSLError as error:
            if "ALERT" in (error.reason or "").upper():
                return True
        except OSError:
            continue
    return False


def _plaintext(detail: str) -> str:
    return (
        f"the server does not speak TLS on this port ({detail}); connect to its TLS port, or "
        "without TLS"
    )


def _untrusted(detail: str) -> str:
    return f"its certificate is not signed by a CA this client trusts ({detail}); {_TRUST_FIX}"


def _mismatch(name: str, detail: str) -> str:
    return f"its certificate is not valid for the name '{name}' ({detail}); {_NAME_FIX}"


def _client(sent_certificate: bool, detail: str) -> str:
    if sent_certificate:
        return f"the server refused this client's certificate ({detail}); {_REFUSED_FIX}"
    return f"the server requires a client certificate ({detail}); {_CLIENT_FIX}"


def tls_failure(cause: BaseException | str, name: str, sent_certificate: bool) -> str | None:
    """What a failed TLS connection to ``name`` means (a clause naming the fix), from the
    ``ssl`` error raised or the text of a gRPC error (BoringSSL's reasons), or None when
    ``cause`` is not one of the causes above.

    Examples:
        >>> tls_failure(ConnectionRefusedError(), "h", False), tls_failure("Closed", "h", False)
        (None, None)
    """
    if isinstance(cause, str):
        if "CERTIFICATE_VERIFY_FAILED" in cause:
            detail = cause.split("CERTIFICATE_VERIFY_FAILED", 1)[1].strip(": ")
            return _untrusted(detail.removesuffix(": OK").rstrip(".") or "verification failed")
        if "Hostname Verification Check failed" in cause:
            return _mismatch(name, "host name verification failed")
        if "PEER_DID_NOT_RETURN_A_CERTIFICATE" in cause or "CERTIFICATE_REQUIRED" in cause:
            return _client(sent_certificate, "no certificate was sent")
        reason = next((r for r in _NOT_TLS if r in cause), None)
    elif isinstance(cause, ssl.SSLCertVerificationError):
        detail = (cause.verify_message or str(cause)).rstrip(".")
        if cause.verify_code in _NAME_MISMATCH:
            return _mismatch(name, detail)
        return _untrusted(detail)
    elif isinstance(cause, ssl.SSLError):
        reason = (cause.reason or "").upper()
        client = ("UNKNOWN_CA", "BAD_CERTIFICATE", "CERTIFICATE_")  # _REQUIRED among them
        if reason == "SSLV3_ALERT_HANDSHAKE_FAILURE" or any(w in reason for w in client):
            return _client(sent_certificate, reason.lower())
    else:
        return None
    return _plaintext(reason.lower()) if reason in _NOT_TLS else None


def diagnose(
    host: str,
    port: int,
    timeout: float,
    root: Pem | None = None,
    certificate: Pem | None = None,
    key: Pem | None = None,
) -> str | None:
    """What failed (a clause naming the fix) in a TLS connection to each address of ``host``
    with these certificates, or None (unreachable, or TLS works). It reads once after the
    handshake, briefly: under TLS 1.3 a server that wants a client certificate says so only
    then, with an alert or a close (a gRPC server sends its settings first; HTTP waits)."""
    sent_certificate = certificate is not None
    try:
        addresses = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        context = client_context(root, certificate, key)
    except (OSError, ValueError, ServingError):
        return None
    context.set_alpn_protocols(["h2", "http/1.1"])
    for family, kind, protocol, _, address in addresses:
        try:
            with socket.socket(family, kind, protocol) as raw:
                raw.settimeout(timeout)
                raw.connect(address)
                with context.wrap_socket(raw, server_hostname=host) as tls:
                    tls.settimeout(min(timeout, 2.0))
                    try:
                        if tls.recv(1) == b"":
                            return _client(sent_certificate, "closed after the handshake")
                    except TimeoutError:
                        continue  # TLS works: the server waits for a request
                    except (ssl.SSLError, ConnectionError) as error:
                        reason = tls_failure(error, host, sent_certificate)
                        return reason or _client(sent_certificate, "closed after the handshake")
        except ssl.SSLError as error:
            reason = tls_failure(error, host, sent_certificate)
            if reason:
                return reason
        except (OSError, HTTPException):
            continue  # this address is unreachable: try the next
    return None
