"""Domain errors -> gRPC status with google.rpc.ErrorInfo (AIP-193)."""

from __future__ import annotations

import grpc
from google.protobuf import any_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2

from ctxwarden.core.errors import CtxwardenError, ErrorKind

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
    """Code, message and the trailing metadata that carries google.rpc.Status."""
    details = [
        _pack(error_details_pb2.ErrorInfo(reason=reason, domain=DOMAIN, metadata=metadata or {}))
    ]
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
                            field=field, description=message
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
    return rich_status(code, rpc_code, error.message, error.reason, error.metadata, error.field)


def internal_status() -> tuple[grpc.StatusCode, str, tuple[tuple[str, bytes], ...]]:
    return rich_status(
        grpc.StatusCode.INTERNAL,
        code_pb2.INTERNAL,
        "internal error; the server log has details",
        "INTERNAL",
    )
