"""What a fork's export file carries from its ancestors besides their messages.

A fork answers a replay from before its fork point with its source's replay
(store/restore.py). Its file is a whole session of its own, so it carries what
those replays read: the ancestors' settings revisions, memory blocks and
checkpoints from before the point each child was forked at, as the child saw
them. Without them an imported fork replayed its inherited seqs with its current
settings, no calibration, no memory block and no older summary.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncConnection

from ctxwarden.store.memory_blocks import block_rows
from ctxwarden.store.tables import C, S, V
from ctxwarden.store.transfer_format import Record, checkpoint_record, revision_record


@dataclass
class Inherited:
    """Oldest first; all empty for a session that is no fork."""

    revisions: list[Record] = field(default_factory=list)
    """Settings revisions (numbered by the caller, before the fork's own)."""
    blocks: list[dict[str, Any]] = field(default_factory=list)
    """Memory block rows."""
    checkpoints: list[Record] = field(default_factory=list)
    """Checkpoints, none the fork (or a nearer ancestor) holds a copy of, each
    superseded at its child's fork point at the latest (from there on the child's
    own apply)."""


async def inherited(conn: AsyncConnection, row: Any, own_checkpoints: set[str]) -> Inherited:
    """What the fork ``row`` reads from its ancestors before its fork point;
    ``own_checkpoints`` the IDs its own checkpoint records carry."""
    found = Inherited()
    seen = set(own_checkpoints)
    parent, before = str(row.parent_key or ""), int(row.fork_seq) - 1
    while parent:
        # Replayed before ``before + 1`` the child is its parent: the parent's
        # revisions and checkpoints made before ``before`` (at_seq < as_of_seq), its
        # blocks in force from ``before`` at the latest (from_seq <= as_of_seq).
        made = select(V).where(V.c.session_id == parent, V.c.at_seq < before)
        rows = (await conn.execute(made.order_by(V.c.revision))).all()
        found.revisions[:0] = [revision_record(dict(r._mapping)) for r in rows]
        found.blocks[:0] = [b for b in await block_rows(conn, parent) if b["from_seq"] <= before]
        found.checkpoints[:0] = await _checkpoints(conn, parent, before, seen)
        up = (await conn.execute(select(S).where(S.c.session_id == parent))).first()
        if up is None or not up.parent_key:
            break
        parent, before = str(up.parent_key), min(before, int(up.fork_seq) - 1)
    return found


async def _checkpoints(
    conn: AsyncConnection, session_key: str, before: int, seen: set[str]
) -> list[Record]:
    """``session_key``'s checkpoints made before ``before`` that no nearer session
    copied (added to ``seen``), superseded at ``before`` unless they were earlier."""
    query = (
        select(C)
        .where(C.c.session_id == session_key, C.c.at_seq < before)
        .order_by(C.c.created_at, C.c.compaction_id)
    )
    out: list[Record] = []
    for r in (await conn.execute(query)).all():
        record = checkpoint_record(dict(r._mapping))
        if record["compaction_id"] in seen:
            continue
        seen.add(record["compaction_id"])
        superseded = int(record["superseded_at_seq"])
        if not 0 < superseded <= before:
            record["superseded_at_seq"] = before
        out.append(record)
    return out
