"""The reads that restore a session: now (O(kept)) or as it was (exact replay)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, replace
from operator import attrgetter
from typing import Any, TypeVar

from sqlalchemy import Row, Select, select
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from ctxwarden.core.messages import Message, MessageState
from ctxwarden.core.replay import (
    CheckpointRecord,
    MessageRecord,
    ReplayPlan,
    RevisionMark,
    calibration_at,
    memory_at,
    plan_replay,
    replay_messages,
    replay_session,
)
from ctxwarden.core.session import Checkpoint, Session
from ctxwarden.store import lineage
from ctxwarden.store.checkpoint_codec import checkpoint_from_row
from ctxwarden.store.codec import message_from_row, session_from_row, session_with_settings
from ctxwarden.store.lineage import Segment
from ctxwarden.store.memory_blocks import block_at
from ctxwarden.store.tables import C, M, S, V
from ctxwarden.util.loop_slices import Slicer

R = TypeVar("R")

REPLAY_STEP = 512
"""Stored messages sorted into a replay between two looks at the clock."""
FETCH_ROWS = 1000
"""Row objects SQLAlchemy makes at a time for a restore or replay."""


@dataclass(frozen=True, slots=True)
class Snapshot:
    """What a restore reads: the session, its newest valid checkpoint, kept messages."""

    session: Session
    checkpoint: Checkpoint | None
    kept: list[Message]


async def load_snapshot(engine: AsyncEngine, session_id: str) -> Snapshot | None:
    """Session row, newest valid checkpoint, kept active messages: O(kept)."""
    async with engine.connect() as conn:
        srow = (await conn.execute(select(S).where(S.c.session_id == session_id))).first()
        if srow is None:
            return None
        crow = (
            await conn.execute(
                select(C)
                .where(C.c.session_id == session_id, C.c.superseded_at_seq == 0)
                .order_by(C.c.created_at.desc(), C.c.compaction_id.desc())
                .limit(1)
            )
        ).first()
        checkpoint = checkpoint_from_row(crow) if crow is not None else None
        first = checkpoint.first_kept_seq if checkpoint is not None else 0
        session = session_from_row(srow)
        kept = await _active_from(conn, session, first)
    return Snapshot(session, checkpoint, kept)


async def _active_from(conn: AsyncConnection, session: Session, first: int) -> list[Message]:
    """The session's active messages from seq ``first`` on, as it sees them."""
    if not session.parent_session_id:
        own = select(M).where(
            M.c.session_id == session.session_id,
            M.c.seq >= first,
            M.c.state == int(MessageState.ACTIVE),
        )
        return await decoded(conn, own.order_by(M.c.seq), message_from_row)
    chain = await _chain(conn, session)
    seen = select(M).where(lineage.where(chain, active_only=True, lo=max(first, 1)))
    return await decoded(conn, seen.order_by(M.c.seq), lambda r: lineage.as_seen(chain, r)[0])


@dataclass(frozen=True, slots=True)
class Tail:
    """What was appended to a session since a version a copy has: the session
    row now, and the active messages after the copy's last seq."""

    session: Session
    appended: list[Message]


def only_appends_since(version: int, row: Row[Any]) -> bool:
    """Whether every write of the session row since ``version`` was a plain append
    (models.SessionRow.plain_run_start)."""
    stored = int(row.version)
    return int(row.plain_version) == stored and int(row.plain_run_start) <= version <= stored


async def load_tail(
    engine: AsyncEngine, session_id: str, version: int, last_seq: int, limit: int
) -> Tail | None:
    """The appends since a copy at ``version`` (whose last seq is ``last_seq``):
    None when anything else changed the session since (a rollback, a compaction,
    new settings, a delete...), when it is gone, or when more than ``limit``
    messages were appended: then the copy is restored whole."""
    async with engine.connect() as conn:
        srow = (await conn.execute(select(S).where(S.c.session_id == session_id))).first()
        if srow is None or not only_appends_since(version, srow):
            return None
        session = session_from_row(srow)
        if session.deleted or session.last_seq - last_seq > limit:
            return None
        appended = await _active_from(conn, session, last_seq + 1)
    return Tail(session, appended)


async def decoded(
    conn: AsyncConnection, query: Select[Any], fn: Callable[[Row[Any]], R]
) -> list[R]:
    """``[fn(row) for row in query's rows]``, in slices: SQLAlchemy makes its row
    objects ``FETCH_ROWS`` at a time and they are decoded a slice at a time, so
    neither is done for a 100,000-message session in one go and the event loop
    runs in between (util/loop_slices)."""
    out: list[R] = []
    slicer = Slicer()
    async for part in _partitions(conn, query):
        for i, row in enumerate(part):
            out.append(fn(row))
            if i & 63 == 63 and slicer.due():
                await slicer.pause()
    slicer.done()
    return out


async def _partitions(
    conn: AsyncConnection, query: Select[Any]
) -> AsyncIterator[Sequence[Row[Any]]]:
    """The rows ``FETCH_ROWS`` at a time. On PostgreSQL through a server-side
    cursor: asyncpg would otherwise parse a 100,000-row answer into records in
    one go, on the event loop. Elsewhere in one round trip: on MariaDB a
    streamed fetch read row by row and slowed every reload; SQLite's driver
    fetches in its own thread anyway."""
    if conn.dialect.name == "postgresql":
        streamed = await conn.stream(query.execution_options(yield_per=FETCH_ROWS))
        async for part in streamed.partitions(FETCH_ROWS):
            yield part
        return
    result = await conn.execute(query)
    for part in result.partitions(FETCH_ROWS):
        yield part


