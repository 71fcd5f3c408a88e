"""When a failed call is retried, and after how long."""

from __future__ import annotations

import random
from dataclasses import dataclass

import grpc

from ._defaults import DEFAULT_RETRIES
from ._errors import CtxwardenError, error_from_rpc_error


@dataclass(frozen=True)
class RetryPolicy:
    """Retries UNAVAILABLE for every call and DEADLINE_EXCEEDED for safe calls.

    ``retries`` is the number of extra attempts after the first (0 disables).
    """

    retries: int = DEFAULT_RETRIES
    initial_backoff: float = 0.1
    max_backoff: float = 2.0

    def should_retry(self, error: CtxwardenError, attempt: int, safe: bool) -> bool:
        """Whether to retry after ``attempt`` (0-based) failed with ``error``.

        ``safe`` is true for read-only calls and calls carrying a request_id.
        """
        if attempt >= self.retries:
            return False
        if error.code == grpc.StatusCode.UNAVAILABLE:
            return True
        return bool(safe and error.code == grpc.StatusCode.DEADLINE_EXCEEDED)

    def backoff(self, attempt: int) -> float:
        """Seconds to wait before retry number ``attempt + 1`` (jittered)."""
        ceiling = min(self.max_backoff, self.initial_backoff * (2.0**attempt))
        return ceiling / 2 + random.uniform(0, ceiling / 2)


def retry_delay(policy: RetryPolicy, exc: grpc.RpcError, attempt: int, safe: bool) -> float:
    """The backoff before the next attempt after ``attempt`` failed with ``exc``.

    Raises the :class:`CtxwardenError` for ``exc`` when ``policy`` does not
    retry the call. Call it while handling ``exc``.
    """
    error = error_from_rpc_error(exc)
    if not policy.should_retry(error, attempt, safe):
        raise error from exc
    return policy.backoff(attempt)
