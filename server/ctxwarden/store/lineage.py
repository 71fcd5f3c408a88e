"""Forks share their ancestors' stored rows instead of copying them.

A fork's session row names its parent (``parent_key``), the last seq it reads
from it (``parent_seq``) and the seq it was made at (``fork_seq``). Its
messages are the parent's rows with a seq up to ``parent_seq``, seen as they
were just before ``fork_seq`` (a message the parent rolled back later is still
active for the fork), followed by its own rows. The parent may itself be a
fork, so the messages of a session are read from a chain of segments, each a
seq range of one stored session. Seq ranges of segments never overlap, so a
read over the chain is one query ordered by seq. An ancestor's rows are seen as
they were at the earliest fork point between it and the session: a fork made
at seq 4 of a fork made at seq 6 sees the first session as it was before seq
4, a rollback it made at last_seq 4 not yet (seqs are one numbering along a
chain, so fork points and rollback seqs compare).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from sqlalchemy import ColumnElement, and_, insert, or_, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from ctxwarden.core.messages import Message, MessageState
from ctxwarden.store.checkpoint_codec import checkpoint_bytes
from ctxwarden.store.codec import message_from_row
from ctxwarden.store.tables import C, M, S
from ctxwarden.util import ids

MAX_DEPTH = 64
"""Forks of forks deeper than this are refused (each level is one more read)."""


@dataclass(frozen=True, slots=True)
class Segment:
    """The rows of ``key`` with a seq in ``lo..hi`` (``hi`` None: no bound),
    seen as they were just before ``as_of`` (None: as they are)."""

    key: str
    lo: int = 1
    hi: int | None = None
    as_of: int | None = None


def own(key: str) -> list[Segment]:
    """The chain of a session that is no fork."""
    return [Segment(key)]


async def chain(
    conn: AsyncConnection, key: str, parent_key: str, parent_seq: int, fork_seq: int
) -> list[Segment]:
    """The segments a session's messages are read from, its own first.

    Reads one session row per ancestor (none for a session that is no fork)."""
    segments = [Segment(key, parent_seq + 1 if parent_key else 1)]
    hi, as_of, parent = parent_seq, fork_seq, parent_key
    for _ in range(MAX_DEPTH):
        if not parent or hi < 1:
            break
        row = (
            await conn.execute(
                select(S.c.parent_key, S.c.parent_seq, S.c.fork_seq).where(S.c.session_id == parent)
            )
        ).first()
        if row is None:
            break
        lo = int(row.parent_seq) + 1 if row.parent_key else 1
        if lo <= hi:
            segments.append(Segment(parent, lo, hi, as_of))
        # Seen at the earlier of the two fork points: a fork made before its
        # source's own fork point sees the grandparent as it was then.
        as_of = min(as_of, int(row.fork_seq))
        hi, parent = min(hi, int(row.parent_seq)), str(row.parent_key)
    return segments


async def chain_of(conn: AsyncConnection, key: str) -> list[Segment]:
    """``chain`` for a session known by its key (one primary-key read first)."""
    row = (
        await conn.execute(
            select(S.c.parent_key, S.c.parent_seq, S.c.fork_seq).where(S.c.session_id == key)
        )
    ).first()
    if row is None or not row.parent_key:
        return own(key)
    return await chain(conn, key, str(row.parent_key), int(row.parent_seq), int(row.fork_seq))


def is_fork(segments: Sequence[Segment]) -> bool:
    return len(segments) > 1 or segments[0].lo > 1


def where(
    segments: Sequence[Segment],
    *,
    active_only: bool = False,
    lo: int | None = None,
    hi: int | None = None,
) -> ColumnElement[bool]:
    """Rows of the chain (with a seq in ``lo..hi`` when given; only those active
    as the session sees them with ``active_only``)."""
    parts = []
    for seg in segments:
        start = max(seg.lo, lo) if lo is not None else seg.lo
        stop = seg.hi if hi is None else (hi if seg.hi is None else min(seg.hi, hi))
        if stop is not None and start > stop:
            continue
        conds: list[ColumnElement[bool]] = [M.c.session_id == seg.key]
        if start > 1:
            conds.append(M.c.seq >= start)
        if stop is not None:
            conds.append(M.c.seq <= stop)
        if active_only:
            active = M.c.state == int(MessageState.ACTIVE)
            if seg.as_of is not None:
                active = or_(active, M.c.rolled_back_at_seq >= seg.as_of)
            conds.append(active)
        parts.append(and_(*conds))
    if not parts:
        return M.c.seq < 0  # nothing: an always-false condition
    return parts[0] if len(parts) == 1 else or_(*parts)


def as_seen(segments: Sequence[Segment], row: Any) -> tuple[Message, int]:
    """A row of the chain as the session sees it: (message, rolled_back_at_seq)."""
    message = message_from_row(row)
    rolled_back_at = int(row.rolled_back_at_seq)
    if len(segments) == 1:
        return message, rolled_back_at
    as_of = next((s.as_of for s in segments if s.key == row.session_id), None)
    if as_of is not None and message.state != MessageState.ACTIVE and rolled_back_at >= as_of:
        return replace(message, state=MessageState.ACTIVE), 0
    return message, rolled_back_at


def messages(segments: Sequence[Segment], rows: Sequence[Any]) -> list[Message]:
    return [as_seen(segments, r)[0] for r in rows]


async def take_over(conn: AsyncConnection, key: str, from_seq: int, *, charge: bool = False) -> int:
    """Before a rollback in a fork reaches message ``from_seq`` it inherited:
    copy the inherited rows from ``from_seq`` on into the fork (as the fork sees
    them) and lower its ``parent_seq`` below them, so the rollback can mark
    them. Returns the bytes copied (0 when nothing is inherited from there),
    added to the fork's stored_bytes with ``charge``."""
    row = (
        await conn.execute(
            select(S.c.parent_key, S.c.parent_seq, S.c.fork_seq).where(S.c.session_id == key)
        )
    ).first()
    if row is None or not row.parent_key or int(row.parent_seq) < from_seq:
        return 0
    segments = await chain(conn, key, str(row.parent_key), int(row.parent_seq), int(row.fork_seq))
    inherited = segments[1:]
    rows = (
        await conn.execute(
            select(M).where(where(inherited, lo=from_seq, hi=int(row.parent_seq))).order_by(M.c.seq)
        )
    ).all()
    copied = 0
    for r in rows:
        copy = dict(r._mapping)
        message, rolled_back_at = as_seen(segments, r)  # the whole chain: a lone parent too
        copy.update(session_id=key, state=int(message.state), rolled_back_at_seq=rolled_back_at)
        copied += len(copy["data"] or b"") + len((copy["body"] or "").encode()) + 64
        await conn.execute(insert(M).values(**copy))
    values: dict[str, Any] = {"parent_seq": max(0, from_seq - 1)}
    if charge:  # the fork is not the session being written: tell its copies
        values.update(stored_bytes=S.c.stored_bytes + copied, version=S.c.version + 1)
    await conn.execute(update(S).where(S.c.session_id == key).values(**values))
    return copied


