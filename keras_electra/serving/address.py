"""Where the clients connect, checked when a client is made (and by ``keras-electra score
--server`` before TensorFlow loads): a gRPC target is ``HOST:PORT``, a REST server an
``http://`` or ``https://`` URL; an empty address, a port outside 1-65535 and a gRPC
target with a path are one sentence, not a call that fails later in gRPC's or urllib's
words. Plain Python: the REST client imports this without gRPC or TensorFlow.

Examples:
    >>> check_server("localhost:8500"), check_server("https://models.example.com/prefix")
    (None, None)
    >>> check_server("localhost:99999")
    Traceback (most recent call last):
    ...
    keras_electra.serving.errors.ServingError: The port of 'localhost:99999' is 99999, \
outside 1-65535; pass TF Serving's port (8500 for gRPC, 8501 for REST by default).
"""

from __future__ import annotations

import math
import re
from numbers import Real
from typing import Any
from urllib.parse import urlsplit

from keras_electra.serving.errors import ServingError

# gRPC's name resolvers: an address after these is HOST:PORT (ipv4:/ipv6: a list of them).
_RESOLVERS = ("dns:///", "dns:", "ipv4:", "ipv6:")
# Targets that name no host and port: a Unix socket, a VM socket.
_LOCAL = ("unix:", "unix-abstract:", "vsock:")
_DNS_AUTHORITY = re.compile(r"^dns://[^/]*/")
_PORT = re.compile(r"[+-]?\d+")
EMPTY = (
    "The server address is empty; pass TF Serving's gRPC port as HOST:PORT (such as "
    "localhost:8500), or its REST API's http:// or https:// URL."
)


def _addresses(target: str) -> list[str]:
    """The ``HOST:PORT`` addresses a gRPC target names after its resolver (``dns:///``,
    ``dns://SERVER/``, ``dns:``; ``ipv4:`` and ``ipv6:`` list several, comma-separated)."""
    if target.startswith("dns://"):
        return [_DNS_AUTHORITY.sub("", target)]
    rest = next((target[len(p) :] for p in _RESOLVERS if target.startswith(p)), target)
    return rest.split(",") if target.startswith(("ipv4:", "ipv6:")) else [rest]


def host_port(target: str) -> tuple[str, int] | None:
    """The host and port of a gRPC target (``host:port``, ``[::1]:port``,
    ``dns:///host:port``, ``ipv4:``/``ipv6:`` addresses: the first), or None (a Unix
    socket, no port).

    Examples:
        >>> host_port("dns:///localhost:8500"), host_port("[::1]:8500"), host_port("unix:/s")
        (('localhost', 8500), ('::1', 8500), None)
    """
    if target.startswith(_LOCAL):
        return None
    host, _, port = _addresses(target)[0].rpartition(":")
    if not host or not port.isdigit():
        return None
    return host.strip("[]"), int(port)


def _out_of_range(address: str, port: str) -> ServingError:
    return ServingError(
        f"The port of '{address}' is {port}, outside 1-65535; pass TF Serving's port (8500 "
        "for gRPC, 8501 for REST by default)."
    )


def names_no_port(target: str) -> bool:
    """Whether a gRPC network target names no port (gRPC then dials 443, not TF Serving's
    8500).

    Examples:
        >>> names_no_port("localhost"), names_no_port("localhost:8500"), names_no_port("unix:/s")
        (True, False, False)
    """
    return not target.startswith(_LOCAL) and host_port(target) is None


def check_grpc_target(target: str) -> None:
    """Raises :class:`ServingError` for a gRPC target that is empty, holds a path
    (``localhost:8500/``: gRPC retried it as unreachable) or a port outside 1-65535
    (gRPC wrapped 99999 round to 34463). Unix and VM sockets, and a host without a port
    (gRPC's default, 443), pass."""
    if not target.strip():
        raise ServingError(EMPTY)
    if target.startswith(_LOCAL):
        return
    for address in _addresses(target):
        if "/" in address:
            before = address.split("/", 1)[0]
            such = f", such as '{before}'" if before else " (such as localhost:8500)"
            raise ServingError(
                f"The gRPC address '{target}' holds a path; gRPC takes HOST:PORT alone{such} "
                "(a REST API's path goes in an http:// or https:// URL)."
            )
        host, colon, port = address.rpartition(":")
        if not colon or (":" in host and not host.endswith("]")):
            continue  # no port (gRPC's default), or an IPv6 address without brackets
        if not port:
            raise ServingError(
                f"The gRPC address '{target}' has no port after its colon; pass HOST:PORT, "
                "such as localhost:8500."
            )
        if _PORT.fullmatch(port) and not 1 <= int(port) <= 65535:
            raise _out_of_range(target, port)


def check_rest_url(url: str) -> None:
    """Raises :class:`ServingError` for a REST URL (scheme included) that names no host,
    or a port that is not a number from 1 to 65535."""
    parts = urlsplit(url)
    if not parts.netloc.strip():
        raise ServingError(EMPTY)
    try:
        port = parts.port
    except ValueError:
        said = parts.netloc.rpartition(":")[2]
        if _PORT.fullmatch(said):
            raise _out_of_range(url, said) from None
        raise ServingError(
            f"The port of '{url}' is not a number; pass the server's URL, such as "
            "http://localhost:8501."
        ) from None
    if port == 0:
        raise _out_of_range(url, "0")
    if not parts.hostname:
        raise ServingError(
            f"'{url}' names no host; pass the server's URL, such as http://localhost:8501."
        )


def check_server(address: str) -> None:
    """Checks ``score --server``'s address as the client it chooses will: an
    ``http://`` or ``https://`` URL as REST's, anything else as a gRPC target."""
    if address.startswith(("http://", "https://")):
        check_rest_url(address)
    else:
        check_grpc_target(address)


def check_timeout(timeout: Any) -> float:
    """``timeout`` if it is a positive, finite number of seconds, else one sentence: 0
    or less timed every call out at once (REST: "Operation now in progress"; gRPC: "did
    not answer within -1 s").

    Examples:
        >>> check_timeout(2.5)
        2.5
    """
    if isinstance(timeout, Real) and not isinstance(timeout, bool):
        if math.isfinite(timeout) and timeout > 0:
            return timeout
    raise ServingError(
        f"The timeout {timeout!r} is not a positive number of seconds; pass how long each "
        "call may take, such as 10 (--timeout 10, timeout=10)."
    )
