"""Console authentication: the gRPC API's credentials, over HTTP.

A request carries ``Authorization: Bearer <API key or JWT>``, or the login
cookie a login form set. The cookie holds only a random login ID; the credential
stays in this process's memory and is checked again on every request (an
expired JWT or a removed key ends the login). The cookie is ``HttpOnly``,
``SameSite=Strict`` and, when the console serves TLS, ``Secure``.

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

LOGIN_COOKIE = "ctxw_login"
CSRF_COOKIE = "ctxw_csrf"
READ_METHOD = "ListSessions"
"""The method credentials are checked for: a read (scoped tokens need ctxwarden:read)."""


class Refused(Exception):
    """No usable credential: 401 (with the login form for a browser)."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


@dataclass(frozen=True, slots=True)
class Login:
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
    """Logins by cookie value, oldest evicted first."""

    def __init__(
        self, ttl: float, capacity: int, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.ttl = ttl
        self.capacity = capacity
        self.clock = clock
        self._logins: OrderedDict[str, Login] = OrderedDict()

    def add(self, token: str) -> tuple[str, Login]:
        login_id = secrets.token_urlsafe(32)
        login = Login(token, secrets.token_urlsafe(32), self.clock() + self.ttl)
        self._logins[login_id] = login
        while len(self._logins) > self.capacity:
            self._logins.popitem(last=False)
        return login_id, login

    def get(self, login_id: str) -> Login | None:
        login = self._logins.get(login_id)
        if login is None:
            return None
        if login.expires <= self.clock():
            del self._logins[login_id]
            return None
        return login

    def remove(self, login_id: str) -> None:
        self._logins.pop(login_id, None)


class ConsoleAuth:
    def __init__(self, authenticator: Authenticator, logins: Logins) -> None:
        self.authenticator = authenticator
        self.logins = logins

    @property
    def enabled(self) -> bool:
        return self.authenticator.enabled

    def tenant_of(self, token: str) -> str:
        """The tenant of a bearer credential (raises Refused)."""
        if not token:
            raise Refused("this console requires credentials: log in with an API key")
        try:
            return self.authenticator.authenticate(
                (("authorization", f"Bearer {token}"),), {}, READ_METHOD
            )
        except AuthError as exc:
            raise Refused(exc.message) from None

    def caller(self, authorization: str, login_cookie: str) -> Caller:
        """Who is asking: a bearer header wins over the login cookie."""
        if not self.enabled:
            return Caller("")
        if authorization:
            scheme, _, token = authorization.partition(" ")
            if scheme.lower() != "bearer" or not token.strip():
                raise Refused("authorization must be 'Bearer <API key or JWT>'")
            return Caller(self.tenant_of(token.strip()))
        login = self.logins.get(login_cookie) if login_cookie else None
        if login is None:
            raise Refused("this console requires credentials: log in with an API key")
        try:
            return Caller(self.tenant_of(login.token), login_cookie, login.csrf)
        except Refused:
            self.logins.remove(login_cookie)
            raise


def same(a: str, b: str) -> bool:
    return bool(a) and bool(b) and hmac.compare_digest(a.encode(), b.encode())


def new_csrf() -> str:
    return secrets.token_urlsafe(32)
