"""Domain errors. The api layer maps each kind to a gRPC status code."""

from __future__ import annotations

import enum


class ErrorKind(enum.Enum):
    INVALID_ARGUMENT = "INVALID_ARGUMENT"
    NOT_FOUND = "NOT_FOUND"
    ALREADY_EXISTS = "ALREADY_EXISTS"
    FAILED_PRECONDITION = "FAILED_PRECONDITION"
    ABORTED = "ABORTED"
    RESOURCE_EXHAUSTED = "RESOURCE_EXHAUSTED"
    UNAVAILABLE = "UNAVAILABLE"


class CtxwardenError(Exception):
    """A failure a client can act on.

    ``reason`` is a stable UPPER_SNAKE code (ErrorInfo.reason); ``field`` names
    the offending request field for INVALID_ARGUMENT.
    """

    kind: ErrorKind = ErrorKind.FAILED_PRECONDITION

    def __init__(
        self,
        message: str,
        *,
        reason: str,
        field: str = "",
        metadata: dict[str, str] | None = None,
        retry_after: float = 0.0,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.reason = reason
        self.field = field
        self.metadata = dict(metadata or {})
        self.retry_after = retry_after or self.default_retry_after
        """Seconds after which a retry may succeed (RetryInfo); 0: no advice."""

    default_retry_after = 0.0


class InvalidArgument(CtxwardenError):
    kind = ErrorKind.INVALID_ARGUMENT


class NotFound(CtxwardenError):
    kind = ErrorKind.NOT_FOUND


class AlreadyExists(CtxwardenError):
    kind = ErrorKind.ALREADY_EXISTS


class FailedPrecondition(CtxwardenError):
    kind = ErrorKind.FAILED_PRECONDITION


class Aborted(CtxwardenError):
    kind = ErrorKind.ABORTED


class ResourceExhausted(CtxwardenError):
    kind = ErrorKind.RESOURCE_EXHAUSTED


class Unavailable(CtxwardenError):
    kind = ErrorKind.UNAVAILABLE
    default_retry_after = 1.0
