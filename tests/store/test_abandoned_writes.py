"""A read after an append whose caller went away (a cancelled stream, a killed
client) sees that append's outcome.

The group committer goes on with an append whose caller was cancelled: it may
commit after the caller is gone. The server drops its copy of the session then
(it cannot know the outcome), and the next call reads the session from the
database. Read before the write settled, that copy (or the session row
GetSession returns) was older than what this process went on to write: the next
append lost its compare-and-set (ABORTED) and GetSession disagreed with the
messages stored. A read of such a session now waits for the write's outcome.

Each test holds the abandoned append's batch at its database write, cancels the
caller, starts the next call, lets the loop run the ready tasks (a call that
does not wait goes to the database in its first step: no I/O comes before), checks
that it has not read the database yet, then lets the write go. Both modes of the
committer: with group commit off (``--append-writers 0``) the write ran on the
caller's task and its cancel interrupted the write itself, whose COMMIT may
already have been sent.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence

import pytest
import sqlalchemy as sa

from ctxwarden.config import Settings
from ctxwarden.core.messages import ContentBlock, Message, Role
from ctxwarden.core.session import ContextPolicy, Session
from ctxwarden.service.manager import SessionManager
from ctxwarden.store.batch_write import AppendOp
from ctxwarden.store.engine import make_engine
from ctxwarden.store.repository import Store
from ctxwarden.store.writer import Writer
from ctxwarden.util import ids
from tests.support.held import Held, Watched


@pytest.fixture(params=[None, 0], ids=["group-commit", "no-batching"])
async def manager(
    backend_url: str, request: pytest.FixtureRequest
) -> AsyncIterator[SessionManager]:
    """A manager whose appends are group-committed (the default) or each written on a
    pooled connection of its own (``--append-writers 0``)."""
    store = Store(make_engine(backend_url), append_writers=request.param)
    m = SessionManager(store, Settings())
    try:
        yield m
    finally:
        await m.close()


def _user(text: str) -> Message:
    return Message(Role.USER, (ContentBlock.of_text(text),))


async def _session(m: SessionManager) -> str:
    sid = f"abandoned-{ids.new_id()}"
    policy = ContextPolicy(tokenizer="heuristic")
    await m.create_session(Session(session_id=sid, policy=policy), sid, None)
    await m.append(sid, [_user("one")], None, None)
    await m.append(sid, [_user("two")], None, None)
    return sid


async def _abandoned_append(m: SessionManager, sid: str) -> Held:
    """Seq 3 appended, its caller cancelled while the batch waits at the database."""
    held = Held(m.store.messages.committer._batch, "write")
    append = asyncio.ensure_future(m.append(sid, [_user("three")], None, None))
    await held.entered.wait()
    append.cancel()
    with pytest.raises(asyncio.CancelledError):
        await append
    return held


async def _ready_tasks_ran() -> None:
    """Let every ready task run its next steps (no time passes, nothing waits on I/O)."""
    for _ in range(20):
        await asyncio.sleep(0)


async def _stored_seqs(m: SessionManager, sid: str) -> list[int]:
    async with m.store.engine.connect() as conn:
        rows = await conn.execute(
            sa.text("SELECT seq FROM messages WHERE session_id = :sid ORDER BY seq"),
            {"sid": sid},
        )
        return [seq for (seq,) in rows]


async def test_the_next_append_waits_for_the_abandoned_one(manager: SessionManager) -> None:
    sid = await _session(manager)
    held = await _abandoned_append(manager, sid)
    restored = Watched(manager.store, "load_snapshot")
    following = asyncio.ensure_future(manager.append(sid, [_user("four")], None, None))
    await _ready_tasks_ran()
    assert not restored.entered.is_set(), "restored while its own write was in flight"
    held.release()
    result = await following
    assert result.last_seq == 4
    assert await _stored_seqs(manager, sid) == [1, 2, 3, 4]


async def test_get_session_waits_for_the_abandoned_append(manager: SessionManager) -> None:
    sid = await _session(manager)
    held = await _abandoned_append(manager, sid)
    read = Watched(manager.store.sessions, "get")
    session = asyncio.ensure_future(manager.get_session(sid))
    await _ready_tasks_ran()
    assert not read.entered.is_set(), "read the row while its own write was in flight"
    held.release()
    assert (await session).last_seq == 3
    assert await _stored_seqs(manager, sid) == [1, 2, 3]


async def test_a_failed_abandoned_append_lets_reads_go(manager: SessionManager) -> None:
    """An abandoned append that fails (here: its session moved on meanwhile) settles
    too: the read then sees the session without it."""
    sid = await _session(manager)
    held = await _abandoned_append(manager, sid)
    other = SessionManager(Store(make_engine(str(manager.store.engine.url))), Settings())
    try:
        await other.append(sid, [_user("elsewhere")], None, None)
    finally:
        await other.close()
    session = asyncio.ensure_future(manager.get_session(sid))
    await _ready_tasks_ran()
    held.release()
    assert (await session).last_seq == 3
    assert await _stored_seqs(manager, sid) == [1, 2, 3]


async def test_a_caller_cancelled_as_its_batch_committed_leaves_nothing_to_wait_for(
    manager: SessionManager,
) -> None:
    """The cancel reaches the caller's future at once, the caller a loop step later: a
    batch resolved in between has an outcome already, and nothing waits for another."""
    sid = await _session(manager)
    batch = manager.store.messages.committer._batch
    real = batch.write
    tasks: list[asyncio.Future[object]] = []

    async def write_then_cancel(w: Writer, ops: Sequence[AppendOp], stage: list[str]) -> None:
        await real(w, ops, stage)
        batch.write = real  # type: ignore[method-assign]
        tasks[0].cancel()  # before the batch is resolved, in the same step

    batch.write = write_then_cancel  # type: ignore[method-assign, assignment]
    tasks.append(asyncio.ensure_future(manager.append(sid, [_user("three")], None, None)))
    with pytest.raises(asyncio.CancelledError):
        await tasks[0]
    assert not manager.store.unsettled(sid), "waits for an outcome that came already"
    assert (await manager.get_session(sid)).last_seq == 3
