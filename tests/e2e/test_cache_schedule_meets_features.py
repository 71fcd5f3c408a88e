"""A session waiting for its cache to expire (cache_lifetime_seconds) against the other
features: archived, deleted, rolled back or forked while it waits. When its idle timer
fires, what happened meanwhile wins, nothing is written that should not be, and no timer
is left behind for a session that is gone. In process, on the scheduler's manual clock
(test_cache_schedule.py): nothing waits on wall-clock time."""

from __future__ import annotations

import pytest
from bench.cache_schedule import ManualTime

from ctxwarden.core.errors import NotFound
from ctxwarden.service.manager import SessionManager
from tests.e2e.test_cache_schedule import AWARE, scheduler, triggers, turn
from tests.support.inproc import new_session

LIFETIME = 300


async def _waiting_session(m: SessionManager, clock: ManualTime) -> str:
    sid = await new_session(m, policy=AWARE)
    while not m.background.waiting(sid):
        await turn(m, clock, sid, 20)
    return sid


async def test_archived_while_waiting_it_is_not_written_when_the_timer_fires(
    backend_url: str,
) -> None:
    async with scheduler(backend_url) as (m, clock):
        sid = await _waiting_session(m, clock)
        await m.archive_session(sid)
        await clock.advance(LIFETIME)
        await m.background.idle()
        assert await triggers(m, sid) == []
        assert not m.background.waiting(sid) and not m.background.pending(sid)


async def test_deleted_while_waiting_leaves_no_timer_and_no_checkpoint(backend_url: str) -> None:
    async with scheduler(backend_url) as (m, clock):
        sid = await _waiting_session(m, clock)
        await m.delete_session(sid)
        await clock.advance(LIFETIME)
        await m.background.idle()
        assert not m.background.waiting(sid) and not m.background.pending(sid)
        with pytest.raises(NotFound):
            await m.list_compactions(sid, 10, "")


async def test_rolled_back_below_the_soft_threshold_it_stops_waiting(backend_url: str) -> None:
    async with scheduler(backend_url) as (m, clock):
        sid = await _waiting_session(m, clock)
        await m.rollback(sid, 1, "", None)
        await clock.advance(LIFETIME)
        await m.background.idle()
        assert await triggers(m, sid) == []
        assert not m.background.waiting(sid)


async def test_a_fork_of_a_waiting_session_waits_on_its_own(backend_url: str) -> None:
    async with scheduler(backend_url) as (m, clock):
        sid = await _waiting_session(m, clock)
        fid = (await m.fork_session(sid, 0, "", None)).session_id
        await turn(m, clock, fid, 1)  # the fork's own growth notices it
        await clock.advance(LIFETIME)
        await m.background.idle()
        assert await triggers(m, sid) != [] and await triggers(m, fid) != []
        assert not m.background.waiting(sid) and not m.background.waiting(fid)
