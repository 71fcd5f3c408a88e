"""The history of a session's memory block (the ``memory_blocks`` table).

``sessions.memory_json`` holds the block a session carries now: a restore reads
only that. Every change of the block (CreateSession or ForkSession with one, a
refresh, a compaction, a new budget) also writes a row here, in the same
transaction, keyed by the seq from which it applies (the session's last_seq +
1 then); a replay reads the one row in force at its seq. A second change at
the same last_seq replaces the first: only the later one was ever seen at a seq.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import delete, insert, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from ctxwarden.core.memory import MemoryBlock
from ctxwarden.core.session import Session
from ctxwarden.core.tenancy import tenant_of
from ctxwarden.store.codec import memory_block, memory_json
from ctxwarden.store.quota import TenantQuota
from ctxwarden.store.tables import MB, S

BLOCK_OVERHEAD = 64
"""Bytes charged per stored block row on top of its text (keys, times)."""


def block_row_bytes(value: str | None) -> int:
    """What a row holding ``value`` (its memory_json) costs in storage."""
    return len((value or "").encode()) + BLOCK_OVERHEAD


async def record_block(
    conn: AsyncConnection, session_id: str, from_seq: int, block: MemoryBlock, time_us: int
) -> int:
    """Record ``block`` as the session's from ``from_seq`` on (replacing a row of
    that seq). Returns the bytes the stored rows grew by (< 0 if they shrank)."""
    where = (MB.c.session_id == session_id, MB.c.from_seq == from_seq)
    old = (await conn.execute(select(MB.c.memory_json).where(*where))).first()
    if old is not None:
        await conn.execute(delete(MB).where(*where))
    value = memory_json(block)
    await conn.execute(
        insert(MB).values(
            session_id=session_id, from_seq=from_seq, memory_json=value, create_time_us=time_us
        )
    )
    return block_row_bytes(value) - (0 if old is None else block_row_bytes(old.memory_json))


async def record_change(conn: AsyncConnection, session: Session, quota: TenantQuota) -> None:
    """After a write's compare-and-set that gave ``session`` a new block: record
    it from the session's last_seq + 1 on, its bytes charged to the session and
    its tenant."""
    sid = session.session_id
    added = await record_block(
        conn, sid, session.last_seq + 1, session.memory, session.update_time_us
    )
    await conn.execute(
        update(S).where(S.c.session_id == sid).values(stored_bytes=S.c.stored_bytes + added)
    )
    await quota.add_bytes(conn, tenant_of(sid), added)


async def block_at(
    conn: AsyncConnection, session_id: str, as_of_seq: int
) -> list[tuple[int, MemoryBlock]]:
    """The newest block change from a seq up to ``as_of_seq`` (core.replay.memory_at
    needs only that one): (from_seq, block), or none."""
    rows = (
        await conn.execute(
            select(MB.c.from_seq, MB.c.memory_json)
            .where(MB.c.session_id == session_id, MB.c.from_seq <= as_of_seq)
            .order_by(MB.c.from_seq.desc())
            .limit(1)
        )
    ).all()
    return [(int(r.from_seq), memory_block(r.memory_json)) for r in rows]


async def block_rows(conn: AsyncConnection, session_id: str) -> list[dict[str, Any]]:
    """Every row of the session's block history, by seq (for export)."""
    query = select(MB).where(MB.c.session_id == session_id).order_by(MB.c.from_seq)
    return [dict(r._mapping) for r in (await conn.execute(query)).all()]
