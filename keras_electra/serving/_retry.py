"""What the two clients share: the model they address and bounded retry with exponential
backoff (stdlib only)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


class RetriesExhausted(Exception):
    """The last retryable error, raised once every attempt has failed.

    Args:
        error: The last error.
        attempts: How many attempts were made.
    """

    def __init__(self, error: Exception, attempts: int) -> None:
        super().__init__(str(error))
        self.error = error
        self.attempts = attempts


def call_with_retries(
    call: Callable[[], T],
    *,
    retries: int,
    backoff: float,
    retryable: Callable[[Exception], bool],
) -> T:
    """Calls ``call``; on a retryable error, waits and tries again, at most ``retries`` times.

    The waits are ``backoff``, ``2 * backoff``, ``4 * backoff``, ... seconds.
    A non-retryable error propagates at once.

    Args:
        call: The operation.
        retries: Extra attempts after the first (0 means one attempt).
        backoff: The first wait, in seconds.
        retryable: Tells whether an error is worth another attempt.

    Returns:
        What ``call`` returns.

    Raises:
        RetriesExhausted: Wrapping the last retryable error.

    Examples:
        >>> call_with_retries(lambda: 42, retries=3, backoff=0.1, retryable=lambda e: False)
        42
    """
    attempts = max(0, retries) + 1
    for attempt in range(attempts):
        try:
            return call()
        except Exception as err:
            if not retryable(err):
                raise
            if attempt == attempts - 1:
                raise RetriesExhausted(err, attempts) from err
            time.sleep(backoff * (2**attempt))
    raise AssertionError("unreachable")


class ModelClient:
    """The model a client addresses (name, then a version or a label) and its retry policy.

    Raises:
        ValueError: when both a version and a version label are given.
    """

    def __init__(
        self,
        model_name: str,
        version: int | None,
        version_label: str | None,
        timeout: float,
        retries: int,
        backoff: float,
    ) -> None:
        if version is not None and version_label is not None:
            raise ValueError("give a model version or a version label, not both")
        self.model_name = model_name
        self.version = version
        self.version_label = version_label
        self.timeout = timeout
        self.retries = retries
        self.backoff = backoff
