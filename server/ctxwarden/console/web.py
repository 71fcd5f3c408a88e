"""The console's HTTP layer: routes, authentication, security headers, errors."""

from __future__ import annotations

import logging
import math
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import jinja2
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import FileResponse, HTMLResponse, RedirectResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ctxwarden.api.tenancy import current_tenant
from ctxwarden.console.auth import (
    CSRF_COOKIE,
    LOGIN_COOKIE,
    Caller,
    ConsoleAuth,
    Refused,
    Throttled,
    new_csrf,
    same,
)
from ctxwarden.console.config import ConsoleConfig
from ctxwarden.console.pages import PageNotFound, Pages
from ctxwarden.core.cache_prefix import CacheBreak
from ctxwarden.core.errors import CtxwardenError, InvalidArgument
from ctxwarden.core.tenancy import visible_id
from ctxwarden.service.console import ConsoleReader
from ctxwarden.util import loop_slices

log = logging.getLogger("ctxwarden.console")

DATA = Path(__file__).parent / "data"
CSP = (
    "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; "
    "frame-ancestors 'none'; base-uri 'none'"
)
SECURITY_HEADERS = [
    (b"content-security-policy", CSP.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"same-origin"),
    (b"cross-origin-opener-policy", b"same-origin"),
    (b"cross-origin-resource-policy", b"same-origin"),
]
MAX_FORM_BYTES = 16 * 1024


class SecurityHeaders:
    """Adds the CSP and friends to every response, errors included."""

    def __init__(self, app: ASGIApp, tls: bool) -> None:
        self.app = app
        self.headers = list(SECURITY_HEADERS)
        if tls:
            self.headers.append((b"strict-transport-security", b"max-age=31536000"))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), *self.headers]
            await send(message)

        await self.app(scope, receive, send_with_headers)


Page = Callable[[Request, Caller], Awaitable[Response]]


