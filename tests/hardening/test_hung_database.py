"""A hung database (process stopped with SIGSTOP) is UNAVAILABLE within a bound.

The private MariaDB the suite starts itself is paused: it accepts connections
but answers nothing. Every call, including the ones that queue for a pooled
connection, must fail with UNAVAILABLE / DATABASE_UNAVAILABLE and RetryInfo
within the configured timeouts, and the server must work again once the
database answers.
"""

from __future__ import annotations

import asyncio
import time

import pytest
from grpc_health.v1 import health as health_aio

from ctxwarden.core.errors import Unavailable
from ctxwarden.observability.health import DatabaseProbe, HealthMonitor
from ctxwarden.service.manager import SessionManager
from ctxwarden.service.pages import MessageFilter
from tests.support.inproc import new_session, replica, user_msg
from tests.support.mariadb import PrivateMariaDB
from tests.support.server import migrate_database

pytestmark = pytest.mark.db_outage

DB_TIMEOUT = 1.5
POOL_TIMEOUT = 1.0
BOUND = 2 * DB_TIMEOUT + 1.0
"""The longest any call may take to fail while the database hangs."""


async def _timed(call: asyncio.Future[object] | asyncio.Task[object]) -> tuple[float, object]:
    start = time.monotonic()
    try:
        result: object = await call
    except Exception as exc:
        result = exc
    return time.monotonic() - start, result


@pytest.mark.parametrize("backend", [pytest.param("mysql", marks=pytest.mark.mysql)])
async def test_a_hung_database_is_unavailable_within_the_timeouts(
    backend: str, private_mariadb: PrivateMariaDB
) -> None:
    url = private_mariadb.create_database()
    migrate_database(url)
    async with replica(
        url,
        db_timeout_seconds=DB_TIMEOUT,
        db_pool_timeout_seconds=POOL_TIMEOUT,
        db_connect_timeout_seconds=1.0,
        db_pool_size=2,
    ) as m:
        sids = [await new_session(m) for _ in range(4)]
        for sid in sids:
            await m.append(sid, [user_msg("before")], None, None)
        health = health_aio.aio.HealthServicer()
        monitor = HealthMonitor(
            health, ("",), DatabaseProbe(m.store.ping, url), interval=0.2, timeout=1.0
        )
        assert await monitor.check_once()
        with private_mariadb.paused():
            calls = [asyncio.ensure_future(_call(m, sids[i % 4], i)) for i in range(40)]
            outcomes = await asyncio.gather(*(_timed(c) for c in calls))
            assert not await monitor.check_once()
            assert not monitor.serving  # health is NOT_SERVING while it hangs
        assert await monitor.check_once()
        slowest = max(t for t, _ in outcomes)
        errors = [r for _, r in outcomes]
        assert all(isinstance(e, Unavailable) for e in errors), {type(e) for e in errors}
        reasons = {e.reason for e in errors if isinstance(e, Unavailable)}
        assert reasons <= {"DATABASE_UNAVAILABLE", "SESSION_BUSY"}, reasons
        assert all(e.retry_after > 0 for e in errors if isinstance(e, Unavailable))
        assert slowest <= BOUND, f"slowest call took {slowest:.2f} s"
        print(f"40 callers, hung database: slowest UNAVAILABLE after {slowest:.2f} s")
        # Once it answers again, every session works and nothing was half-written.
        for sid in sids:
            result = await m.append(sid, [user_msg("after")], None, None)
            listed, _ = await m.list_messages(sid, 0, "", MessageFilter())
            assert listed[0].text == "before"
            assert listed[-1].text == "after"
            assert result.last_seq == len(listed)


async def _call(m: SessionManager, sid: str, i: int) -> object:
    if i % 3 == 0:
        return await m.append(sid, [user_msg(f"during {i}")], None, None)
    if i % 3 == 1:
        m.hot.evict(sid)  # forces a restore from the database
        return await m.build_model_input(sid, 0)
    return await m.list_sessions("", "", 10, "")
