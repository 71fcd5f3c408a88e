"""Errors raised by the ctxwarden client.

Every failed RPC is raised as a :class:`CtxwardenError` (or a subclass chosen by
status code). The server attaches a ``google.rpc.Status`` with an
``google.rpc.ErrorInfo`` in the ``grpc-status-details-bin`` trailer; its
``reason`` (e.g. ``SESSION_NOT_FOUND``), ``domain`` and ``metadata`` are exposed
as attributes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Protocol

import grpc
from google.protobuf import any_pb2
from google.rpc import error_details_pb2, status_pb2

__all__ = [
    "AbortedError",
    "AlreadyExistsError",
    "CtxwardenError",
    "DeadlineExceededError",
    "FailedPreconditionError",
    "InvalidArgumentError",
    "NotFoundError",
    "ResourceExhaustedError",
    "UnavailableError",
    "error_from_rpc_error",
]

STATUS_DETAILS_KEY = "grpc-status-details-bin"


class RpcErrorLike(Protocol):
    """The parts of ``grpc.RpcError`` / ``grpc.aio.AioRpcError`` the client reads."""

    def code(self) -> grpc.StatusCode: ...

    def details(self) -> str | None: ...

    # A tuple of (key, value) metadata items (sync) or ``grpc.aio.Metadata``.
    def trailing_metadata(self) -> object: ...


class CtxwardenError(Exception):
    """A failed ctxwarden call.

    Attributes:
        code: the ``grpc.StatusCode``.
        message: the human-readable status message.
        reason: ``ErrorInfo.reason``, a stable machine-readable code such as
            ``SESSION_NOT_FOUND`` ("" when the server sent none).
        domain: ``ErrorInfo.domain`` (``"ctxwarden.dev"`` for server errors).
        metadata: ``ErrorInfo.metadata``.
        details: every detail message of the rich status, still packed.
    """

    def __init__(
        self,
        message: str,
        *,
        code: grpc.StatusCode | None = None,
        reason: str = "",
        domain: str = "",
        metadata: Mapping[str, str] | None = None,
        details: Iterable[any_pb2.Any] = (),
    ) -> None:
        super().__init__(message)
        self.code: grpc.StatusCode = grpc.StatusCode.UNKNOWN if code is None else code
        self.message = message
        self.reason = reason
        self.domain = domain
        self.metadata: dict[str, str] = dict(metadata or {})
        self.details: list[any_pb2.Any] = list(details)

    def __str__(self) -> str:
        text = f"{self.code.name}: {self.message}"
        if self.reason:
            text += f" [{self.reason}]"
        return text

    def __reduce__(self) -> tuple[Any, ...]:
        # Keyword-only constructor arguments: rebuild explicitly so errors pickle.
        return (
            _rebuild,
            (
                type(self),
                self.message,
                self.code,
                self.reason,
                self.domain,
                self.metadata,
                self.details,
            ),
        )

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(code={self.code!r}, message={self.message!r}, "
            f"reason={self.reason!r}, domain={self.domain!r}, metadata={self.metadata!r})"
        )


def _rebuild(
    cls: type[CtxwardenError],
    message: str,
    code: grpc.StatusCode,
    reason: str,
    domain: str,
    metadata: dict[str, str],
    details: list[any_pb2.Any],
) -> CtxwardenError:
    return cls(message, code=code, reason=reason, domain=domain, metadata=metadata, details=details)


class NotFoundError(CtxwardenError):
    """NOT_FOUND: the session (or message) does not exist or was deleted."""


class AlreadyExistsError(CtxwardenError):
    """ALREADY_EXISTS: e.g. the session_id is taken."""


class InvalidArgumentError(CtxwardenError):
    """INVALID_ARGUMENT: a malformed request field."""


class FailedPreconditionError(CtxwardenError):
    """FAILED_PRECONDITION: e.g. a tool result whose call is not in the session."""


class AbortedError(CtxwardenError):
    """ABORTED: expected_last_seq mismatch, stale etag or a concurrent writer."""


class ResourceExhaustedError(CtxwardenError):
    """RESOURCE_EXHAUSTED: a size or rate limit was hit."""


class UnavailableError(CtxwardenError):
    """UNAVAILABLE: the server could not be reached (retried automatically)."""


class DeadlineExceededError(CtxwardenError):
    """DEADLINE_EXCEEDED: the call's deadline passed."""