class Console:
    def __init__(self, reader: ConsoleReader, auth: ConsoleAuth, config: ConsoleConfig) -> None:
        self.auth = auth
        self.config = config
        self.pages = Pages(reader, config)
        self.templates = jinja2.Environment(
            loader=jinja2.FileSystemLoader(DATA),
            autoescape=True,
            undefined=jinja2.StrictUndefined,
        )
        self.templates.filters["n"] = lambda v: f"{int(v):,}"
        self.templates.filters["visible"] = visible_id
        self.templates.filters["when"] = _when
        self.templates.globals["break_label"] = lambda r: CacheBreak(r).label.replace("_", " ")

    def render(self, name: str, status: int = 200, **values: Any) -> HTMLResponse:
        html = self.templates.get_template(name).render(auth=self.auth.enabled, **values)
        return HTMLResponse(html, status, headers={"cache-control": "no-store"})

    def app(self) -> ASGIApp:
        routes = [
            Route("/", self._home),
            Route("/static/console.css", self._css),
            Route("/login", self._login_form, methods=["GET"]),
            Route("/login", self._login, methods=["POST"]),
            Route("/logout", self._guarded(self._logout), methods=["POST"]),
            Route("/sessions", self._guarded(self._sessions)),
            Route("/sessions/{sid}", self._guarded(self._session)),
            Route("/sessions/{sid}/tool-output/{seq:int}", self._guarded(self._tool_output)),
            Route("/sessions/{sid}/checkpoints/{cid}", self._guarded(self._checkpoint)),
        ]
        app = Starlette(routes=routes)
        app.add_exception_handler(404, self._not_found)
        app.add_exception_handler(405, self._not_found)
        return SecurityHeaders(app, self.config.tls)

    # -- plumbing ---------------------------------------------------------------

    def _guarded(self, page: Page) -> Callable[[Request], Awaitable[Response]]:
        async def endpoint(request: Request) -> Response:
            try:
                caller = self.auth.caller(
                    request.headers.get("authorization", ""),
                    request.cookies.get(LOGIN_COOKIE, ""),
                    _peer(request),
                )
            except Refused as exc:
                return self._refused(request, exc.message)
            except Throttled as exc:
                return _throttled(exc)
            token = current_tenant.set(caller.tenant)
            in_flight = loop_slices.call_began()  # big pages leave the loop room
            try:
                return await page(request, caller)
            except PageNotFound as exc:
                return self.render(
                    "error.html", 404, caller=caller, title="Not found", detail=str(exc)
                )
            except InvalidArgument as exc:
                return self.render(
                    "error.html", 400, caller=caller, title="Bad request", detail=str(exc)
                )
            except CtxwardenError as exc:
                log.warning("console: %s", exc)
                return self.render(
                    "error.html", 503, caller=caller, title="Unavailable", detail=str(exc)
                )
            finally:
                loop_slices.call_ended(in_flight)
                current_tenant.reset(token)

        return endpoint

    def _refused(self, request: Request, message: str) -> Response:
        if "authorization" in request.headers or "text/html" not in request.headers.get(
            "accept", ""
        ):
            return Response(
                message + "\n",
                401,
                {"www-authenticate": 'Bearer realm="ctxwarden"', "cache-control": "no-store"},
                media_type="text/plain",
            )
        return self._login_page(request, message, 401)

    def _login_page(
        self, request: Request, error: str, status: int, headers: dict[str, str] | None = None
    ) -> Response:
        csrf = new_csrf()
        target = request.url.path
        if request.url.query:
            target += "?" + request.url.query
        nxt = request.query_params.get("next", "") if target.startswith("/login") else target
        response = self.render("login.html", status, csrf=csrf, error=error, next=_local(nxt))
        response.headers.update(headers or {})
        response.set_cookie(
            CSRF_COOKIE, csrf, httponly=True, samesite="strict", secure=self.config.tls, path="/"
        )
        return response

    async def _not_found(self, request: Request, exc: Exception) -> Response:
        return self.render("error.html", 404, title="Not found", detail="no such page")

    async def _form(self, request: Request) -> dict[str, str] | None:
        """The urlencoded form of a same-origin POST (None: refused)."""
        origin = request.headers.get("origin", "")
        if origin and urlsplit(origin).netloc != request.headers.get("host", ""):
            return None
        if request.headers.get("sec-fetch-site", "same-origin") not in ("same-origin", "none"):
            return None
        body = b""
        async for chunk in request.stream():
            body += chunk
            if len(body) > MAX_FORM_BYTES:
                return None
        fields = parse_qs(body.decode("utf-8", "replace"), keep_blank_values=True)
        return {k: v[0] for k, v in fields.items()}

    # -- endpoints ----------------------------------------------------------------

    async def _home(self, request: Request) -> Response:
        return RedirectResponse("/sessions", 303)

    async def _css(self, request: Request) -> Response:
        return FileResponse(DATA / "console.css", media_type="text/css")

    async def _login_form(self, request: Request) -> Response:
        if not self.auth.enabled:
            return RedirectResponse("/sessions", 303)
        return self._login_page(request, "", 200)

    async def _login(self, request: Request) -> Response:
        form = await self._form(request)
        if form is None or not same(form.get("csrf", ""), request.cookies.get(CSRF_COOKIE, "")):
            return self.render("error.html", 403, title="Forbidden", detail="stale or forged form")
        key = form.get("api_key", "").strip()
        try:
            tenant = self.auth.offered(key, _peer(request))
        except Refused as exc:
            return self._login_page(request, exc.message, 401)
        except Throttled as exc:
            return self._login_page(request, exc.message, 429, _retry_after(exc))
        login_id, _ = self.auth.logins.add(tenant, key)
        response = RedirectResponse(_local(form.get("next", "")), 303)
        response.set_cookie(
            LOGIN_COOKIE,
            login_id,
            max_age=int(self.config.login_ttl_seconds),
            httponly=True,
            samesite="strict",
            secure=self.config.tls,
            path="/",
        )
        response.delete_cookie(CSRF_COOKIE, path="/")
        return response

    async def _logout(self, request: Request, caller: Caller) -> Response:
        form = await self._form(request)
        if form is None or not same(form.get("csrf", ""), caller.csrf):
            return self.render("error.html", 403, title="Forbidden", detail="stale or forged form")
        self.auth.logins.remove(caller.login_id)
        response = RedirectResponse("/login", 303)
        response.delete_cookie(LOGIN_COOKIE, path="/")
        return response

    async def _sessions(self, request: Request, caller: Caller) -> Response:
        values = await self.pages.sessions(request, caller.tenant)
        return self.render("sessions.html", caller=caller, **values)

    async def _session(self, request: Request, caller: Caller) -> Response:
        values = await self.pages.session(request, caller.tenant, request.path_params["sid"])
        return self.render("session.html", caller=caller, **values)

    async def _checkpoint(self, request: Request, caller: Caller) -> Response:
        values = await self.pages.checkpoint(
            request, caller.tenant, request.path_params["sid"], request.path_params["cid"]
        )
        return self.render("checkpoint.html", caller=caller, **values)

    async def _tool_output(self, request: Request, caller: Caller) -> Response:
        values = await self.pages.tool_output(
            request, caller.tenant, request.path_params["sid"], request.path_params["seq"]
        )
        return self.render("tool_output.html", caller=caller, **values)


def _when(time_us: int) -> str:
    """A stored time (microseconds since the epoch) for people, in UTC."""
    return datetime.fromtimestamp(time_us / 1e6, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _peer(request: Request) -> str:
    """The client's address (the port aside), the key failed logins are counted by."""
    return request.client.host if request.client is not None else ""


def _retry_after(exc: Throttled) -> dict[str, str]:
    return {"retry-after": str(max(1, math.ceil(exc.wait))), "cache-control": "no-store"}


def _throttled(exc: Throttled) -> Response:
    return Response(exc.message + "\n", 429, _retry_after(exc), media_type="text/plain")


def _local(target: str) -> str:
    """A path on this console (never another site)."""
    if not target.startswith("/") or target.startswith("//") or "\\" in target:
        return "/sessions"
    return target
