"""The error raised by the TF Serving clients and the in-process test server."""

from __future__ import annotations

import re

from keras_electra.errors import ElectraError

# TensorFlow's framing around an op's error: a heading, and the failing node's name.
_FRAMING = re.compile(r"Graph execution error:|\[\[\{\{node [^}]*\}\}\]\]|Detected at node .*")


def one_line(said: str) -> str:
    """A server's error message on one line: TensorFlow's framing (``Graph execution
    error:``, ``[[{{node ...}}]]``) left out, line breaks and runs of spaces made one space.

    Examples:
        >>> one_line("Graph execution error:\\n\\nFeature: text is required.\\n\\t "
        ...          "[[{{node ParseExample/ParseExampleV2}}]]")
        'Feature: text is required.'
    """
    return " ".join(_FRAMING.sub(" ", said).split()) or said.strip()


class ServingError(ElectraError):
    """A request to a model server failed, or a SavedModel cannot be served.

    Args:
        message: One sentence naming the problem (and the server's own message).
        code: The gRPC status code name (``"UNAVAILABLE"``); ``None`` if unknown.
        http_status: The HTTP status of a failed REST call, if any.
        details: The server's raw error message, if any.

    Examples:
        >>> try:
        ...     raise ServingError("The server rejected the request.", code="INVALID_ARGUMENT")
        ... except ServingError as err:
        ...     err.code
        'INVALID_ARGUMENT'
    """

    def __init__(
        self,
        message: str,
        *,
        code: str | None = None,
        http_status: int | None = None,
        details: str | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.http_status = http_status
        self.details = details
