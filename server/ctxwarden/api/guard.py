"""The ContextService guard: authentication, per-peer limits on failed
authentication, per-tenant rate limits on every request message.

It runs before the request is read (see api/reads.py): an unauthenticated or
rate-limited unary call is answered without its request ever being received.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import grpc
from google.rpc import code_pb2

from ctxwarden.api.auth import Authenticator, AuthError
from ctxwarden.api.errors import rich_status
from ctxwarden.api.handlers import METHOD_PREFIX, HandlerInterceptor
from ctxwarden.api.reads import is_unary, mark_unary
from ctxwarden.api.tenancy import current_tenant, enter_tenant
from ctxwarden.core.reasons import ErrorReason

AUTH_FAILURE_BURST = 20
"""Failed authentications a peer may make at once..."""
AUTH_FAILURE_RATE = 1.0
"""...and per second after that..."""
AUTH_COOLDOWN_SECONDS = 10.0
"""...before every call from it is refused (even with valid credentials) for this long."""
MAX_TRACKED = 100_000


@dataclass(slots=True)
class TokenBucket:
    rate: float
    burst: float
    tokens: float = 0.0
    stamp: float = 0.0

    def take(self, now: float) -> float:
        """0 when allowed, else seconds until a token is available."""
        if self.stamp == 0.0:
            self.tokens, self.stamp = self.burst, now
        self.tokens = min(self.burst, self.tokens + (now - self.stamp) * self.rate)
        self.stamp = now
        if self.tokens >= 1:
            self.tokens -= 1
            return 0.0
        return (1 - self.tokens) / self.rate


class RateLimiter:
    """Per-tenant token buckets (request messages per second, burst = 2 s worth)."""

    def __init__(self, rps: float) -> None:
        self.rps = rps
        self._buckets: dict[str, TokenBucket] = {}

    def check(self, tenant: str) -> float:
        if self.rps <= 0:
            return 0.0
        bucket = self._buckets.get(tenant)
        if bucket is None:
            if len(self._buckets) > MAX_TRACKED:
                self._buckets.clear()
            bucket = self._buckets[tenant] = TokenBucket(self.rps, max(2 * self.rps, 1.0))
        return bucket.take(time.monotonic())


class FailureLimiter:
    """Failed authentications per peer: a token bucket of AUTH_FAILURE_BURST,
    refilled at AUTH_FAILURE_RATE per second; a peer that empties it is refused
    for AUTH_COOLDOWN_SECONDS."""

    def __init__(
        self,
        burst: float = AUTH_FAILURE_BURST,
        rate: float = AUTH_FAILURE_RATE,
        cooldown: float = AUTH_COOLDOWN_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.burst, self.rate, self.cooldown = burst, rate, cooldown
        self.clock = clock
        self._buckets: dict[str, TokenBucket] = {}
        self._blocked: dict[str, float] = {}

    def blocked(self, peer: str) -> float:
        """Seconds the peer must still wait (0: not blocked)."""
        until = self._blocked.get(peer)
        if until is None:
            return 0.0
        left = until - self.clock()
        if left <= 0:
            del self._blocked[peer]
            return 0.0
        return left

    def failed(self, peer: str) -> None:
        bucket = self._buckets.get(peer)
        if bucket is None:
            if len(self._buckets) > MAX_TRACKED:
                self._buckets.clear()
                self._blocked.clear()
            bucket = self._buckets[peer] = TokenBucket(self.rate, self.burst)
        now = self.clock()
        if bucket.take(now) > 0:
            self._blocked[peer] = now + self.cooldown


def peer_key(peer: str) -> str:
    """The client address without its port; every Unix-socket client is one peer."""
    if peer.startswith("unix"):
        return "unix"
    kind, _, address = peer.partition(":")
    host = address.rsplit(":", 1)[0] if address.count(":") >= 1 else address
    return f"{kind}:{host}"


def seconds_text(wait: float) -> str:
    """A wait for people: rounded up to 10 ms, never "0.00 s"."""
    return f"{max(math.ceil(wait * 100) / 100, 0.01):.2f} s"


def _retry_seconds(wait: float) -> float:
    return max(math.ceil(wait * 1000) / 1000, 0.001)


class RefusedRequest(Exception):
    """A stream's request the rate limit refused. Raised where the request is
    read, so the handler answers every earlier request first; the guard then
    ends the call with this status (code, text, trailing metadata with
    ErrorInfo and RetryInfo)."""

    def __init__(self, code: grpc.StatusCode, details: str, trailer: Any) -> None:
        super().__init__(details)
        self.code, self.details, self.trailer = code, details, trailer

    async def abort(self, context: grpc.aio.ServicerContext[Any, Any]) -> None:
        await context.abort(self.code, self.details, trailing_metadata=self.trailer)


class GuardInterceptor(HandlerInterceptor):
    """Authenticates ContextService calls, sets the tenant, applies rate limits."""

    def __init__(
        self, auth: Authenticator, limiter: RateLimiter, failures: FailureLimiter | None = None
    ) -> None:
        super().__init__()
        self.auth = auth
        self.limiter = limiter
        self.failures = failures or FailureLimiter()

    def wrap(
        self, handler: grpc.RpcMethodHandler[Any, Any], method: str
    ) -> grpc.RpcMethodHandler[Any, Any]:
        if not method.startswith(METHOD_PREFIX):
            return handler
        name = method[len(METHOD_PREFIX) :]
        des, ser = handler.request_deserializer, handler.response_serializer
        if handler.stream_unary is not None and is_unary(handler.stream_unary):
            inner: Any = handler.stream_unary

            async def unary(requests: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
                tenant = await self._authenticate(context, name)
                await self._admit(context, tenant)
                token = enter_tenant(tenant)
                try:
                    return await inner(requests, context)
                finally:
                    current_tenant.reset(token)

            return grpc.stream_unary_rpc_method_handler(mark_unary(unary), des, ser)
        if handler.stream_stream is not None:
            stream_inner: Any = handler.stream_stream

            async def stream(
                requests: Any, context: grpc.aio.ServicerContext[Any, Any]
            ) -> AsyncIterator[Any]:
                tenant = await self._authenticate(context, name)
                token = enter_tenant(tenant)
                # Without a rate there is nothing to check per message: no layer.
                limited = self._each(requests, tenant) if self.limiter.rps > 0 else requests
                try:
                    async for item in stream_inner(limited, context):
                        yield item
                except RefusedRequest as refused:
                    await refused.abort(context)
                finally:
                    # A stream abandoned while an answer was being sent (client gone)
                    # is closed later by the event loop, from another context, where
                    # the token is not valid; that context is gone anyway.
                    with contextlib.suppress(ValueError):
                        current_tenant.reset(token)

            return grpc.stream_stream_rpc_method_handler(stream, des, ser)
        return handler

    async def _each(self, requests: AsyncIterator[Any], tenant: str) -> AsyncIterator[Any]:
        """Every message of a stream counts like a unary call; one over the rate
        raises RefusedRequest in its place (the handler may read ahead)."""
        async for request in requests:
            refused = self._limited(tenant)
            if refused is not None:
                raise refused
            yield request

    async def _authenticate(self, context: grpc.aio.ServicerContext[Any, Any], method: str) -> str:
        if not self.auth.enabled:
            return ""
        peer = peer_key(_peer(context))
        wait = self.failures.blocked(peer)
        if wait > 0:
            await _abort(
                context,
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                code_pb2.RESOURCE_EXHAUSTED,
                f"too many failed authentication attempts from this client; every call from "
                f"it is refused for {AUTH_COOLDOWN_SECONDS:g} s (retry in {seconds_text(wait)})",
                ErrorReason.AUTH_RATE_LIMITED,
                wait,
            )
        try:
            return self.auth.authenticate(
                context.invocation_metadata(), dict(context.auth_context()), method
            )
        except AuthError as exc:
            self.failures.failed(peer)
            code = (
                code_pb2.UNAUTHENTICATED
                if exc.code is grpc.StatusCode.UNAUTHENTICATED
                else code_pb2.PERMISSION_DENIED
            )
            _, message, trailer = rich_status(exc.code, code, exc.message, exc.reason)
            await context.abort(exc.code, message, trailing_metadata=trailer)
            raise  # not reached: abort raises

    async def _admit(self, context: grpc.aio.ServicerContext[Any, Any], tenant: str) -> None:
        refused = self._limited(tenant)
        if refused is not None:
            await refused.abort(context)

    def _limited(self, tenant: str) -> RefusedRequest | None:
        """The refusal of a request over the tenant's rate (None: admitted)."""
        wait = self.limiter.check(tenant)
        if wait <= 0:
            return None
        return _refusal(
            grpc.StatusCode.RESOURCE_EXHAUSTED,
            code_pb2.RESOURCE_EXHAUSTED,
            f"rate limit exceeded for this tenant ({self.limiter.rps:g} requests per "
            f"second); retry in {seconds_text(wait)}",
            ErrorReason.RATE_LIMITED,
            wait,
        )


async def _abort(
    context: grpc.aio.ServicerContext[Any, Any],
    code: grpc.StatusCode,
    rpc_code: int,
    message: str,
    reason: str,
    wait: float,
) -> None:
    await _refusal(code, rpc_code, message, reason, wait).abort(context)


def _refusal(
    code: grpc.StatusCode, rpc_code: int, message: str, reason: str, wait: float
) -> RefusedRequest:
    """The status of a refusal to retry after ``wait`` seconds."""
    retry = _retry_seconds(wait)
    _, text, trailer = rich_status(
        code,
        rpc_code,
        message,
        reason,
        {"retry_after_seconds": f"{retry:.3f}"},
        retry_after=retry,
    )
    return RefusedRequest(code, text, trailer)


def _peer(context: grpc.aio.ServicerContext[Any, Any]) -> str:
    try:
        return str(context.peer())
    except Exception:
        return ""


__all__ = [
    "FailureLimiter",
    "GuardInterceptor",
    "RateLimiter",
    "RefusedRequest",
    "TokenBucket",
    "peer_key",
    "seconds_text",
]
