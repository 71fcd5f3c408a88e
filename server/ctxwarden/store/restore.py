"""The reads that restore a session: now (O(kept)) or as it was (exact replay)."""

from __future__ import annotations

from dataclasses import dataclass, replace

from sqlalchemy import or_, select
from sqlalchemy.ext.asyncio import AsyncEngine

from ctxwarden.core.messages import Message, MessageState
from ctxwarden.core.session import Checkpoint, Session
from ctxwarden.store.codec import (
    checkpoint_from_row,
    message_from_row,
    session_from_row,
    session_with_settings,
)
from ctxwarden.store.tables import C, M, S, V


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
        rows = (
            await conn.execute(
                select(M)
                .where(
                    M.c.session_id == session_id,
                    M.c.seq >= first,
                    M.c.state == int(MessageState.ACTIVE),
                )
                .order_by(M.c.seq)
            )
        ).all()
    return Snapshot(session_from_row(srow), checkpoint, [message_from_row(r) for r in rows])


async def replay_snapshot(engine: AsyncEngine, session_id: str, as_of_seq: int) -> Snapshot | None:
    """What the session looked like just before message ``as_of_seq`` was appended.

    Events are ordered by the session's last_seq when they happened: a
    checkpoint, rollback or settings change made while last_seq < N had
    happened by then; one made later had not.
    """
    n = as_of_seq
    async with engine.connect() as conn:
        srow = (await conn.execute(select(S).where(S.c.session_id == session_id))).first()
        if srow is None:
            return None
        base = session_from_row(srow)
        vrow = (
            await conn.execute(
                select(V.c.settings, V.c.settings_json, V.c.revision)
                .where(V.c.session_id == session_id, V.c.at_seq < n)
                .order_by(V.c.revision.desc())
                .limit(1)
            )
        ).first()
        crow = (
            await conn.execute(
                select(C)
                .where(
                    C.c.session_id == session_id,
                    C.c.at_seq < n,
                    or_(C.c.superseded_at_seq == 0, C.c.superseded_at_seq >= n),
                )
                .order_by(C.c.created_at.desc(), C.c.compaction_id.desc())
                .limit(1)
            )
        ).first()
        checkpoint = checkpoint_from_row(crow) if crow is not None else None
        if checkpoint is not None:
            checkpoint = replace(checkpoint, superseded=False)
        first = checkpoint.first_kept_seq if checkpoint is not None else 0
        rows = (
            await conn.execute(
                select(M)
                .where(
                    M.c.session_id == session_id,
                    M.c.seq >= first,
                    M.c.seq < n,
                    or_(
                        M.c.state == int(MessageState.ACTIVE),
                        M.c.rolled_back_at_seq >= n,
                    ),
                )
                .order_by(M.c.seq)
            )
        ).all()
        calib = (
            await conn.execute(
                select(M.c.calib_ratio, M.c.calib_samples)
                .where(
                    M.c.session_id == session_id,
                    M.c.seq < n,
                    M.c.calib_samples.is_not(None),
                )
                .order_by(M.c.seq.desc())
                .limit(1)
            )
        ).first()
    session = base
    if vrow is not None:
        session = session_with_settings(base, vrow.settings, vrow.settings_json)
        session = replace(session, revision=int(vrow.revision))
    ratio, samples = session.estimate_ratio, session.estimate_samples
    if vrow is None or calib is not None:
        ratio, samples = 1.0, 0
    if calib is not None:
        ratio, samples = float(calib.calib_ratio), int(calib.calib_samples)
    session = replace(
        session,
        last_seq=n - 1,
        estimate_ratio=float(ratio),
        estimate_samples=int(samples),
    )
    kept = [replace(message_from_row(r), state=MessageState.ACTIVE) for r in rows]
    return Snapshot(session, checkpoint, kept)
