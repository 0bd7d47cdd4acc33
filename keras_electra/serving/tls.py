"""What the clients need of TLS: a verifying context, and what a failed handshake means.

A TLS failure is never retried: the clients raise at once, naming the cause (an untrusted
CA, a name the certificate does not list, a client certificate wanted or refused) and the
fix. Where gRPC says only "closed" or reports another address's error, :func:`diagnose`
opens a TLS connection to each address itself.

Examples:
    >>> failure_from_text("Tls handshake failed ... CERTIFICATE_VERIFY_FAILED: "
    ...                   "unable to get local issuer certificate: OK", "h:1", False)[:40]
    'its certificate is not signed by a CA th'
"""

from __future__ import annotations

import socket
import ssl
import tempfile
from http.client import HTTPException

from keras_electra.serving.credentials import Pem, read_pem
from keras_electra.serving.errors import ServingError

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


def client_context(root: Pem | None, certificate: Pem | None, key: Pem | None) -> ssl.SSLContext:
    """A verifying TLS context: the system's CAs, or ``root``; a client certificate for
    mutual TLS (``ssl`` loads a certificate chain from files only, so PEM given as
    bytes is written to a private temporary file for the call)."""
    roots = read_pem(root, "root certificate")
    context = ssl.create_default_context(cadata=roots.decode("ascii") if roots else None)
    if certificate is not None:
        pair = read_pem(certificate, "client certificate") + b"\n" + read_pem(key, "client key")
        with tempfile.NamedTemporaryFile(suffix=".pem") as handle:  # created 0600
            handle.write(pair)
            handle.flush()
            context.load_cert_chain(handle.name)
    return context


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


def failure_from_error(error: BaseException, name: str, sent_certificate: bool) -> str | None:
    """What a failed TLS connection to ``name`` means (a clause naming the fix), from the
    ``ssl`` error raised, or None when ``error`` is not one of the causes above.

    Examples:
        >>> failure_from_error(ConnectionRefusedError(), "h", False) is None
        True
    """
    if isinstance(error, ssl.SSLCertVerificationError):
        detail = (error.verify_message or str(error)).rstrip(".")
        if error.verify_code in _NAME_MISMATCH:
            return _mismatch(name, detail)
        return _untrusted(detail)
    if isinstance(error, ssl.SSLError):
        reason = (error.reason or "").upper()
        client = ("UNKNOWN_CA", "BAD_CERTIFICATE", "CERTIFICATE_")  # _REQUIRED among them
        if reason == "SSLV3_ALERT_HANDSHAKE_FAILURE" or any(w in reason for w in client):
            return _client(sent_certificate, reason.lower())
        if reason in _NOT_TLS:
            return _plaintext(reason.lower())
    return None


def failure_from_text(details: str, name: str, sent_certificate: bool) -> str | None:
    """:func:`failure_from_error` for the text of a gRPC error (BoringSSL's reasons).

    Examples:
        >>> failure_from_text("Socket closed", "h:1", False) is None
        True
    """
    if "CERTIFICATE_VERIFY_FAILED" in details:
        detail = details.split("CERTIFICATE_VERIFY_FAILED", 1)[1].strip(": ")
        return _untrusted(detail.removesuffix(": OK").rstrip(".") or "verification failed")
    if "Hostname Verification Check failed" in details:
        return _mismatch(name, "host name verification failed")
    if "PEER_DID_NOT_RETURN_A_CERTIFICATE" in details or "CERTIFICATE_REQUIRED" in details:
        return _client(sent_certificate, "no certificate was sent")
    for reason in _NOT_TLS:
        if reason in details:
            return _plaintext(reason.lower())
    return None


def diagnose(
    host: str,
    port: int,
    timeout: float,
    root: Pem | None = None,
    certificate: Pem | None = None,
    key: Pem | None = None,
) -> str | None:
    """Opens a TLS connection to each address of ``host`` as a client with these
    certificates would, and returns what failed (a clause naming the fix), or None if no
    address shows a TLS failure (unreachable, or TLS works: the failure is elsewhere).

    After the handshake it reads once, briefly: under TLS 1.3 a server that wants a client
    certificate says so only then, with an alert or by closing the connection at once
    (a gRPC server sends its settings first thing; an HTTP server waits).
    """
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
                        reason = failure_from_error(error, host, sent_certificate)
                        return reason or _client(sent_certificate, "closed after the handshake")
        except ssl.SSLError as error:
            reason = failure_from_error(error, host, sent_certificate)
            if reason:
                return reason
        except (OSError, HTTPException):
            continue  # this address is unreachable: try the next
    return None
