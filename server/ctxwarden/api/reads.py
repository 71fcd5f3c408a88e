"""Bounded request reads: no call can make the server buffer a request it has not
decided to read, and no read may take long.

gRPC grows a stream's HTTP/2 flow-control window to the size of the message
being received only while the application has a receive pending; a unary
handler's receive is issued by grpcio before any interceptor runs. So this
module's interceptor (the innermost one) turns every unary method into a
client-streaming one on the server side (the wire protocol is the same) and
reads the one request itself, after the outer layers have authenticated the
call, with a timeout and a server-wide cap on reads in progress. Until then a
stream can hold only its initial window (``STREAM_WINDOW_BYTES``).

ContextService reads share ``slots`` (``--max-concurrent-reads``); health and
reflection, which need no credentials, share ``OPEN_READ_SLOTS`` and have at
most ``OPEN_READ_TIMEOUT`` seconds per message.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import AsyncIterator, Callable
from typing import Any

import grpc
from google.rpc import code_pb2

from ctxwarden.api.errors import rich_status
from ctxwarden.api.handlers import METHOD_PREFIX, HandlerInterceptor
from ctxwarden.core.reasons import ErrorReason

STREAM_WINDOW_BYTES = 16 * 1024
"""The HTTP/2 window of a stream nobody reads (``grpc.http2.lookahead_bytes``)."""
OPEN_READ_SLOTS = 4
"""Health and reflection requests being received at once, server-wide."""
OPEN_READ_TIMEOUT = 2.0
"""Seconds a health or reflection request message may take to arrive (at most)."""
UNARY_ATTR = "_ctxwarden_unary"
"""Marks a client-streaming behaviour that serves a unary method."""

Behaviour = Callable[..., Any]


def is_unary(behaviour: object) -> bool:
    """Whether ``behaviour`` is a unary method served as client-streaming."""
    return bool(getattr(behaviour, UNARY_ATTR, False))


def mark_unary(behaviour: Behaviour) -> Behaviour:
    setattr(behaviour, UNARY_ATTR, True)
    return behaviour


class ReadGate:
    """At most ``slots`` reads in progress; each read at most ``timeout`` seconds,
    waiting for a slot included."""

    def __init__(self, slots: int, timeout: float, flag: str) -> None:
        self.slots = max(1, slots)
        self.timeout = timeout
        self.flag = flag
        self._sem: asyncio.Semaphore | None = None

    async def read(self, requests: AsyncIterator[Any], context: Any) -> Any:
        """The next request message; grpc.aio.EOF at the end of the stream."""
        if self._sem is None:
            self._sem = asyncio.Semaphore(self.slots)
        sem = self._sem
        acquired = False
        try:
            async with asyncio.timeout(self.timeout):
                await sem.acquire()
                acquired = True
                return await anext(requests, grpc.aio.EOF)
        except TimeoutError:
            pass
        finally:
            if acquired:
                sem.release()
        if acquired:
            _, message, trailer = rich_status(
                grpc.StatusCode.DEADLINE_EXCEEDED,
                code_pb2.DEADLINE_EXCEEDED,
                f"the request message did not arrive within {self.timeout:g} s; the server "
                f"drops requests that arrive this slowly ({self.flag})",
                ErrorReason.REQUEST_READ_TIMEOUT,
                {"timeout_seconds": f"{self.timeout:g}"},
            )
            await context.abort(
                grpc.StatusCode.DEADLINE_EXCEEDED, message, trailing_metadata=trailer
            )
        wait = max(self.timeout, 0.01)
        _, message, trailer = rich_status(
            grpc.StatusCode.RESOURCE_EXHAUSTED,
            code_pb2.RESOURCE_EXHAUSTED,
            f"the server is receiving {self.slots} requests already and none finished within "
            f"{self.timeout:g} s; retry in {wait:g} s",
            ErrorReason.SERVER_BUSY,
            retry_after=wait,
        )
        await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, message, trailing_metadata=trailer)

    async def read_one(self, requests: AsyncIterator[Any], context: Any) -> Any:
        request = await self.read(requests, context)
        if request is grpc.aio.EOF:
            _, message, trailer = rich_status(
                grpc.StatusCode.INVALID_ARGUMENT,
                code_pb2.INVALID_ARGUMENT,
                "the call ended without a request message; a unary method needs exactly one",
                ErrorReason.MISSING_REQUEST,
            )
            await context.abort(
                grpc.StatusCode.INVALID_ARGUMENT, message, trailing_metadata=trailer
            )
        return request

    async def each(self, requests: AsyncIterator[Any], context: Any) -> AsyncIterator[Any]:
        while True:
            request = await self.read(requests, context)
            if request is grpc.aio.EOF:
                return
            yield request


class BoundedReads(HandlerInterceptor):
    """The innermost interceptor: serves unary methods as client-streaming ones that
    read their request through a ReadGate (see the module doc)."""

    def __init__(self, context_gate: ReadGate, open_gate: ReadGate) -> None:
        super().__init__()
        self.context_gate = context_gate
        self.open_gate = open_gate

    def wrap(
        self, handler: grpc.RpcMethodHandler[Any, Any], method: str
    ) -> grpc.RpcMethodHandler[Any, Any]:
        ours = method.startswith(METHOD_PREFIX)
        gate = self.context_gate if ours else self.open_gate
        des, ser = handler.request_deserializer, handler.response_serializer
        if handler.unary_unary is not None:
            return grpc.stream_unary_rpc_method_handler(_unary(handler.unary_unary, gate), des, ser)
        if handler.unary_stream is not None:
            return grpc.stream_stream_rpc_method_handler(
                _server_stream(handler.unary_stream, gate), des, ser
            )
        if handler.stream_stream is not None and not ours:
            # Reflection: each message within the open timeout. StreamMessages
            # streams may idle between messages; they are counted by the rate
            # limiter and bounded by --max-concurrent-rpcs instead.
            return grpc.stream_stream_rpc_method_handler(
                _bidi(handler.stream_stream, gate), des, ser
            )
        return handler


def _unary(inner: Behaviour, gate: ReadGate) -> Behaviour:
    async def behaviour(requests: AsyncIterator[Any], context: Any) -> Any:
        request = await gate.read_one(requests, context)
        return await inner(request, context)

    return mark_unary(behaviour)


def _server_stream(inner: Behaviour, gate: ReadGate) -> Behaviour:
    if inspect.isasyncgenfunction(inner):

        async def generator(requests: AsyncIterator[Any], context: Any) -> AsyncIterator[Any]:
            request = await gate.read_one(requests, context)
            async for response in inner(request, context):
                yield response

        return mark_unary(generator)

    async def writer(requests: AsyncIterator[Any], context: Any) -> Any:
        request = await gate.read_one(requests, context)
        result = inner(request, context)
        if inspect.isawaitable(result):
            result = await result
        return result

    return mark_unary(writer)


def _bidi(inner: Behaviour, gate: ReadGate) -> Behaviour:
    if inspect.isasyncgenfunction(inner):

        async def generator(requests: AsyncIterator[Any], context: Any) -> AsyncIterator[Any]:
            async for response in inner(gate.each(requests, context), context):
                yield response

        return generator

    async def writer(requests: AsyncIterator[Any], context: Any) -> Any:
        result = inner(gate.each(requests, context), context)
        if inspect.isawaitable(result):
            result = await result
        return result

    return writer
