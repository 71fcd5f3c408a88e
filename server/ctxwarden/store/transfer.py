"""Export and import of one session's stored rows (``ctxwarden export``/``import``).

Export reads the session row, its settings revisions, its checkpoints and its
messages in one read transaction (a consistent snapshot), messages in pages by
seq, so memory stays bounded whatever the history's length.

Import writes a whole session in one transaction: a failure anywhere (a bad
record, a taken ID, a truncated file) rolls everything back, so no half
session is ever visible. Messages are inserted in bounded batches as they are
read. Checkpoint IDs are global keys: a checkpoint whose ID the database
already holds (a second copy of the same export) gets a new one.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Mapping
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

from sqlalchemy import insert, select, update
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from ctxwarden import ids
from ctxwarden.core.tenancy import tenant_of
from ctxwarden.store.codec import session_from_row
from ctxwarden.store.errors import DuplicateKey, boundary
from ctxwarden.store.lineage import as_seen, chain_of
from ctxwarden.store.lineage import where as lineage_where
from ctxwarden.store.quota import TenantQuota
from ctxwarden.store.sessions import SessionRepository
from ctxwarden.store.tables import C, M, S, V
from ctxwarden.store.transfer_format import (
    Record,
    checkpoint_record,
    checkpoint_row,
    message_record_of,
    message_row,
    revision_record,
    revision_row,
    session_record,
    session_row,
)

PAGE = 500
"""Messages read per query on export."""
BATCH_ROWS = 500
BATCH_BYTES = 4 * 1024 * 1024
"""An import inserts messages once this many rows or body bytes are pending."""


class SessionNotFound(LookupError):
    """No live session has the key."""


async def export_records(engine: AsyncEngine, key: str) -> AsyncIterator[Record]:
    """The records of a live session, in file order: session, revisions,
    checkpoints, messages (by seq). Raises SessionNotFound."""
    async with engine.connect() as conn, conn.begin():
        row = (
            await conn.execute(select(S).where(S.c.session_id == key, S.c.delete_time_us == 0))
        ).first()
        if row is None:
            raise SessionNotFound(key)
        yield session_record(dict(row._mapping))
        revisions = await conn.execute(
            select(V).where(V.c.session_id == key).order_by(V.c.revision)
        )
        for r in revisions.all():
            yield revision_record(dict(r._mapping))
        checkpoints = await conn.execute(
            select(C).where(C.c.session_id == key).order_by(C.c.created_at, C.c.compaction_id)
        )
        for r in checkpoints.all():
            yield checkpoint_record(dict(r._mapping))
        # A fork's messages: its ancestors' rows it reads (as it sees them), then its own.
        segments = await chain_of(conn, key)
        after = 0
        while True:
            page = (
                await conn.execute(
                    select(M)
                    .where(lineage_where(segments), M.c.seq > after)
                    .order_by(M.c.seq)
                    .limit(PAGE)
                )
            ).all()
            for r in page:
                yield message_record_of(*as_seen(segments, r))
            if len(page) < PAGE:
                return
            after = int(page[-1].seq)


@dataclass
class ImportResult:
    key: str
    messages: int = 0
    revisions: int = 0
    checkpoints: int = 0
    renamed_checkpoints: dict[str, str] = field(default_factory=dict)
    """Source checkpoint ID -> the new ID it got (only IDs already taken)."""


class _Writer:
    def __init__(self, conn: AsyncConnection, key: str) -> None:
        self.conn = conn
        self.result = ImportResult(key)
        self.pending: list[dict[str, Any]] = []
        self.pending_bytes = 0
        self.compaction_id = ""

    async def session(self, record: Mapping[str, Any], quota: TenantQuota) -> None:
        key = self.result.key
        values = session_row(record, key)
        await quota.claim_session(self.conn, tenant_of(key), int(values["stored_bytes"]))
        # A deleted session of that ID moves out of the way, as on CreateSession.
        retired = await SessionRepository._retire_deleted(
            self.conn, session_from_row(SimpleNamespace(**values))
        )
        values["version"] = retired.version
        self.compaction_id = values["compaction_id"]
        live = await self.conn.execute(select(S.c.session_id).where(S.c.session_id == key))
        if live.first() is not None:
            raise DuplicateKey(f"session {key!r} exists")
        await self.conn.execute(insert(S).values(**values))

    async def revision(self, record: Mapping[str, Any]) -> None:
        await self.conn.execute(insert(V).values(**revision_row(record, self.result.key)))
        self.result.revisions += 1

    async def checkpoint(self, record: Mapping[str, Any]) -> None:
        cid = str(record["compaction_id"])
        taken = await self.conn.execute(select(C.c.compaction_id).where(C.c.compaction_id == cid))
        if taken.first() is not None:
            self.result.renamed_checkpoints[cid] = new = ids.new_id()
            cid = new
        await self.conn.execute(insert(C).values(**checkpoint_row(record, self.result.key, cid)))
        self.result.checkpoints += 1

    async def message(self, record: Mapping[str, Any]) -> None:
        values = message_row(record, self.result.key)
        self.pending.append(values)
        self.pending_bytes += len(values["data"])
        if len(self.pending) >= BATCH_ROWS or self.pending_bytes >= BATCH_BYTES:
            await self.flush()

    async def flush(self) -> None:
        if self.pending:
            await self.conn.execute(insert(M), self.pending)
            self.result.messages += len(self.pending)
            self.pending, self.pending_bytes = [], 0

    async def finish(self) -> None:
        await self.flush()
        renamed = self.result.renamed_checkpoints.get(self.compaction_id)
        if renamed:
            await self.conn.execute(
                update(S).where(S.c.session_id == self.result.key).values(compaction_id=renamed)
            )


@boundary
async def import_records(
    engine: AsyncEngine,
    key: str,
    records: Iterable[Record],
    *,
    quota: TenantQuota | None = None,
) -> ImportResult:
    """Write the session of ``records`` (a session record first, then its
    revisions, checkpoints and messages in any order) under ``key``, in one
    transaction. Raises DuplicateKey when a live session has the key, and
    whatever ``records`` raises (nothing is written then)."""
    quota = quota or TenantQuota()
    async with engine.begin() as conn:
        writer = _Writer(conn, key)
        it = iter(records)
        first = next(it, None)
        if first is None or first.get("type") != "session":
            raise ValueError("an import starts with the session record")
        await writer.session(first, quota)
        for record in it:
            kind = record.get("type")
            if kind == "message":
                await writer.message(record)
            elif kind == "checkpoint":
                await writer.checkpoint(record)
            elif kind == "revision":
                await writer.revision(record)
            else:
                raise ValueError(f"unexpected record type {kind!r}")
        await writer.finish()
        return writer.result
