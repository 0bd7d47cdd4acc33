"""What the clients send to a TF Serving behind TLS and an authenticating proxy.

TF Serving has no authentication of its own: deployments put it behind TLS and a proxy
that checks a credential (an API gateway, a service mesh, nginx with a bearer token).
:class:`CallCredentials` holds what every call carries there, a bearer token and/or
other headers (gRPC metadata), each given directly or by a function called before every
call (a token that expires is refreshed there). :func:`read_pem` reads the certificates
of TLS (the CA that signed the server's certificate; a client certificate and key for
mutual TLS).

Nothing here shows a credential: the repr names the headers, never their values, and the
clients' errors name the server, never what was sent.

Examples:
    >>> credentials = CallCredentials(token="s3cret")
    >>> credentials.headers()
    {'authorization': 'Bearer s3cret'}
    >>> credentials
    CallCredentials(authorization=<hidden>)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path

from keras_electra.serving.errors import ServingError

Token = str | Callable[[], str]
Headers = Mapping[str, str] | Callable[[], Mapping[str, str]]
Pem = str | bytes | Path


class CallCredentials:
    """A bearer token and/or headers sent with every call.

    Args:
        token: sent as ``Authorization: Bearer TOKEN``; a function is called before
            every call (return a fresh token there).
        headers: more headers (gRPC metadata), such as ``{"x-api-key": KEY}``; a
            function is called before every call.
    """

    def __init__(self, token: Token | None = None, headers: Headers | None = None) -> None:
        self._token = token
        self._headers = headers

    def __bool__(self) -> bool:
        return self._token is not None or self._headers is not None

    def headers(self) -> dict[str, str]:
        """The headers of one call, names lower-cased (as gRPC metadata requires)."""
        extra = self._headers() if callable(self._headers) else self._headers
        out = {str(name).lower(): str(value) for name, value in (extra or {}).items()}
        if self._token is not None:
            token = self._token() if callable(self._token) else self._token
            if not token:
                raise ServingError("The token function returned no token.")
            out["authorization"] = f"Bearer {token}"
        return out

    def __repr__(self) -> str:
        names = []
        if self._headers is not None:
            extra = self._headers if not callable(self._headers) else {}
            names += [str(n).lower() for n in extra] or ["headers()"]
        if self._token is not None:
            names.append("authorization")
        return f"CallCredentials({', '.join(f'{n}=<hidden>' for n in names)})"


def read_pem(value: Pem | None, what: str) -> bytes | None:
    """PEM bytes from bytes, PEM text, or a file path; None stays None.

    Raises:
        ServingError: the file cannot be read or holds no PEM block (one sentence).
    """
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


def check_client_pair(certificate: Pem | None, key: Pem | None) -> None:
    """Mutual TLS needs both the client certificate and its key, or neither."""
    if (certificate is None) != (key is None):
        raise ServingError("Mutual TLS needs both client_certificate and client_key (or neither).")
