"""Method handlers built by hand so malformed requests become INVALID_ARGUMENT.

The generated ``add_ContextServiceServicer_to_server`` deserializes with
``FromString``; a request that is not valid protobuf (for example a string
field holding invalid UTF-8) would then fail inside gRPC as INTERNAL. Here a
failed decode becomes a marker the servicer turns into a clear error.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import grpc
from google.protobuf.message import DecodeError, Message

SERVICE_NAME = "ctxwarden.v1.ContextService"


@dataclass(frozen=True, slots=True)
class Malformed:
    """Stands in for a request that could not be decoded."""

    error: str


def safe_deserializer(cls: type[Message]) -> Callable[[bytes], Any]:
    def decode(data: bytes) -> Any:
        try:
            return cls.FromString(data)
        except (DecodeError, RuntimeWarning, ValueError) as exc:
            return Malformed(str(exc) or type(exc).__name__)

    return decode


def _serializer(cls: type[Message]) -> Callable[[Any], bytes]:
    """Serialize a response message, or pass through one already encoded."""

    def encode(value: Any) -> bytes:
        if isinstance(value, bytes):
            return value
        data: bytes = value.SerializeToString()
        return data

    return encode


def generic_handler(
    unary: dict[str, tuple[Callable[..., Any], type[Message], type[Message]]],
    streams: dict[str, tuple[Callable[..., Any], type[Message], type[Message]]],
) -> grpc.GenericRpcHandler:
    handlers: dict[str, grpc.RpcMethodHandler[Any, Any]] = {}
    for name, (fn, req, resp) in unary.items():
        handlers[name] = grpc.unary_unary_rpc_method_handler(
            fn,
            request_deserializer=safe_deserializer(req),
            response_serializer=_serializer(resp),
        )
    for name, (fn, req, resp) in streams.items():
        handlers[name] = grpc.stream_stream_rpc_method_handler(
            fn,
            request_deserializer=safe_deserializer(req),
            response_serializer=resp.SerializeToString,
        )
    return grpc.method_handlers_generic_handler(SERVICE_NAME, handlers)
