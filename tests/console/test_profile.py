"""The chart's token profile grows with the session (range reads after the first scan)
and always equals a fresh scan of the same history."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import pytest

from ctxwarden.core.messages import ContentBlock, Message, Role, StopReason
from ctxwarden.core.session import Session
from ctxwarden.service.console import ConsoleReader, series
from ctxwarden.service.console_profile import TokenProfiles
from ctxwarden.service.manager import SessionManager
from ctxwarden.store.console_reads import ConsoleReads
from tests.support.inproc import replica


@pytest.fixture
async def manager(backend_url: str) -> AsyncIterator[SessionManager]:
    async with replica(backend_url) as m:
        yield m


def _text(role: Role, text: str) -> Message:
    return Message(role, (ContentBlock.of_text(text),))


async def test_incremental_profile_matches_a_fresh_scan(manager: SessionManager) -> None:
    sid = f"profile-{uuid.uuid4().hex[:8]}"
    await manager.create_session(Session(session_id=sid, model="gpt-4.1"), sid, None)
    reads = ConsoleReads(manager.store.engine)
    grown = TokenProfiles(manager.runtime, reads)
    reader = ConsoleReader(manager, reads)
    for step in range(6):
        batch = [
            _text(
                Role.USER if i % 2 == 0 else Role.ASSISTANT, f"step {step} message {i} " * (i + 1)
            )
            for i in range(37)
        ]
        await manager.append(sid, batch, None, None)
        if step == 3:  # a failed turn, rolled back: the profile must see it go
            failed = Message(Role.ASSISTANT, (), stop_reason=StopReason.ERROR, error_message="x")
            await manager.append(sid, [_text(Role.USER, "again"), failed], None, None)
            await manager.rollback(sid, None, "", None, None)
        session = await manager.get_session(sid)
        incremental = await grown.profile(session, 20, 1000)
        # The same buckets read afresh in one scan.
        tokens, rolled = await reads.bucket_sums(
            sid, width=incremental.width, after_seq=0, tool_cap=1000
        )
        assert (incremental.tokens, incremental.rolled_back) == (tokens, rolled)
        fresh = await TokenProfiles(manager.runtime, reads).profile(session, 20, 1000)
        assert series(incremental, 10).points[-1] == series(fresh, 10).points[-1]
        assert incremental.last_seq == session.last_seq
    chart = await reader.context_series(await manager.get_session(sid), 10, 20)
    assert len(chart.points) <= 40 and chart.points[-1].seq == session.last_seq
    assert sum(p.rolled_back for p in chart.points) >= 1
