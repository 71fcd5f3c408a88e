"""Authentication: static API keys and JWTs in ``authorization: Bearer ...``,
optionally mutual TLS. Health and reflection stay unauthenticated.

Missing or bad credentials are UNAUTHENTICATED; a valid credential that lacks
a tenant or the needed scope is PERMISSION_DENIED.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import grpc

from ctxwarden.core.reasons import ErrorReason

if TYPE_CHECKING:
    # Imported where JWTs are used: PyJWT loads cryptography (~9 MiB of RSS)
    # that a server without --jwks never needs.
    import jwt

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
        "GetMemory",
        "ListMemories",
        "GetUsage",
    }
)
"""Methods a ``ctxwarden:read`` token may call; every other method (ArchiveSession and
UnarchiveSession too) needs ``ctxwarden:write``."""
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
    import jwt

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
                        ErrorReason.MALFORMED_CREDENTIALS, "authorization must be 'Bearer <token>'"
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
                ErrorReason.MISSING_CREDENTIALS,
                "this server requires credentials: send 'authorization: Bearer <API key or JWT>'",
            )
        if token.count(".") == 2 and self.jwt is not None:
            return self._jwt(token, method)
        tenant = self.api_keys.get(hashlib.sha256(token.encode()).hexdigest())
        if tenant is None:
            raise _unauthenticated(
                ErrorReason.INVALID_CREDENTIALS, "the API key or token is not valid"
            )
        return tenant

    def _jwt(self, token: str, method: str) -> str:
        import jwt

        assert self.jwt is not None
        cfg = self.jwt
        try:
            header = jwt.get_unverified_header(token)
            kid = header.get("kid")
            alg = header.get("alg", "")
            if alg not in JWT_ALGORITHMS:
                raise _unauthenticated(
                    ErrorReason.INVALID_CREDENTIALS, f"algorithm {alg!r} is not accepted"
                )
            candidates = [k for k in cfg.keys.keys if kid is None or k.key_id == kid]
            if kid is None:
                # No key id: every key that can check this algorithm is a candidate
                # (several keys are listed during a key rotation).
                candidates = [k for k in candidates if _fits(k, alg)]
            if not candidates:
                raise _unauthenticated(
                    ErrorReason.INVALID_CREDENTIALS, "the token's key id is unknown"
                )
            claims = _decode(token, candidates, alg, cfg)
        except jwt.ExpiredSignatureError:
            raise _unauthenticated(
                ErrorReason.EXPIRED_CREDENTIALS, "the token has expired"
            ) from None
        except jwt.PyJWTError as exc:
            raise _unauthenticated(
                ErrorReason.INVALID_CREDENTIALS, f"the token is not valid: {exc}"
            ) from None
        tenant = claims.get(cfg.tenant_claim)
        if not isinstance(tenant, str) or not TENANT_RE.fullmatch(tenant):
            raise _denied(
                ErrorReason.NO_TENANT,
                f"the token has no usable {cfg.tenant_claim!r} claim (a tenant ID of "
                "1-64 characters of [A-Za-z0-9._-])",
            )
        _check_scope(claims, method)
        return tenant


_KTY = {"HS": "oct", "RS": "RSA", "ES": "EC"}


def _fits(key: jwt.PyJWK, alg: str) -> bool:
    """Whether ``key`` verifies ``alg`` (its own or inferred algorithm, and key type)."""
    return key.algorithm_name == alg and key.key_type == _KTY.get(alg[:2])


def _decode(token: str, candidates: list[jwt.PyJWK], alg: str, cfg: JwtConfig) -> dict[str, Any]:
    """The verified claims, from the first candidate key whose signature check passes."""
    import jwt

    options: Any = {
        "require": ["exp"],
        "verify_aud": bool(cfg.audience),
        "verify_iss": bool(cfg.issuer),
    }
    failure: jwt.PyJWTError = jwt.InvalidSignatureError("no key verifies the signature")
    for key in candidates:
        try:
            claims: dict[str, Any] = jwt.decode(
                token,
                key=key,
                algorithms=[alg],
                issuer=cfg.issuer or None,
                audience=cfg.audience or None,
                options=options,
                leeway=30,
            )
            return claims
        except (jwt.InvalidSignatureError, jwt.InvalidKeyError) as exc:
            failure = exc  # another key of the set may have signed it
    raise failure


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
    raise _denied(
        ErrorReason.MISSING_SCOPE, f"{method} needs the scope {needed!r} (or 'ctxwarden')"
    )


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
    "JwtConfig",
    "describe",
    "load_api_keys",
    "load_jwks",
]
