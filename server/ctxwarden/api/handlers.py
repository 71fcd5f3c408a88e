"""Method handlers built by hand so malformed requests become INVALID_ARGUMENT.

The generated ``add_ContextServiceServicer_to_server`` deserializes with
``FromString``; a request that is not valid protobuf (for example a string
field holding invalid UTF-8) would then fail inside gRPC as INTERNAL. Here a
failed decode becomes a marker the servicer turns into a clear error.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import grpc
from google.protobuf import empty_pb2
from google.protobuf.message import DecodeError, Message

from ctxwarden.v1 import context_service_pb2 as pb
from ctxwarden.v1 import memory_pb2 as mem_pb
from ctxwarden.v1 import session_pb2 as ses_pb

SERVICE_NAME = "ctxwarden.v1.ContextService"

Continuation = Callable[
    [grpc.HandlerCallDetails], Awaitable["grpc.RpcMethodHandler[Any, Any] | None"]
]
"""What a server interceptor's ``intercept_service`` is handed."""

METHOD_PREFIX = f"/{SERVICE_NAME}/"
"""ContextService's full method names start with this (health and reflection do not)."""


MAX_WRAPPED = 256
"""Wrapped handlers an interceptor remembers (the services have a few dozen methods)."""


class HandlerInterceptor(grpc.aio.ServerInterceptor):
    """An interceptor that replaces a method's handler (by ``wrap``) once found.

    ``wrap`` depends on the handler and the method only, so each is wrapped once
    and the wrapper served to every later call: gRPC asks every interceptor for
    the handler on every call, and a unary call would otherwise build its
    closures and handler again each time. The handlers found are the services'
    own (or an inner interceptor's remembered wrappers): the same objects each time.
    """

    def __init__(self) -> None:
        self._wrapped: dict[tuple[int, str], tuple[Any, grpc.RpcMethodHandler[Any, Any]]] = {}

    async def intercept_service(
        self, continuation: Continuation, details: grpc.HandlerCallDetails
    ) -> grpc.RpcMethodHandler[Any, Any] | None:
        handler = await continuation(details)
        if handler is None:
            return None
        method: str = details.method
        key = (id(handler), method)
        known = self._wrapped.get(key)
        if known is not None and known[0] is handler:
            return known[1]
        wrapped = self.wrap(handler, method)
        if len(self._wrapped) < MAX_WRAPPED:
            self._wrapped[key] = (handler, wrapped)  # the handler kept: its id stays its own
        return wrapped

    def wrap(
        self, handler: grpc.RpcMethodHandler[Any, Any], method: str
    ) -> grpc.RpcMethodHandler[Any, Any]:
        raise NotImplementedError


Types = tuple[type[Message], type[Message]]
"""A method's request and response message types."""

UNARY_METHODS: dict[str, Types] = {
    "CreateSession": (pb.CreateSessionRequest, ses_pb.Session),
    "GetSession": (pb.GetSessionRequest, ses_pb.Session),
    "ListSessions": (pb.ListSessionsRequest, pb.ListSessionsResponse),
    "UpdateSession": (pb.UpdateSessionRequest, ses_pb.Session),
    "DeleteSession": (pb.DeleteSessionRequest, empty_pb2.Empty),
    "AppendMessages": (pb.AppendMessagesRequest, pb.AppendMessagesResponse),
    "AppendModelOutput": (pb.AppendModelOutputRequest, pb.AppendMessagesResponse),
    "ListMessages": (pb.ListMessagesRequest, pb.ListMessagesResponse),
    "BuildModelInput": (pb.BuildModelInputRequest, pb.ModelInput),
    "RollbackTurn": (pb.RollbackTurnRequest, pb.RollbackTurnResponse),
    "Compact": (pb.CompactRequest, pb.Compaction),
    "PrepareCompaction": (pb.PrepareCompactionRequest, pb.CompactionPlan),
    "CommitCompaction": (pb.CommitCompactionRequest, pb.Compaction),
    "ListCompactions": (pb.ListCompactionsRequest, pb.ListCompactionsResponse),
    "GetToolOutput": (pb.GetToolOutputRequest, pb.GetToolOutputResponse),
    "CountTokens": (pb.CountTokensRequest, pb.CountTokensResponse),
    "ForkSession": (pb.ForkSessionRequest, ses_pb.Session),
    "ArchiveSession": (pb.ArchiveSessionRequest, ses_pb.Session),
    "UnarchiveSession": (pb.UnarchiveSessionRequest, ses_pb.Session),
    "GetUsage": (pb.GetUsageRequest, pb.UsageReport),
    "CreateMemory": (mem_pb.CreateMemoryRequest, mem_pb.Memory),
    "GetMemory": (mem_pb.GetMemoryRequest, mem_pb.Memory),
    "ListMemories": (mem_pb.ListMemoriesRequest, mem_pb.ListMemoriesResponse),
    "UpdateMemory": (mem_pb.UpdateMemoryRequest, mem_pb.Memory),
    "DeleteMemory": (mem_pb.DeleteMemoryRequest, empty_pb2.Empty),
}
STREAM_METHODS: dict[str, Types] = {
    "StreamMessages": (pb.AppendMessagesRequest, pb.AppendMessagesResponse),
}


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
            response_serializer=_serializer(resp),
        )
    return grpc.method_handlers_generic_handler(SERVICE_NAME, handlers)


def service_handler(servicer: object) -> grpc.GenericRpcHandler:
    """The ContextService handler; each method is the servicer's attribute of that name."""
    return generic_handler(
        {name: (getattr(servicer, name), *types) for name, types in UNARY_METHODS.items()},
        {name: (getattr(servicer, name), *types) for name, types in STREAM_METHODS.items()},
    )