async def _chain(conn: AsyncConnection, session: Session) -> list[Segment]:
    return await lineage.chain(
        conn, session.session_id, session.parent_session_id, session.parent_seq, session.fork_seq
    )


async def replay_snapshot(engine: AsyncEngine, session_id: str, as_of_seq: int) -> Snapshot | None:
    """What the session looked like just before message ``as_of_seq`` was appended.

    core.replay decides what was in force then; this reads what it needs.
    """
    sid = session_id
    async with engine.connect() as conn:
        srow = (await conn.execute(select(S).where(S.c.session_id == sid))).first()
        if srow is None:
            return None
        base = session_from_row(srow)
        if base.parent_session_id and as_of_seq < base.fork_seq:
            # Before the fork was made it was its parent: replay that.
            parent = await replay_snapshot(engine, base.parent_session_id, as_of_seq)
            if parent is None:
                return None
            return replace(parent, session=_as_fork(parent.session, base))
        chain = await _chain(conn, base)
        plan = plan_replay(await _checkpoints(conn, sid), await _revisions(conn, sid), as_of_seq)
        messages = await _messages(conn, chain, plan.seqs)
        settings = await _settings(conn, base, plan.revision)
        changes = await _calibration_changes(conn, chain, as_of_seq)
        blocks = await block_at(conn, sid, as_of_seq)
    memory = memory_at(blocks, as_of_seq)
    session = replay_session(plan, base, settings, calibration_at(changes, as_of_seq), memory)
    return Snapshot(session, plan.checkpoint, await _replayed(plan, messages))


async def _replayed(plan: ReplayPlan, records: list[MessageRecord]) -> list[Message]:
    """``replay_messages``, a slice of records at a time (the loop runs in between)."""
    kept: list[Message] = []
    slicer = Slicer()
    for start in range(0, len(records), REPLAY_STEP):
        kept.extend(replay_messages(plan, records[start : start + REPLAY_STEP]))
        if slicer.due():
            await slicer.pause()
    kept.sort(key=attrgetter("seq"))  # each slice came sorted: little left to do
    slicer.done()
    return kept


def _as_fork(replayed: Session, fork: Session) -> Session:
    """A parent's replayed session presented as the fork's."""
    return replace(
        replayed,
        session_id=fork.session_id,
        parent_session_id=fork.parent_session_id,
        parent_seq=fork.parent_seq,
        fork_seq=fork.fork_seq,
        create_time_us=fork.create_time_us,
        delete_time_us=fork.delete_time_us,
        version=fork.version,
    )


async def _checkpoints(conn: AsyncConnection, sid: str) -> list[CheckpointRecord]:
    """Every checkpoint of the session, with when it was superseded."""
    rows = (await conn.execute(select(C).where(C.c.session_id == sid))).all()
    return [CheckpointRecord(checkpoint_from_row(r), int(r.superseded_at_seq)) for r in rows]


async def _revisions(conn: AsyncConnection, sid: str) -> list[RevisionMark]:
    """Every settings revision of the session (numbers and times, not settings)."""
    query = select(V.c.revision, V.c.at_seq).where(V.c.session_id == sid)
    return [RevisionMark(int(r.revision), int(r.at_seq)) for r in (await conn.execute(query))]


async def _messages(
    conn: AsyncConnection, chain: list[Segment], seqs: range
) -> list[MessageRecord]:
    """The stored messages with a seq in ``seqs``, whatever their state."""
    if seqs.stop <= seqs.start:
        return []
    query = select(M).where(lineage.where(chain, lo=max(seqs.start, 1), hi=seqs.stop - 1))
    return await decoded(conn, query, lambda r: MessageRecord(*lineage.as_seen(chain, r)))


async def _settings(conn: AsyncConnection, base: Session, revision: int | None) -> Session | None:
    """``base`` with the settings and number of ``revision`` (None: none recorded)."""
    if revision is None:
        return None
    query = select(V.c.settings, V.c.settings_json).where(
        V.c.session_id == base.session_id, V.c.revision == revision
    )
    row = (await conn.execute(query)).first()
    if row is None:
        return None
    settings = session_with_settings(base, row.settings, row.settings_json)
    return replace(settings, revision=revision)


async def _calibration_changes(
    conn: AsyncConnection, chain: list[Segment], as_of_seq: int
) -> list[tuple[int, tuple[float, int]]]:
    """The newest calibration change before ``as_of_seq`` (core.replay.calibration_at
    needs only that one): (seq, (ratio, samples)), or none."""
    query = (
        select(M.c.seq, M.c.calib_ratio, M.c.calib_samples)
        .where(
            lineage.where(chain, hi=as_of_seq - 1),
            M.c.seq < as_of_seq,
            M.c.calib_samples.is_not(None),
        )
        .order_by(M.c.seq.desc())
        .limit(1)
    )
    rows = (await conn.execute(query)).all()
    return [(int(r.seq), (float(r.calib_ratio), int(r.calib_samples))) for r in rows]