async def hand_over(conn: AsyncConnection, key: str, last_seq: int, from_seq: int) -> int:
    """Before session ``key`` marks its messages from ``from_seq`` on rolled back
    while its last_seq is ``last_seq``: a fork made at that very point
    (``fork_seq`` = last_seq + 1) could not tell the marks from ones made before
    it forked, so it takes those rows over first. Returns the bytes copied (each
    charged to its fork's row; the caller counts them for the tenant)."""
    forks = (
        await conn.execute(
            select(S.c.session_id).where(
                S.c.parent_key == key,
                S.c.fork_seq == last_seq + 1,
                S.c.parent_seq >= from_seq,
            )
        )
    ).all()
    copied = 0
    for row in forks:
        copied += await take_over(conn, str(row.session_id), from_seq, charge=True)
    return copied


async def adopt_checkpoints(conn: AsyncConnection, key: str) -> int:
    """Before a rewind in a fork: copy the checkpoints it inherited that were
    valid where it forked (the rewind may fall back to one of them), each once
    (a copy shows the original's ID). Returns the bytes copied."""
    segments = await chain_of(conn, key)
    if not is_fork(segments):
        return 0
    query = select(C.c.origin_id).where(C.c.session_id == key, C.c.origin_id != "")
    have = {str(r.origin_id) for r in await conn.execute(query)}
    copied = 0
    for seg in segments[1:]:
        assert seg.as_of is not None
        for r in (await conn.execute(select(C).where(C.c.session_id == seg.key))).all():
            shown = str(r.origin_id or r.compaction_id)
            superseded = int(r.superseded_at_seq)
            valid = superseded == 0 or superseded >= seg.as_of
            if shown in have or int(r.at_seq) >= seg.as_of or not valid:
                continue
            values = dict(r._mapping)
            values.update(
                compaction_id=ids.new_id(), session_id=key, origin_id=shown, superseded_at_seq=0
            )
            copied += checkpoint_bytes(values)
            await conn.execute(insert(C).values(**values))
            have.add(shown)
    return copied
