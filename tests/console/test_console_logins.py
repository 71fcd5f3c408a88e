"""Console logins: a bounded table per tenant (one tenant's logins never log another
out) and failed credentials limited per client address, like the gRPC API's
(HTTP 429 with Retry-After). A real console (uvicorn) over a real database, in the
test's event loop, with an injected clock."""

from __future__ import annotations

import hashlib
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
import pytest

from ctxwarden.api.auth import Authenticator
from ctxwarden.api.guard import AUTH_COOLDOWN_SECONDS, AUTH_FAILURE_BURST
from ctxwarden.console.auth import LOGIN_COOKIE, Logins
from ctxwarden.console.config import ConsoleConfig
from ctxwarden.console.server import start_console
from ctxwarden.service.console import ConsoleReader
from ctxwarden.service.manager import SessionManager
from ctxwarden.store.console_reads import ConsoleReads
from tests.support.inproc import FakeClock, replica

KEY_A = "logins-key-tenant-a-" + "a" * 16
KEY_B = "logins-key-tenant-b-" + "b" * 16
CAP = 4
"""Logins kept per tenant in these tests (the default is far larger)."""


@pytest.fixture
async def manager(backend_url: str) -> AsyncIterator[SessionManager]:
    async with replica(backend_url) as m:
        yield m


@asynccontextmanager
async def console(manager: SessionManager, clock: FakeClock) -> AsyncIterator[str]:
    keys = {hashlib.sha256(k.encode()).hexdigest(): t for k, t in ((KEY_A, "a"), (KEY_B, "b"))}
    reader = ConsoleReader(manager, ConsoleReads(manager.store.engine))
    config = ConsoleConfig("127.0.0.1:0", max_logins_per_tenant=CAP)
    server = await start_console(config, reader, Authenticator(api_keys=keys), clock=clock)
    try:
        yield server.address
    finally:
        await server.close()


def client(url: str, source: str = "127.0.0.1") -> httpx.AsyncClient:
    """A client whose connections come from ``source`` (any 127.x address is loopback)."""
    transport = httpx.AsyncHTTPTransport(local_address=source)
    return httpx.AsyncClient(base_url=url, transport=transport, timeout=30)


async def log_in(http: httpx.AsyncClient, key: str) -> httpx.Response:
    """The login form, then its POST (the CSRF token from the form)."""
    form = await http.get("/login")
    found = re.search(r'name="csrf" value="([^"]+)"', form.text)
    assert found, form.text
    return await http.post(
        "/login", data={"csrf": found.group(1), "api_key": key, "next": "/sessions"}
    )


async def tenant_of(http: httpx.AsyncClient, login_id: str) -> str:
    """The tenant a login cookie is for ("" once it is gone), asked by a new client."""
    async with httpx.AsyncClient(base_url=http.base_url, cookies={LOGIN_COOKIE: login_id}) as c:
        r = await c.get("/sessions")
    if r.status_code == 401:
        return ""
    assert r.status_code == 200, r.text
    found = re.search(r'data-testid="tenant">tenant ([^<]+)<', r.text)
    assert found
    return found.group(1)


async def test_one_tenant_logging_in_never_logs_another_out(manager: SessionManager) -> None:
    clock = FakeClock()
    async with console(manager, clock) as url, client(url) as http:
        done = await log_in(http, KEY_B)
        assert done.status_code == 303
        b_login = done.cookies[LOGIN_COOKIE]
        a_logins = []
        for _ in range(3 * CAP + 1):  # tenant A logs in far past the cap
            r = await log_in(http, KEY_A)
            assert r.status_code == 303
            a_logins.append(r.cookies[LOGIN_COOKIE])
        assert await tenant_of(http, b_login) == "b"  # B is still logged in
        # A's own table is bounded: its oldest logins went, its newest CAP stay.
        assert [await tenant_of(http, x) for x in a_logins[:-CAP]] == [""] * (2 * CAP + 1)
        assert [await tenant_of(http, x) for x in a_logins[-CAP:]] == ["a"] * CAP
        # Logins still expire (the clock is the console's).
        clock.now += 8 * 3600 + 1
        assert await tenant_of(http, b_login) == ""


async def test_failed_logins_are_limited_per_client_address(manager: SessionManager) -> None:
    clock = FakeClock()
    async with (
        console(manager, clock) as url,
        client(url, "127.0.0.1") as attacker,
        client(url, "127.0.0.2") as other,
    ):
        statuses = [
            (await log_in(attacker, "wrong-key")).status_code for _ in range(AUTH_FAILURE_BURST + 4)
        ]
        first = statuses.index(429)
        # The API's allowance: a burst of failures is answered 401, then the address waits.
        assert first == AUTH_FAILURE_BURST + 1
        assert statuses[:first] == [401] * first and set(statuses[first:]) == {429}
        refused = await log_in(attacker, KEY_A)  # a valid key from that address too
        assert refused.status_code == 429
        assert refused.headers["retry-after"] == f"{AUTH_COOLDOWN_SECONDS:.0f}"
        assert "too many failed" in refused.text
        assert LOGIN_COOKIE not in refused.cookies
        bearer = await attacker.get("/sessions", headers={"authorization": f"Bearer {KEY_A}"})
        assert bearer.status_code == 429 and bearer.headers["retry-after"]
        # Another address logs in as usual.
        ok = await log_in(other, KEY_A)
        assert ok.status_code == 303
        assert await tenant_of(other, ok.cookies[LOGIN_COOKIE]) == "a"
        # Once the cool-down is over the address may try again.
        clock.now += AUTH_COOLDOWN_SECONDS / 2
        assert (await log_in(attacker, KEY_A)).status_code == 429
        assert (await attacker.get("/sessions", headers={"retry": "1"})).status_code == 401
        clock.now += AUTH_COOLDOWN_SECONDS / 2 + 0.01
        assert (await log_in(attacker, KEY_A)).status_code == 303


async def test_failed_bearer_credentials_count_too(manager: SessionManager) -> None:
    clock = FakeClock()
    async with console(manager, clock) as url, client(url, "127.0.0.3") as http:
        wrong = {"authorization": "Bearer not-a-key"}
        statuses = [
            (await http.get("/sessions", headers=wrong)).status_code
            for _ in range(AUTH_FAILURE_BURST + 4)
        ]
        assert statuses.index(429) == AUTH_FAILURE_BURST + 1
        good = await http.get("/sessions", headers={"authorization": f"Bearer {KEY_B}"})
        assert good.status_code == 429 and int(good.headers["retry-after"]) >= 1
        clock.now += AUTH_COOLDOWN_SECONDS + 0.01
        again = await http.get("/sessions", headers={"authorization": f"Bearer {KEY_B}"})
        assert again.status_code == 200


def test_ten_thousand_and_one_logins_of_one_tenant_keep_the_others() -> None:
    """The default cap, at the table itself: tenant A past it, tenant B untouched."""
    clock = FakeClock()
    logins = Logins(3600.0, ConsoleConfig("x").max_logins_per_tenant, clock)
    b_id, _ = logins.add("b", KEY_B)
    a_ids = [logins.add("a", KEY_A)[0] for _ in range(10_001)]
    found = logins.get(b_id)
    assert found is not None and found.tenant == "b"
    assert logins.get(a_ids[0]) is None and logins.get(a_ids[-1]) is not None
    assert sum(logins.get(x) is not None for x in a_ids) == logins.per_tenant
    clock.now += 3600.0  # expired
    assert logins.get(b_id) is None and logins.get(a_ids[-1]) is None
