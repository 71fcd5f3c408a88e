"""A grpc.aio server interceptor: RPC metrics, one access-log line and a span per RPC.

It wraps whatever handler the server found (the hand-built ContextService
handlers, health, reflection) with a behaviour of the same kind, keeping that
handler's request deserializer and response serializer, so encoded responses
(``BuildModelInput`` returns bytes) and the ``Malformed`` request marker pass
through untouched. All four kinds are supported, including streaming
behaviours that write with ``context.write`` instead of yielding (their
messages are sent but not counted in ``ctxwarden_rpc_stream_messages_total``).

The status code is what the client sees: ``context.abort``'s code, a code set
with ``context.set_code``, UNKNOWN for an escaped exception, CANCELLED or
DEADLINE_EXCEEDED when the call's task is cancelled.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
from collections.abc import AsyncIterator, Callable
from contextvars import ContextVar, Token
from typing import TYPE_CHECKING, Any

import grpc
from google.protobuf import text_format
from google.protobuf.message import Message

from ctxwarden.api.handlers import HandlerInterceptor
from ctxwarden.api.reads import is_unary
from ctxwarden.api.tenancy import current_tenant, tenant_listener
from ctxwarden.observability.logging import (
    FIELDS_ATTR,
    REQUEST_ID_METADATA_KEY,
    RpcInfo,
    current_rpc,
)
from ctxwarden.observability.observed_requests import ObservedRequests
from ctxwarden.util import loop_slices

if TYPE_CHECKING:
    from ctxwarden.observability.metrics import Metrics
    from ctxwarden.observability.tracing import Span, Tracing

access_log = logging.getLogger("ctxwarden.access")

QUIET_SERVICES = frozenset(
    {
        "grpc.health.v1.Health",
        "grpc.reflection.v1alpha.ServerReflection",
        "grpc.reflection.v1.ServerReflection",
    }
)
"""Probes and tooling: their access lines are logged at DEBUG, not INFO."""

_ERROR = frozenset(
    {
        grpc.StatusCode.UNKNOWN,
        grpc.StatusCode.INTERNAL,
        grpc.StatusCode.DATA_LOSS,
        grpc.StatusCode.UNIMPLEMENTED,
    }
)
_WARNING = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED})
_BY_VALUE = {c.value[0]: c for c in grpc.StatusCode}
MAX_DEBUG_CHARS = 4096


def _metadata(context: grpc.aio.ServicerContext[Any, Any]) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in context.invocation_metadata() or ():
        key, value = item[0], item[1]
        if isinstance(value, str) and not key.endswith("-bin"):
            out.setdefault(key.lower(), value)
    return out


def _str_field(message: Any, name: str) -> str:
    if not isinstance(message, Message):
        return ""
    value = getattr(message, name, "")
    return value if isinstance(value, str) else ""


def _session_id(message: Any) -> str:
    session = getattr(message, "session", None)  # UpdateSessionRequest's is in it
    return _str_field(message, "session_id") or _str_field(session, "session_id")


def status_of(
    context: grpc.aio.ServicerContext[Any, Any], exc: BaseException | None
) -> grpc.StatusCode:
    """The status the client will see for a behaviour that ended with ``exc``."""
    if isinstance(exc, asyncio.CancelledError):
        remaining = context.time_remaining()
        if remaining is not None and remaining <= 0:
            return grpc.StatusCode.DEADLINE_EXCEEDED
        return grpc.StatusCode.CANCELLED
    code: Any = context.code()
    if isinstance(exc, GeneratorExit):  # the server closed the response stream early
        if code is None:
            return grpc.StatusCode.CANCELLED
        exc = None
    if exc is not None and not isinstance(exc, grpc.aio.AbortError):
        return grpc.StatusCode.UNKNOWN
    if isinstance(code, grpc.StatusCode):
        return code
    if isinstance(code, int):
        return _BY_VALUE.get(code, grpc.StatusCode.UNKNOWN)
    return grpc.StatusCode.OK if exc is None else grpc.StatusCode.UNKNOWN


class _Call:
    """One RPC in flight: what the access line, metrics and span need."""

    __slots__ = (
        "debug",
        "info",
        "listener_token",
        "metadata",
        "method",
        "metrics",
        "observer",
        "request_text",
        "requests",
        "responses",
        "rpc_token",
        "slices_token",
        "span",
        "start",
        "streaming",
    )

    def __init__(
        self, observer: RpcObserver, method: str, metadata: dict[str, str], streaming: bool
    ) -> None:
        self.observer = observer
        self.method = method
        self.metadata = metadata
        self.streaming = streaming
        self.metrics = observer.metrics
        self.requests = 0
        self.responses = 0
        self.request_text = ""
        self.debug = access_log.isEnabledFor(logging.DEBUG)
        self.info = RpcInfo(method=method, request_id=metadata.get(REQUEST_ID_METADATA_KEY, ""))
        self.rpc_token: Token[RpcInfo | None] | None = current_rpc.set(self.info)
        self.listener_token: Token[Callable[[str], None] | None] | None = tenant_listener.set(
            self.info.note_tenant
        )
        self.span: Span | None = None
        if observer.tracing is not None:
            self.span = observer.tracing.start_rpc(method, metadata)
        if self.metrics is not None:
            self.metrics.rpcs_in_flight_by(method).inc()
        self.slices_token = loop_slices.call_began()  # big calls leave it room
        self.start = time.perf_counter()

    def take(self, request: Any, context: Any, request_streaming: bool) -> Any:
        """The request to pass on: a request stream is wrapped so each message is seen."""
        if request_streaming:
            return ObservedRequests(context, self.on_request)  # read through the context
        self.on_request(request)
        return request

    def on_request(self, request: Any) -> None:
        self.requests += 1
        if not self.info.session_id:
            self.info.session_id = _session_id(request)
        if self.requests == 1:
            # The request's own request_id (its idempotency key) wins over the
            # x-request-id header.
            self.info.request_id = _str_field(request, "request_id") or self.info.request_id
        if self.debug and self.requests == 1:
            if isinstance(request, Message):
                text = text_format.MessageToString(request, as_one_line=True)
            else:
                text = repr(request)
            self.request_text = text[:MAX_DEBUG_CHARS]

    def on_response(self, response: Any) -> None:
        self.responses += 1
        if not self.info.session_id:
            self.info.session_id = _session_id(response)  # CreateSession's new id

    def finish(
        self, context: grpc.aio.ServicerContext[Any, Any], exc: BaseException | None
    ) -> None:
        elapsed = time.perf_counter() - self.start
        loop_slices.call_ended(self.slices_token)
        code = status_of(context, exc)
        m = self.metrics
        if m is not None:
            m.rpcs_in_flight_by(self.method).dec()
            m.rpcs_by((self.method, code.name)).inc()
            m.rpc_duration_by((self.method, code.name)).observe(elapsed)
            if self.streaming:
                m.stream_messages.labels(self.method, "received").inc(self.requests)
                m.stream_messages.labels(self.method, "sent").inc(self.responses)
        # enter_tenant() records the authenticated tenant on self.info. Request
        # metadata is never trusted for it: an unauthenticated call could claim
        # any tenant there.
        tenant = current_tenant.get() or self.info.tenant
        if self.span is not None:
            if self.info.session_id:
                self.span.set_attribute("ctxwarden.session_id", self.info.session_id)
            if tenant:
                self.span.set_attribute("ctxwarden.tenant", tenant)
            self.span.finish_rpc(code.name, code.value[0])
        self._log(code, elapsed, tenant, context, exc)
        _reset(tenant_listener, self.listener_token)
        _reset(current_rpc, self.rpc_token)
        self.listener_token = self.rpc_token = None

    def _log(
        self,
        code: grpc.StatusCode,
        elapsed: float,
        tenant: str,
        context: grpc.aio.ServicerContext[Any, Any],
        exc: BaseException | None,
    ) -> None:
        service = self.method.rpartition("/")[0]
        if service in QUIET_SERVICES:
            level = logging.DEBUG
        elif code in _ERROR:
            level = logging.ERROR
        elif code in _WARNING:
            level = logging.WARNING
        else:
            level = logging.INFO
        if not access_log.isEnabledFor(level):
            return
        latency_ms = round(elapsed * 1000, 3)
        fields: dict[str, Any] = {
            "method": self.method,
            "code": code.name,
            "latency_ms": latency_ms,
            "session_id": self.info.session_id,
            "tenant": tenant,
            "request_id": self.info.request_id,
            "peer": _peer(context),
        }
        if self.streaming:
            fields["requests"] = self.requests
            fields["responses"] = self.responses
        if code is grpc.StatusCode.UNKNOWN and exc is not None:
            fields["error"] = type(exc).__name__
        if self.debug and self.request_text:
            fields["request"] = self.request_text
        access_log.log(
            level,
            "%s %s %.1fms",
            self.method,
            code.name,
            latency_ms,
            extra={FIELDS_ATTR: fields},
        )


def _reset(var: ContextVar[Any], token: Token[Any] | None) -> None:
    """Put ``var`` back as the call found it."""
    if token is not None:
        try:
            var.reset(token)
        except ValueError:  # finished in another context (should not happen)
            var.set(None)


def _peer(context: grpc.aio.ServicerContext[Any, Any]) -> str:
    try:
        return str(context.peer())
    except Exception:
        return ""


Behaviour = Callable[..., Any]


class RpcObserver(HandlerInterceptor):
    """Metrics, access log and tracing for every RPC the server handles.

    Each method's handler is wrapped once (``HandlerInterceptor``); a call reads
    its metadata from its context."""

    def __init__(self, metrics: Metrics | None, tracing: Tracing | None = None) -> None:
        super().__init__()
        self.metrics = metrics
        self.tracing = tracing

    def wrap(
        self, handler: grpc.RpcMethodHandler[Any, Any], method: str
    ) -> grpc.RpcMethodHandler[Any, Any]:
        name = method.lstrip("/")
        des, ser = handler.request_deserializer, handler.response_serializer
        if handler.unary_unary is not None:
            return grpc.unary_unary_rpc_method_handler(
                self._unary_response(handler.unary_unary, name, False, False), des, ser
            )
        if handler.stream_unary is not None:
            # A unary method served as client-streaming (api/reads.py) is logged
            # and counted as the unary call it is.
            streaming = not is_unary(handler.stream_unary)
            return grpc.stream_unary_rpc_method_handler(
                self._unary_response(handler.stream_unary, name, True, streaming), des, ser
            )
        if handler.unary_stream is not None:
            return grpc.unary_stream_rpc_method_handler(
                self._stream_response(handler.unary_stream, name, False), des, ser
            )
        if handler.stream_stream is not None:
            return grpc.stream_stream_rpc_method_handler(
                self._stream_response(handler.stream_stream, name, True), des, ser
            )
        return handler

    def _unary_response(
        self, inner: Behaviour, method: str, request_streaming: bool, streaming: bool
    ) -> Behaviour:
        awaited = inspect.iscoroutinefunction(inner)

        async def behaviour(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
            call = _Call(self, method, _metadata(context), streaming)
            request = call.take(request, context, request_streaming)
            try:
                if awaited:
                    response = await inner(request, context)
                else:
                    response = await _resolved(inner(request, context))
            except BaseException as exc:
                call.finish(context, exc)
                raise
            if response is not None:
                call.on_response(response)
            call.finish(context, None)
            return response

        return behaviour

    def _stream_response(self, inner: Behaviour, method: str, request_streaming: bool) -> Behaviour:
        if inspect.isasyncgenfunction(inner):

            async def generator(
                request: Any, context: grpc.aio.ServicerContext[Any, Any]
            ) -> AsyncIterator[Any]:
                call = _Call(self, method, _metadata(context), True)
                request = call.take(request, context, request_streaming)
                try:
                    async for response in inner(request, context):
                        call.on_response(response)
                        yield response
                except BaseException as exc:
                    call.finish(context, exc)
                    raise
                call.finish(context, None)

            return generator

        async def writer(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> None:
            # A behaviour that writes with context.write (health Watch), or a
            # plain function returning an iterator.
            call = _Call(self, method, _metadata(context), True)
            request = call.take(request, context, request_streaming)
            try:
                result = await _resolved(inner(request, context))
                if result is not None and hasattr(result, "__aiter__"):
                    async for response in result:
                        call.on_response(response)
                        await context.write(response)
                elif result is not None:
                    for response in result:
                        call.on_response(response)
                        await context.write(response)
            except BaseException as exc:
                call.finish(context, exc)
                raise
            call.finish(context, None)

        return writer


async def _resolved(value: Any) -> Any:
    """``value``, awaited when it is awaitable (a behaviour may be sync or async)."""
    return await value if inspect.isawaitable(value) else value
