"""Authentication: static API keys and JWTs in ``authorization: Bearer ...``,
optionally mutual TLS. Health and reflection stay unauthenticated.

Missing or bad credentials are UNAUTHENTICATED; a valid credential that lacks
a tenant or the needed scope is PERMISSION_DENIED.
"""

from __future__ import annotations

import contextlib
import hashlib
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import jwt
from google.rpc import code_pb2

from ctxwarden.api.errors import rich_status
from ctxwarden.api.handlers import SERVICE_NAME
from ctxwarden.api.tenancy import current_tenant
from ctxwarden.observability.logging import note_tenant

TENANT_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
READ_METHODS = frozenset(
    {
        "GetSession",
        "ListSessions",
        "ListMessages",
        "BuildModelInput",
        "ListCompactions",
        "GetToolOutput",
        "CountTokens",
    }
)
JWT_ALGORITHMS = ("HS256", "RS256", "ES256")


class AuthError(Exception):
    def __init__(self, code: grpc.StatusCode, reason: str, message: str) -> None:
        super().__init__(message)
        self.code, self.reason, self.message = code, reason, message


def _unauthenticated(reason: str, message: str) -> AuthError:
    return AuthError(grpc.StatusCode.UNAUTHENTICATED, reason, message)


def _denied(reason: str, message: str) -> AuthError:
    return AuthError(grpc.StatusCode.PERMISSION_DENIED, reason, message)


