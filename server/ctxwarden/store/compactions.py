"""Compaction checkpoints: committing one, reading them, rewinding across them."""

from __future__ import annotations

from collections.abc import Callable

from sqlalchemy import and_, insert, or_, select, update
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from ctxwarden.core.messages import MessageState
from ctxwarden.core.rewind import Rewind, plan_rewind
from ctxwarden.core.session import Checkpoint, Session
from ctxwarden.core.tenancy import tenant_of
from ctxwarden.store.checkpoint_codec import (
    checkpoint_bytes,
    checkpoint_from_row,
    checkpoint_row_values,
)
from ctxwarden.store.codec import memory_json
from ctxwarden.store.errors import boundary
from ctxwarden.store.gate import WriteGate
from ctxwarden.store.lineage import adopt_checkpoints, hand_over, take_over
from ctxwarden.store.memory_blocks import record_change
from ctxwarden.store.quota import TenantQuota
from ctxwarden.store.records import RequestRecord, advance, insert_record
from ctxwarden.store.tables import C, M, P, S


class CheckpointRepository:
    """Every write compares-and-sets the session's version (see records.advance)."""

    def __init__(self, engine: AsyncEngine, gate: WriteGate, quota: TenantQuota) -> None:
        self.engine = engine
        self.gate = gate
        self.quota = quota

    # -- compaction -------------------------------------------------------------

    @boundary
    async def commit(
        self,
        checkpoint: Checkpoint,
        session: Session,
        *,
        expected_version: int,
        plan_id: str = "",
        record: RequestRecord | None = None,
        memory_changed: bool = False,
    ) -> None:
        """Insert the checkpoint and make it the session's current one, atomically,
        compare-and-set on the session's version. History rows are not touched.
        ``memory_changed``: the compaction selected a new memory block (recorded
        in its history)."""
        values = checkpoint_row_values(checkpoint)
        async with self.gate.begin() as conn:
            added = await insert_record(conn, record) + checkpoint_bytes(values)
            await advance(
                conn,
                session,
                expected_version,
                compaction_id=checkpoint.compaction_id,
                stored_bytes=S.c.stored_bytes + added,
                memory_json=memory_json(session.memory),  # selected again at compaction
            )
            await self.quota.add_bytes(conn, tenant_of(session.session_id), added)
            await conn.execute(insert(C).values(**values))
            if memory_changed:
                await record_change(conn, session, self.quota)
            if plan_id:
                await conn.execute(
                    update(P)
                    .where(P.c.plan_id == plan_id)
                    .values(committed_compaction_id=checkpoint.compaction_id)
                )

    @boundary
    async def get(self, compaction_id: str) -> Checkpoint | None:
        async with self.engine.connect() as conn:
            row = (await conn.execute(select(C).where(C.c.compaction_id == compaction_id))).first()
        return checkpoint_from_row(row) if row is not None else None

    @boundary
    async def page(
        self, session_id: str, *, limit: int, before: tuple[int, str] | None
    ) -> list[Checkpoint]:
        q = select(C).where(C.c.session_id == session_id)
        if before is not None:
            t, cid = before
            q = q.where(or_(C.c.created_at < t, and_(C.c.created_at == t, C.c.compaction_id < cid)))
        q = q.order_by(C.c.created_at.desc(), C.c.compaction_id.desc()).limit(limit)
        async with self.engine.connect() as conn:
            rows = (await conn.execute(q)).all()
        return [checkpoint_from_row(r) for r in rows]

    @boundary
    async def rollback_across_checkpoints(
        self,
        session: Session,
        *,
        expected_version: int,
        to_seq: int,
        record: Callable[[list[int]], RequestRecord | None],
    ) -> Rewind:
        """Rewind to ``to_seq`` when that is before the current checkpoint.

        core.rewind.plan_rewind decides what changes; this reads what it needs and
        writes that. Returns what it decided (rolled-back seqs, the checkpoint now in effect).
        """
        sid = session.session_id
        after = select(M.c.seq, M.c.state).where(M.c.session_id == sid, M.c.seq > to_seq)
        valid = select(C).where(C.c.session_id == sid, C.c.superseded_at_seq == 0)
        async with self.gate.begin() as conn:
            await advance(conn, session, expected_version)
            # A fork copies what it inherited after to_seq before marking it.
            copied = await take_over(conn, sid, to_seq + 1) + await adopt_checkpoints(conn, sid)
            handed = await hand_over(conn, sid, session.last_seq, to_seq + 1)
            await self.quota.add_bytes(conn, tenant_of(sid), handed)
            rewind = plan_rewind(
                [(int(r.seq), MessageState(r.state)) for r in await conn.execute(after)],
                [checkpoint_from_row(r) for r in await conn.execute(valid)],
                to_seq=to_seq,
                last_seq=session.last_seq,
            )
            await _write_rewind(conn, sid, rewind)
            added = copied + await insert_record(conn, record(list(rewind.rolled_back)))
            await conn.execute(
                update(S)
                .where(S.c.session_id == sid)
                .values(compaction_id=rewind.current, stored_bytes=S.c.stored_bytes + added)
            )
            await self.quota.add_bytes(conn, tenant_of(sid), added)
        return rewind


async def _write_rewind(conn: AsyncConnection, sid: str, rewind: Rewind) -> None:
    """Roll back and supersede what ``rewind`` says, stamped with its at_seq."""
    seqs = rewind.rolled_back
    chunk = 500  # seqs per UPDATE, well below SQLite's limit of bound parameters
    for i in range(0, len(seqs), chunk):
        await conn.execute(
            update(M)
            .where(M.c.session_id == sid, M.c.seq.in_(seqs[i : i + chunk]))
            .values(state=int(MessageState.ROLLED_BACK), rolled_back_at_seq=rewind.at_seq)
        )
    await conn.execute(
        update(C)
        .where(
            C.c.session_id == sid,
            or_(C.c.compaction_id.in_(rewind.superseded), C.c.origin_id.in_(rewind.superseded)),
        )
        .values(superseded_at_seq=rewind.at_seq)
    )
