"""Domain errors -> gRPC status with google.rpc.ErrorInfo (AIP-193)."""

from __future__ import annotations

import grpc
from google.protobuf import any_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2

from ctxwarden.core.errors import CtxwardenError, ErrorKind
from ctxwarden.core.reasons import ErrorReason

DOMAIN = "ctxwarden.dev"

_CODES: dict[ErrorKind, tuple[grpc.StatusCode, int]] = {
    ErrorKind.INVALID_ARGUMENT: (grpc.StatusCode.INVALID_ARGUMENT, code_pb2.INVALID_ARGUMENT),
    ErrorKind.NOT_FOUND: (grpc.StatusCode.NOT_FOUND, code_pb2.NOT_FOUND),
    ErrorKind.ALREADY_EXISTS: (grpc.StatusCode.ALREADY_EXISTS, code_pb2.ALREADY_EXISTS),
    ErrorKind.FAILED_PRECONDITION: (
        grpc.StatusCode.FAILED_PRECONDITION,
        code_pb2.FAILED_PRECONDITION,
    ),
    ErrorKind.ABORTED: (grpc.StatusCode.ABORTED, code_pb2.ABORTED),
    ErrorKind.RESOURCE_EXHAUSTED: (grpc.StatusCode.RESOURCE_EXHAUSTED, code_pb2.RESOURCE_EXHAUSTED),
    ErrorKind.UNAVAILABLE: (grpc.StatusCode.UNAVAILABLE, code_pb2.UNAVAILABLE),
}


MAX_MESSAGE_BYTES = 1000
"""Longest status message sent, in UTF-8 bytes.

Messages quote client input (an unknown tokenizer spec, a malformed ID). gRPC
sends the message in the trailers twice, percent-encoded in ``grpc-message``
and inside ``grpc-status-details-bin``, and clients refuse trailers over 8-16
KiB: an unbounded quote would turn a clear INVALID_ARGUMENT into a reset stream
without the error details. Bounded like this, the trailers stay under 8 KiB.
"""
MAX_DETAIL_BYTES = 200
"""Longest field name, field description and ErrorInfo metadata value sent."""


def clip(text: str, limit: int) -> str:
    """``text`` cut to at most ``limit`` UTF-8 bytes (on a character boundary), marked.

    A lone surrogate, which gRPC cannot send, becomes a backslash escape.
    """
    data = text.encode("utf-8", "backslashreplace")
    if len(data) <= limit:
        return data.decode("utf-8")
    marker = f"... [{len(data)} bytes]"
    return data[: max(limit - len(marker), 0)].decode("utf-8", "ignore") + marker


def _pack(message: object) -> any_pb2.Any:
    packed = any_pb2.Any()
    packed.Pack(message)  # type: ignore[arg-type]
    return packed


def rich_status(
    code: grpc.StatusCode,
    rpc_code: int,
    message: str,
    reason: str,
    metadata: dict[str, str] | None = None,
    field: str = "",
    retry_after: float = 0.0,
) -> tuple[grpc.StatusCode, str, tuple[tuple[str, bytes], ...]]:
    """Code, message and the trailing metadata that carries google.rpc.Status.

    Message, field and metadata values are clipped (see MAX_MESSAGE_BYTES).
    """
    message = clip(message, MAX_MESSAGE_BYTES)
    field = clip(field, MAX_DETAIL_BYTES)
    metadata = {k: clip(v, MAX_DETAIL_BYTES) for k, v in (metadata or {}).items()}
    details = [_pack(error_details_pb2.ErrorInfo(reason=reason, domain=DOMAIN, metadata=metadata))]
    if retry_after > 0:
        info = error_details_pb2.RetryInfo()
        info.retry_delay.FromNanoseconds(int(retry_after * 1e9))
        details.append(_pack(info))
    if field:
        details.append(
            _pack(
                error_details_pb2.BadRequest(
                    field_violations=[
                        error_details_pb2.BadRequest.FieldViolation(
                            field=field, description=clip(message, MAX_DETAIL_BYTES)
                        )
                    ]
                )
            )
        )
    status = status_pb2.Status(code=rpc_code, message=message, details=details)
    return code, message, (("grpc-status-details-bin", status.SerializeToString()),)


def to_status(
    error: CtxwardenError,
) -> tuple[grpc.StatusCode, str, tuple[tuple[str, bytes], ...]]:
    code, rpc_code = _CODES[error.kind]
    return rich_status(
        code,
        rpc_code,
        error.message,
        error.reason,
        error.metadata,
        error.field,
        retry_after=error.retry_after,
    )


def internal_status() -> tuple[grpc.StatusCode, str, tuple[tuple[str, bytes], ...]]:
    return rich_status(
        grpc.StatusCode.INTERNAL,
        code_pb2.INTERNAL,
        "internal error; the server log has details",
        ErrorReason.INTERNAL,
    )
