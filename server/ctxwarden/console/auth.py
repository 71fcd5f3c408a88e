"""Console authentication: the gRPC API's credentials, over HTTP.

A request carries ``Authorization: Bearer <API key or JWT>``, or the login
cookie a login form set. The cookie holds only a random login ID; the credential
stays in this process's memory and is checked again on every request (an
expired JWT or a removed key ends the login). The cookie is ``HttpOnly``,
``SameSite=Strict`` and, when the console serves TLS, ``Secure``.

Logins are kept in one bounded table per tenant: a tenant past its cap loses its
own oldest login, never another tenant's. A credential offered by a client (the
login form or a bearer header) that fails counts against the client's address
exactly as a failed authentication does on the gRPC API (``api/guard.py``
``FailureLimiter``: a burst, then one a second); an address past that is refused
(429 with Retry-After) for the API's cool-down, valid credentials included.

The console only reads; its two state-changing forms (log in, log out) carry a
CSRF token that must match a cookie (log in) or the login (log out), and a
cross-site ``Origin`` is refused outright.
"""

from __future__ import annotations

import hmac
import secrets
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from ctxwarden.api.auth import Authenticator, AuthError
from ctxwarden.api.guard import AUTH_COOLDOWN_SECONDS, FailureLimiter, seconds_text

LOGIN_COOKIE = "ctxw_login"
CSRF_COOKIE = "ctxw_csrf"
READ_METHOD = "ListSessions"
"""The method credentials are checked for: a read (scoped tokens need ctxwarden:read)."""


class Refused(Exception):
    """No usable credential: 401 (with the login form for a browser)."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class Throttled(Exception):
    """Too many failed credentials from this client address: 429, Retry-After ``wait``."""

    def __init__(self, wait: float) -> None:
        self.wait = wait
        self.message = (
            "too many failed logins from this address; its logins and bearer credentials "
            f"are refused for {AUTH_COOLDOWN_SECONDS:g} s (retry in {seconds_text(wait)})"
        )
        super().__init__(self.message)


@dataclass(frozen=True, slots=True)
class Login:
    tenant: str
    token: str
    csrf: str
    expires: float


@dataclass(frozen=True, slots=True)
class Caller:
    tenant: str
    login_id: str = ""
    csrf: str = ""
    """The login's CSRF token (for its log-out form); "" for bearer requests."""


class Logins:
    """Logins by cookie value, in one table per tenant of at most ``per_tenant``
    (a tenant's oldest login goes first; expired ones go before that)."""

    def __init__(
        self, ttl: float, per_tenant: int, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.ttl = ttl
        self.per_tenant = max(1, per_tenant)
        self.clock = clock
        self._tables: dict[str, OrderedDict[str, Login]] = {}
        self._tenant_of: dict[str, str] = {}

    def add(self, tenant: str, token: str) -> tuple[str, Login]:
        login_id = secrets.token_urlsafe(32)
        now = self.clock()
        login = Login(tenant, token, secrets.token_urlsafe(32), now + self.ttl)
        table = self._tables.setdefault(tenant, OrderedDict())
        # One TTL for all: the table is in expiry order, the expired ones first.
        while table:
            oldest = next(iter(table.values()))
            if len(table) < self.per_tenant and oldest.expires > now:
                break
            gone, _ = table.popitem(last=False)
            del self._tenant_of[gone]
        table[login_id] = login
        self._tenant_of[login_id] = tenant
        return login_id, login

    def get(self, login_id: str) -> Login | None:
        table = self._tables.get(self._tenant_of.get(login_id, ""))
        login = table.get(login_id) if table is not None else None
        if login is None:
            return None
        if login.expires <= self.clock():
            self.remove(login_id)
            return None
        return login

    def remove(self, login_id: str) -> None:
        tenant = self._tenant_of.pop(login_id, None)
        if tenant is None:
            return
        table = self._tables[tenant]
        del table[login_id]
        if not table:
            del self._tables[tenant]


class ConsoleAuth:
    def __init__(
        self, authenticator: Authenticator, logins: Logins, failures: FailureLimiter
    ) -> None:
        self.authenticator = authenticator
        self.logins = logins
        self.failures = failures

    @property
    def enabled(self) -> bool:
        return self.authenticator.enabled

    def offered(self, token: str, peer: str) -> str:
        """The tenant of a credential a client offers (the login form, a bearer
        header): raises Throttled while ``peer`` (its address) is refused, else
        Refused, counted against ``peer`` when the credential is wrong."""
        wait = self.failures.blocked(peer)
        if wait > 0:
            raise Throttled(wait)
        try:
            return self._check(token)
        except Refused:
            if token:
                self.failures.failed(peer)
            raise

    def _check(self, token: str) -> str:
        if not token:
            raise Refused("this console requires credentials: log in with an API key")
        try:
            return self.authenticator.authenticate(
                (("authorization", f"Bearer {token}"),), {}, READ_METHOD
            )
        except AuthError as exc:
            raise Refused(exc.message) from None

    def caller(self, authorization: str, login_cookie: str, peer: str) -> Caller:
        """Who is asking: a bearer header wins over the login cookie."""
        if not self.enabled:
            return Caller("")
        if authorization:
            scheme, _, token = authorization.partition(" ")
            if scheme.lower() != "bearer" or not token.strip():
                raise Refused("authorization must be 'Bearer <API key or JWT>'")
            return Caller(self.offered(token.strip(), peer))
        login = self.logins.get(login_cookie) if login_cookie else None
        if login is None:
            raise Refused("this console requires credentials: log in with an API key")
        try:  # the credential a login keeps, checked again: no guess, not counted
            return Caller(self._check(login.token), login_cookie, login.csrf)
        except Refused:
            self.logins.remove(login_cookie)
            raise


def same(a: str, b: str) -> bool:
    return bool(a) and bool(b) and hmac.compare_digest(a.encode(), b.encode())


def new_csrf() -> str:
    return secrets.token_urlsafe(32)
