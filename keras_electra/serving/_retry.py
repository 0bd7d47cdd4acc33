"""What the two clients share: the model they address, bounded retry with exponential
backoff, and the largest batch they send at once (stdlib and :mod:`keras_electra.limits`)."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from keras_electra import limits

T = TypeVar("T")


class RetriesExhausted(Exception):
    """The last retryable ``error``, raised once all ``attempts`` have failed."""

    def __init__(self, error: Exception, attempts: int) -> None:
        super().__init__(str(error))
        self.error = error
        self.attempts = attempts


def call_with_retries(
    call: Callable[[], T], *, retries: int, backoff: float, retryable: Callable[[Exception], bool]
) -> T:
    """Calls ``call``; on an error ``retryable`` accepts, tries again after ``backoff``,
    ``2 * backoff``, ``4 * backoff``, ... seconds, at most ``retries`` more times (0: one
    attempt), then raises :class:`RetriesExhausted`. Other errors propagate at once.

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


class ModelClient:
    """The model a client addresses (name, then a version or a label), its retry policy
    and the most rows one request carries (``max_batch_size``: larger batches go as
    consecutive requests, their outputs joined in order; None sends any batch whole).

    Raises:
        ValueError: when both a version and a version label are given, or
            ``max_batch_size`` is not positive.
    """

    def __init__(
        self,
        model_name: str,
        version: int | None,
        version_label: str | None,
        timeout: float,
        retries: int,
        backoff: float,
        max_batch_size: int | None = limits.MAX_BATCH_SIZE,
    ) -> None:
        if version is not None and version_label is not None:
            raise ValueError("give a model version or a version label, not both")
        if max_batch_size is not None and max_batch_size < 1:
            raise ValueError(f"max_batch_size must be positive or None, not {max_batch_size}")
        self.model_name = model_name
        self.version = version
        self.version_label = version_label
        self.timeout = timeout
        self.retries = retries
        self.backoff = backoff
        self.max_batch_size = max_batch_size

    def _predict_in_parts(self, inputs: Mapping[str, Any], send: Callable[[Any], Any]) -> Any:
        """``send``'s outputs for ``inputs`` (texts cut as the export cuts them), at most
        ``max_batch_size`` rows per request, joined in order."""
        chunks = limits.split_inputs(limits.cap_texts(inputs), self.max_batch_size)
        return limits.join_outputs([send(chunk) for chunk in chunks])

    def _classify_in_parts(
        self, examples: Sequence[Mapping[str, Any]], send: Callable[[list], list]
    ) -> list:
        """``send``'s results for ``examples`` (texts cut), ``max_batch_size`` per request."""
        capped = [
            {k: limits.cap_text(v) if k in limits.TEXT_INPUTS else v for k, v in e.items()}
            for e in examples
        ]
        parts = limits.batch_slices(len(capped), self.max_batch_size)
        return [result for part in parts for result in send(capped[part])]
