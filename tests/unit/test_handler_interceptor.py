"""A handler interceptor wraps each method's handler once, not on every call."""

from __future__ import annotations

import asyncio
from typing import Any

import grpc

from ctxwarden.api import handlers
from ctxwarden.api.auth import Authenticator
from ctxwarden.api.guard import GuardInterceptor, RateLimiter
from ctxwarden.api.reads import BoundedReads, ReadGate

METHOD = "/ctxwarden.v1.ContextService/GetSession"


class _Details(grpc.HandlerCallDetails):
    def __init__(self, method: str) -> None:
        self.method = method
        self.invocation_metadata = ()


async def _get_session(request: Any, context: Any) -> Any:
    return request


def _chain() -> tuple[Any, Any]:
    """The guard around the bounded reads around one service handler, as the
    server stacks them; returns (ask for a handler, the service's handler)."""
    service: Any = grpc.unary_unary_rpc_method_handler(_get_session)
    reads = BoundedReads(ReadGate(4, 1.0, "--request-read-timeout"), ReadGate(4, 1.0, "open"))
    guard = GuardInterceptor(Authenticator(), RateLimiter(0))

    async def find(details: grpc.HandlerCallDetails) -> Any:
        return service if details.method == METHOD else None

    async def ask(method: str) -> Any:
        async def inner(details: grpc.HandlerCallDetails) -> Any:
            return await reads.intercept_service(find, details)

        return await guard.intercept_service(inner, _Details(method))

    return ask, service


def test_every_call_of_a_method_gets_the_same_wrapped_handler() -> None:
    ask, service = _chain()

    async def main() -> None:
        first, second = await ask(METHOD), await ask(METHOD)
        assert first is second
        assert first is not service and first.stream_unary is not None  # wrapped: read bounded
        assert await ask("/ctxwarden.v1.ContextService/NoSuchMethod") is None

    asyncio.run(main())


def test_another_handler_for_the_method_is_wrapped_anew_and_the_memory_is_bounded() -> None:
    reads = BoundedReads(ReadGate(4, 1.0, "flag"), ReadGate(4, 1.0, "open"))
    handlers_seen: list[Any] = [grpc.unary_unary_rpc_method_handler(_get_session) for _ in range(3)]

    async def main() -> None:
        wrapped = []
        for handler in handlers_seen:

            async def find(details: grpc.HandlerCallDetails, h: Any = handler) -> Any:
                return h

            wrapped.append(await reads.intercept_service(find, _Details(METHOD)))
        assert len({id(w) for w in wrapped}) == 3
        for n in range(handlers.MAX_WRAPPED + 10):

            async def fresh(details: grpc.HandlerCallDetails) -> Any:
                return grpc.unary_unary_rpc_method_handler(_get_session)

            await reads.intercept_service(fresh, _Details(f"{METHOD}{n}"))
        assert len(reads._wrapped) == handlers.MAX_WRAPPED

    asyncio.run(main())
