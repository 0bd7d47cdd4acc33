"""What the clients send to a TF Serving behind TLS and an authenticating proxy
(docs/serving.md, "Exposing the server"): a bearer token and/or headers, and certificates.

Credentials travel only over TLS unless the caller opts in (``insecure=True``); nothing
here shows a credential (the repr names the headers, never their values).

Examples:
    >>> credentials = CallCredentials(token="s3cret")
    >>> credentials.headers()
    {'authorization': 'Bearer s3cret'}
    >>> credentials
    CallCredentials(authorization=<hidden>)
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from pathlib import Path

from keras_electra.serving.errors import ServingError

Token = str | Callable[[], str]
Headers = Mapping[str, str] | Callable[[], Mapping[str, str]]
Pem = str | bytes | Path
TOKEN_ENV = "KERAS_ELECTRA_TOKEN"
_TOKEN = re.compile(r"[\x21-\x7e]+")  # printable ASCII, no space: what a header value carries


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
        return self._token is not None or callable(self._headers) or bool(self._headers)

    def headers(self) -> dict[str, str]:
        """The headers of one call, names lower-cased (as gRPC metadata requires)."""
        extra = self._headers() if callable(self._headers) else self._headers
        out = {str(name).lower(): str(value) for name, value in (extra or {}).items()}
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
            extra = self._headers if not callable(self._headers) else {}
            names += [str(n).lower() for n in extra] or ["headers()"]
        if self._token is not None:
            names.append("authorization")
        return f"CallCredentials({', '.join(f'{n}=<hidden>' for n in names)})"


def check_plaintext(target: str, credentials: CallCredentials, insecure: bool) -> None:
    """Refuses credentials bound for a plaintext channel, unless ``insecure``.

    Raises:
        ServingError: one sentence naming the target and both fixes.

    Examples:
        >>> check_plaintext("localhost:8500", CallCredentials(), insecure=False)
    """
    if credentials and not insecure:
        raise ServingError(
            f"A token or headers would go to {target} unencrypted; connect over TLS (tls=True "
            "or an https:// URL; --tls or --root-certificates), or pass insecure=True "
            "(--insecure) to send them in plaintext anyway."
        )


def read_token(path: str | os.PathLike | None) -> str | None:
    """The bearer token of the command line: the first line of the file ``path``, else
    ``$KERAS_ELECTRA_TOKEN``, else None; surrounding whitespace (a newline) stripped.

    Raises:
        ServingError: the file cannot be read or is empty (one sentence).

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
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as error:
        reason = getattr(error, "strerror", None) or "not UTF-8 text"
        raise ServingError(f"Cannot read --token-file '{path}' ({reason}).") from None
    if not lines or not lines[0].strip():
        raise ServingError(f"--token-file '{path}' is empty; write the token on its first line.")
    return lines[0].strip()


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