_ERROR_CLASSES: dict[grpc.StatusCode, type[CtxwardenError]] = {
    grpc.StatusCode.NOT_FOUND: NotFoundError,
    grpc.StatusCode.ALREADY_EXISTS: AlreadyExistsError,
    grpc.StatusCode.INVALID_ARGUMENT: InvalidArgumentError,
    grpc.StatusCode.FAILED_PRECONDITION: FailedPreconditionError,
    grpc.StatusCode.ABORTED: AbortedError,
    grpc.StatusCode.RESOURCE_EXHAUSTED: ResourceExhaustedError,
    grpc.StatusCode.UNAVAILABLE: UnavailableError,
    grpc.StatusCode.DEADLINE_EXCEEDED: DeadlineExceededError,
}


def error_class_for(code: grpc.StatusCode) -> type[CtxwardenError]:
    """The CtxwardenError subclass for a ``grpc.StatusCode``."""
    return _ERROR_CLASSES.get(code, CtxwardenError)


def make_error(
    code: grpc.StatusCode,
    message: str,
    *,
    reason: str = "",
    domain: str = "",
    metadata: Mapping[str, str] | None = None,
    details: Iterable[any_pb2.Any] = (),
) -> CtxwardenError:
    """Builds the right CtxwardenError subclass for ``code``."""
    return error_class_for(code)(
        message, code=code, reason=reason, domain=domain, metadata=metadata, details=details
    )


def _status_details_bytes(trailing_metadata: object) -> bytes | None:
    if not isinstance(trailing_metadata, Iterable):
        return None
    for item in trailing_metadata:
        # Sync metadata items are _Metadatum(key, value) namedtuples; aio
        # Metadata iterates as (key, value) tuples.
        try:
            key, value = item
        except (TypeError, ValueError):
            continue
        if key == STATUS_DETAILS_KEY:
            if isinstance(value, str):
                return value.encode("latin-1")
            if isinstance(value, bytes | bytearray | memoryview):
                return bytes(value)
    return None


def decode_status(trailing_metadata: object) -> status_pb2.Status | None:
    """The ``google.rpc.Status`` carried in the trailing metadata, if any."""
    raw = _status_details_bytes(trailing_metadata)
    if raw is None:
        return None
    try:
        return status_pb2.Status.FromString(raw)
    except Exception:  # malformed details must not hide the real error
        return None


def _error_info(details: Iterable[any_pb2.Any]) -> error_details_pb2.ErrorInfo | None:
    for detail in details:
        if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
            info = error_details_pb2.ErrorInfo()
            if detail.Unpack(info):
                return info
    return None


def error_from_rpc_error(error: RpcErrorLike) -> CtxwardenError:
    """Converts a ``grpc.RpcError`` (sync or aio) into a :class:`CtxwardenError`."""
    code: grpc.StatusCode | None
    try:
        code = error.code()
    except Exception:
        code = None
    if not isinstance(code, grpc.StatusCode):
        code = grpc.StatusCode.UNKNOWN
    try:
        message = error.details() or ""
    except Exception:
        message = ""
    trailing: object
    try:
        trailing = error.trailing_metadata()
    except Exception:
        trailing = None
    status = decode_status(trailing)
    details: list[any_pb2.Any] = list(status.details) if status is not None else []
    if not message and status is not None:
        message = status.message
    info = _error_info(details)
    exc = make_error(
        code,
        message,
        reason=info.reason if info is not None else "",
        domain=info.domain if info is not None else "",
        metadata=dict(info.metadata) if info is not None else None,
        details=details,
    )
    return exc