def load_api_keys(path: str) -> dict[str, str]:
    """``TENANT_ID:SHA256_HEX_OF_KEY`` per line; ``#`` comments. Returns hash -> tenant."""
    keys: dict[str, str] = {}
    for number, raw in enumerate(Path(path).read_text().splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        tenant, sep, digest = line.rpartition(":")
        digest = digest.strip().lower()
        if (
            not sep
            or not TENANT_RE.fullmatch(tenant.strip())
            or not re.fullmatch(r"[0-9a-f]{64}", digest)
        ):
            raise ValueError(
                f"{path}:{number}: expected TENANT_ID:SHA256_HEX (64 hex digits), got {line!r}"
            )
        keys[digest] = tenant.strip()
    return keys


@dataclass(frozen=True, slots=True)
class JwtConfig:
    keys: jwt.PyJWKSet
    issuer: str = ""
    audience: str = ""
    tenant_claim: str = "tenant"


def load_jwks(path: str) -> jwt.PyJWKSet:
    try:
        return jwt.PyJWKSet.from_json(Path(path).read_text())
    except (OSError, ValueError, jwt.PyJWTError) as exc:
        raise ValueError(f"cannot load the JWKS file {path}: {exc}") from None


@dataclass(slots=True)
class Authenticator:
    api_keys: dict[str, str] = field(default_factory=dict)
    jwt: JwtConfig | None = None
    mtls_tenants: bool = False
    """With client-certificate auth and no bearer credential, the certificate's
    common name is the tenant."""

    @property
    def enabled(self) -> bool:
        return bool(self.api_keys) or self.jwt is not None or self.mtls_tenants

    def authenticate(self, metadata: Any, auth_context: dict[str, Any], method: str) -> str:
        """The tenant of the call's credential (raises AuthError)."""
        token = ""
        for key, value in metadata or ():
            if key == "authorization":
                value = value.decode() if isinstance(value, bytes) else value
                scheme, _, token = value.partition(" ")
                if scheme.lower() != "bearer" or not token.strip():
                    raise _unauthenticated(
                        "MALFORMED_CREDENTIALS", "authorization must be 'Bearer <token>'"
                    )
                token = token.strip()
        if not token:
            if self.mtls_tenants:
                names = auth_context.get("x509_common_name") or []
                if names:
                    name = names[0].decode() if isinstance(names[0], bytes) else str(names[0])
                    if TENANT_RE.fullmatch(name):
                        return name
            raise _unauthenticated(
                "MISSING_CREDENTIALS",
                "this server requires credentials: send 'authorization: Bearer <API key or JWT>'",
            )
        if token.count(".") == 2 and self.jwt is not None:
            return self._jwt(token, method)
        tenant = self.api_keys.get(hashlib.sha256(token.encode()).hexdigest())
        if tenant is None:
            raise _unauthenticated("INVALID_CREDENTIALS", "the API key or token is not valid")
        return tenant

    def _jwt(self, token: str, method: str) -> str:
        assert self.jwt is not None
        cfg = self.jwt
        try:
            header = jwt.get_unverified_header(token)
            kid = header.get("kid")
            candidates = [k for k in cfg.keys.keys if kid is None or k.key_id == kid]
            if not candidates:
                raise _unauthenticated("INVALID_CREDENTIALS", "the token's key id is unknown")
            alg = header.get("alg", "")
            if alg not in JWT_ALGORITHMS:
                raise _unauthenticated("INVALID_CREDENTIALS", f"algorithm {alg!r} is not accepted")
            claims: dict[str, Any] = jwt.decode(
                token,
                key=candidates[0],
                algorithms=[alg],
                issuer=cfg.issuer or None,
                audience=cfg.audience or None,
                options={
                    "require": ["exp"],
                    "verify_aud": bool(cfg.audience),
                    "verify_iss": bool(cfg.issuer),
                },
                leeway=30,
            )
        except jwt.ExpiredSignatureError:
            raise _unauthenticated("EXPIRED_CREDENTIALS", "the token has expired") from None
        except jwt.PyJWTError as exc:
            raise _unauthenticated(
                "INVALID_CREDENTIALS", f"the token is not valid: {exc}"
            ) from None
        tenant = claims.get(cfg.tenant_claim)
        if not isinstance(tenant, str) or not TENANT_RE.fullmatch(tenant):
            raise _denied(
                "NO_TENANT",
                f"the token has no usable {cfg.tenant_claim!r} claim (a tenant ID of "
                "1-64 characters of [A-Za-z0-9._-])",
            )
        _check_scope(claims, method)
        return tenant


def _check_scope(claims: dict[str, Any], method: str) -> None:
    """Tokens that carry scopes need ``ctxwarden`` (everything), or
    ``ctxwarden:read`` for reads and ``ctxwarden:write`` for writes."""
    raw = claims.get("scope", claims.get("scp"))
    if raw is None:
        return
    scopes = set(raw.split() if isinstance(raw, str) else raw)
    needed = "ctxwarden:read" if method in READ_METHODS else "ctxwarden:write"
    if (
        "ctxwarden" in scopes
        or needed in scopes
        or (needed == "ctxwarden:read" and "ctxwarden:write" in scopes)
    ):
        return
    raise _denied("MISSING_SCOPE", f"{method} needs the scope {needed!r} (or 'ctxwarden')")


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
    """Per-tenant token buckets (requests per second, burst = 2 s worth)."""

    def __init__(self, rps: float) -> None:
        self.rps = rps
        self._buckets: dict[str, TokenBucket] = {}

    def check(self, tenant: str) -> float:
        if self.rps <= 0:
            return 0.0
        bucket = self._buckets.get(tenant)
        if bucket is None:
            if len(self._buckets) > 100_000:
                self._buckets.clear()
            bucket = self._buckets[tenant] = TokenBucket(self.rps, max(2 * self.rps, 1.0))
        return bucket.take(time.monotonic())


class GuardInterceptor(grpc.aio.ServerInterceptor):
    """Authenticates ContextService calls, sets the tenant, applies rate limits."""

    def __init__(self, auth: Authenticator, limiter: RateLimiter) -> None:
        self.auth = auth
        self.limiter = limiter
        self.prefix = f"/{SERVICE_NAME}/"

    async def intercept_service(
        self,
        continuation: Callable[
            [grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler[Any, Any] | None]
        ],
        details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler[Any, Any] | None:
        handler = await continuation(details)
        method: str = details.method
        if handler is None or not method.startswith(self.prefix):
            return handler
        name = method[len(self.prefix) :]
        guard = self._guard
        if handler.unary_unary is not None:
            inner: Any = handler.unary_unary

            async def unary(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
                token = await guard(context, name)
                try:
                    return await inner(request, context)
                finally:
                    current_tenant.reset(token)

            return grpc.unary_unary_rpc_method_handler(
                unary,
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer,
            )
        if handler.stream_stream is not None:
            stream_inner: Any = handler.stream_stream

            async def stream(
                requests: Any, context: grpc.aio.ServicerContext[Any, Any]
            ) -> AsyncIterator[Any]:
                token = await guard(context, name)
                try:
                    async for item in stream_inner(requests, context):
                        yield item
                finally:
                    # A stream abandoned while an answer was being sent (client gone)
                    # is closed later by the event loop, from another context, where
                    # the token is not valid; that context is gone anyway.
                    with contextlib.suppress(ValueError):
                        current_tenant.reset(token)

            return grpc.stream_stream_rpc_method_handler(
                stream,
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer,
            )
        return handler

    async def _guard(self, context: grpc.aio.ServicerContext[Any, Any], method: str) -> Any:
        tenant = ""
        if self.auth.enabled:
            try:
                tenant = self.auth.authenticate(
                    context.invocation_metadata(), dict(context.auth_context()), method
                )
            except AuthError as exc:
                code = (
                    code_pb2.UNAUTHENTICATED
                    if exc.code is grpc.StatusCode.UNAUTHENTICATED
                    else code_pb2.PERMISSION_DENIED
                )
                _, message, trailer = rich_status(exc.code, code, exc.message, exc.reason)
                await context.abort(exc.code, message, trailing_metadata=trailer)
        wait = self.limiter.check(tenant)
        if wait > 0:
            _, message, trailer = rich_status(
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                code_pb2.RESOURCE_EXHAUSTED,
                f"rate limit exceeded for this tenant; retry in {wait:.2f} s",
                "RATE_LIMITED",
                {"retry_after_seconds": f"{wait:.3f}"},
                retry_after=wait,
            )
            await context.abort(
                grpc.StatusCode.RESOURCE_EXHAUSTED, message, trailing_metadata=trailer
            )
        return note_tenant(tenant)


def describe(auth: Authenticator) -> str:
    parts = []
    if auth.api_keys:
        parts.append(f"{len(auth.api_keys)} API keys")
    if auth.jwt is not None:
        parts.append("JWT")
    if auth.mtls_tenants:
        parts.append("client certificates")
    return ", ".join(parts) or "none"


__all__ = [
    "AuthError",
    "Authenticator",
    "GuardInterceptor",
    "JwtConfig",
    "RateLimiter",
    "describe",
    "load_api_keys",
    "load_jwks",
]
