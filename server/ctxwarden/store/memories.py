"""Long-term memories (the ``memories`` table) and the session row's frozen block.

A memory belongs to a tenant; its optional key is unique within its user_id and
project_id, so a create with a taken key updates that memory (upsert). Every
update advances the memory's ``revision`` (its etag) with a compare-and-set.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from sqlalchemy import delete, insert, or_, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from ctxwarden.core.memory import MAX_CANDIDATES, Memory, MemoryBlock, MemoryState
from ctxwarden.core.session import Session
from ctxwarden.store.codec import memory_json
from ctxwarden.store.errors import ConcurrentWrite, boundary
from ctxwarden.store.gate import WriteGate
from ctxwarden.store.memory_blocks import record_change
from ctxwarden.store.quota import TenantQuota
from ctxwarden.store.records import compare_and_set
from ctxwarden.store.tables import MM

SCAN_BATCH = 200
"""Rows a filtered listing reads at a time (label filters are applied in Python)."""


def _values(m: Memory) -> dict[str, Any]:
    return {
        "tenant_id": m.tenant_id,
        "memory_id": m.memory_id,
        "user_id": m.user_id,
        "project_id": m.project_id,
        "memory_key": m.key or None,
        "text": m.text,
        "labels_json": json.dumps(dict(m.labels), sort_keys=True, separators=(",", ":")),
        "pinned": 1 if m.pinned else 0,
        "state": int(m.state),
        "create_time_us": m.create_time_us,
        "update_time_us": m.update_time_us,
        "revision": m.revision,
        "source_session_id": m.source_session_id,
    }


def _memory(row: Any) -> Memory:
    return Memory(
        memory_id=row.memory_id,
        tenant_id=row.tenant_id,
        text=row.text,
        user_id=row.user_id,
        project_id=row.project_id,
        key=row.memory_key or "",
        labels=json.loads(row.labels_json),
        pinned=bool(row.pinned),
        state=MemoryState(row.state),
        create_time_us=int(row.create_time_us),
        update_time_us=int(row.update_time_us),
        revision=int(row.revision),
        source_session_id=row.source_session_id,
    )


class MemoryRepository:
    def __init__(
        self, engine: AsyncEngine, gate: WriteGate, quota: TenantQuota | None = None
    ) -> None:
        self.engine = engine
        self.gate = gate
        self.quota = quota or TenantQuota()

    @boundary
    async def upsert(self, memory: Memory) -> Memory:
        """Insert ``memory``; with a key that exists in its scope, update that
        memory's text, labels, pinned and state instead (keeping its ID)."""
        for attempt in range(2):
            try:
                async with self.gate.begin() as conn:
                    existing = await self._by_key(conn, memory) if memory.key else None
                    if existing is None:
                        await conn.execute(insert(MM).values(**_values(memory)))
                        return memory
                    updated = replace(
                        existing,
                        text=memory.text,
                        labels=memory.labels,
                        pinned=memory.pinned,
                        state=memory.state,
                        update_time_us=memory.update_time_us,
                        revision=existing.revision + 1,
                    )
                    await self._write(conn, updated, existing.revision)
                    return updated
            except IntegrityError:
                # A concurrent create took the key: the second try updates it.
                if attempt == 1 or not memory.key:
                    raise
        raise AssertionError("unreachable: the last attempt returns or raises")

    @staticmethod
    async def _by_key(conn: AsyncConnection, m: Memory) -> Memory | None:
        row = (
            await conn.execute(
                select(MM)
                .where(
                    MM.c.tenant_id == m.tenant_id,
                    MM.c.user_id == m.user_id,
                    MM.c.project_id == m.project_id,
                    MM.c.memory_key == m.key,
                )
                .with_for_update()
            )
        ).first()
        return None if row is None else _memory(row)

    @staticmethod
    async def _write(conn: AsyncConnection, m: Memory, expected_revision: int) -> None:
        values = _values(m)
        for key in ("tenant_id", "memory_id", "create_time_us", "source_session_id"):
            values.pop(key)
        result = await conn.execute(
            update(MM)
            .where(
                MM.c.tenant_id == m.tenant_id,
                MM.c.memory_id == m.memory_id,
                MM.c.revision == expected_revision,
            )
            .values(**values)
        )
        if result.rowcount != 1:
            raise ConcurrentWrite(m.memory_id)

    @boundary
    async def get(self, tenant_id: str, memory_id: str) -> Memory | None:
        async with self.engine.connect() as conn:
            row = (
                await conn.execute(
                    select(MM).where(MM.c.tenant_id == tenant_id, MM.c.memory_id == memory_id)
                )
            ).first()
        return None if row is None else _memory(row)

    @boundary
    async def update(self, memory: Memory, expected_revision: int) -> None:
        """Write ``memory`` if its stored revision is still ``expected_revision``
        (else ConcurrentWrite; a taken key raises DuplicateKey)."""
        async with self.gate.begin() as conn:
            await self._write(conn, memory, expected_revision)

    @boundary
    async def delete(self, tenant_id: str, memory_id: str) -> bool:
        async with self.gate.begin() as conn:
            result = await conn.execute(
                delete(MM).where(MM.c.tenant_id == tenant_id, MM.c.memory_id == memory_id)
            )
        return bool(result.rowcount == 1)

    @boundary
    async def page(
        self,
        tenant_id: str,
        *,
        user_id: str,
        project_id: str,
        key: str,
        state: MemoryState | None,
        labels: Mapping[str, str],
        limit: int,
        before: str,
    ) -> tuple[list[Memory], bool]:
        """Matching memories, newest first (by ID), after ``before`` (the last ID
        seen); and whether more may follow."""
        q = select(MM).where(MM.c.tenant_id == tenant_id)
        if user_id:
            q = q.where(MM.c.user_id == user_id)
        if project_id:
            q = q.where(MM.c.project_id == project_id)
        if key:
            q = q.where(MM.c.memory_key == key)
        if state is not None:
            q = q.where(MM.c.state == int(state))
        out: list[Memory] = []
        async with self.engine.connect() as conn:
            while True:
                batch_q = q.order_by(MM.c.memory_id.desc()).limit(SCAN_BATCH)
                if before:
                    batch_q = batch_q.where(MM.c.memory_id < before)
                rows = (await conn.execute(batch_q)).all()
                for row in rows:
                    before = row.memory_id
                    m = _memory(row)
                    if all(m.labels.get(k) == v for k, v in labels.items()):
                        out.append(m)
                        if len(out) > limit:
                            return out[:limit], True
                if len(rows) < SCAN_BATCH:
                    return out, False

    @boundary
    async def candidates(self, tenant_id: str, user_id: str, project_id: str) -> list[Memory]:
        """The ACTIVE memories a session of (user_id, project_id) may see, most
        recently updated first, at most MAX_CANDIDATES."""
        users = [user_id, ""] if user_id else [""]
        projects = [project_id, ""] if project_id else [""]
        q = (
            select(MM)
            .where(
                MM.c.tenant_id == tenant_id,
                MM.c.state == int(MemoryState.ACTIVE),
                MM.c.user_id.in_(users),
                MM.c.project_id.in_(projects),
                or_(MM.c.user_id != "", MM.c.project_id != ""),
            )
            .order_by(MM.c.update_time_us.desc(), MM.c.memory_id)
            .limit(MAX_CANDIDATES)
        )
        async with self.engine.connect() as conn:
            rows = (await conn.execute(q)).all()
        return [_memory(r) for r in rows]

    @boundary
    async def set_block(self, session: Session, block: MemoryBlock, expected_version: int) -> None:
        """Store a session's new frozen block (``session`` as the write leaves it,
        its version advanced) if the row is still at ``expected_version``, and
        record it in the block's history."""
        async with self.gate.begin() as conn:
            await compare_and_set(
                conn,
                session.session_id,
                expected_version,
                {
                    "memory_json": memory_json(block),
                    "version": session.version,
                    "update_time_us": session.update_time_us,
                    "context_tokens": session.context_tokens,
                },
            )
            await record_change(conn, session, self.quota)

    @boundary
    async def insert_all(self, memories: Sequence[Memory]) -> list[Memory]:
        return [await self.upsert(m) for m in memories]
