"""Export and import of one session's stored rows (``ctxwarden export``/``import``).

Export reads the session row, its settings revisions, its memory blocks, its
checkpoints and its messages in one read transaction (a consistent snapshot),
messages in pages by seq, so memory stays bounded whatever the history's length.
A fork's file is a whole session: the messages, settings revisions, memory
blocks and checkpoints it reads from its ancestors come with it.

Import writes a whole session in one transaction: a failure anywhere (a bad
record, a taken ID, a truncated file) rolls everything back, so no half
session is ever visible. Several sessions can be written in one transaction,
forks among them (a pi file's branches): a fork names a session written
before it in the same call and stores only what ForkSession would (its own
messages after ``parent_seq``, a copy of the inherited checkpoint, its own
checkpoints). Messages are inserted in bounded batches as they are read.
Checkpoint IDs are global keys: a checkpoint whose ID the database already
holds (a second copy of the same export) gets a new one.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Mapping
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

from sqlalchemy import insert, select, update
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from ctxwarden.core.tenancy import tenant_of
from ctxwarden.store.codec import session_from_row
from ctxwarden.store.errors import DuplicateKey, boundary
from ctxwarden.store.labels import checked_labels, write_labels
from ctxwarden.store.lineage import as_seen, chain_of
from ctxwarden.store.lineage import where as lineage_where
from ctxwarden.store.memory_blocks import block_rows
from ctxwarden.store.quota import TenantQuota, state_bytes
from ctxwarden.store.sessions import SessionRepository
from ctxwarden.store.tables import MB, C, M, S, V
from ctxwarden.store.transfer_format import (
    Record,
    checkpoint_record,
    checkpoint_row,
    memory_block_record,
    memory_block_row,
    message_record_of,
    message_row,
    revision_record,
    revision_row,
    session_record,
    session_row,
)
from ctxwarden.store.transfer_lineage import Inherited, inherited
from ctxwarden.util import ids

PAGE = 500
"""Messages read per query on export."""
BATCH_ROWS = 500
BATCH_BYTES = 4 * 1024 * 1024
"""An import inserts messages once this many rows or body bytes are pending."""


class SessionNotFound(LookupError):
    """No live session has the key."""


async def export_records(
    engine: AsyncEngine, key: str, *, replays: bool = True
) -> AsyncIterator[Record]:
    """The records of a live session, in file order: session, revisions, memory
    blocks, checkpoints, messages (by seq). ``replays``: a fork's records include
    what its replays read from its ancestors (store/transfer_lineage.py; a pi file
    has no replays). Raises SessionNotFound."""
    async with engine.connect() as conn, conn.begin():
        row = await _live(conn, key)
        if row is None:
            raise SessionNotFound(key)
        async for record in _session_records(conn, row, replays):
            yield record


async def export_tree(engine: AsyncEngine, key: str) -> AsyncIterator[Record]:
    """``export_records`` of a live session, then of each of its live forks (forks
    of forks too, through deleted ones), each after the session it forks from,
    all in one read transaction. Each session's records start with its session
    record; a fork's hold only its own (as ``replays=False``: the tree is a pi
    file's). Raises SessionNotFound."""
    async with engine.connect() as conn, conn.begin():
        row = await _live(conn, key)
        if row is None:
            raise SessionNotFound(key)
        frontier = [key]
        async for record in _session_records(conn, row, False):
            yield record
        while frontier:
            children = (
                await conn.execute(
                    select(S)
                    .where(S.c.parent_key.in_(frontier))
                    .order_by(S.c.create_time_us, S.c.session_id)
                )
            ).all()
            frontier = [str(r.session_id) for r in children]
            for r in children:
                if int(r.delete_time_us) == 0:
                    async for record in _session_records(conn, r, False):
                        yield record


async def has_forks(engine: AsyncEngine, key: str) -> bool:
    """Whether any session (live or deleted) forks from ``key``."""
    async with engine.connect() as conn:
        query = select(S.c.session_id).where(S.c.parent_key == key).limit(1)
        return (await conn.execute(query)).first() is not None


async def _live(conn: AsyncConnection, key: str) -> Any:
    query = select(S).where(S.c.session_id == key, S.c.delete_time_us == 0)
    return (await conn.execute(query)).first()


async def _session_records(conn: AsyncConnection, row: Any, replays: bool) -> AsyncIterator[Record]:
    key = str(row.session_id)
    yield session_record(dict(row._mapping))
    own = await conn.execute(
        select(C).where(C.c.session_id == key).order_by(C.c.created_at, C.c.compaction_id)
    )
    checkpoints = [checkpoint_record(dict(r._mapping)) for r in own.all()]
    # A fork's file is a whole session: what its replays read from its ancestors
    # before its fork point comes first (store/transfer_lineage.py), its revisions
    # numbered up to 0 (its own start at 1 and keep their numbers: its input now is
    # byte for byte the fork's).
    own_ids = {str(c["compaction_id"]) for c in checkpoints}
    found = await inherited(conn, row, own_ids) if replays else Inherited()
    for number, revision in enumerate(found.revisions, start=1 - len(found.revisions)):
        yield {**revision, "revision": number}
    revisions = await conn.execute(select(V).where(V.c.session_id == key).order_by(V.c.revision))
    for r in revisions.all():
        yield revision_record(dict(r._mapping))
    for block in [*found.blocks, *await block_rows(conn, key)]:
        yield memory_block_record(block)
    for checkpoint in [*found.checkpoints, *checkpoints]:
        yield checkpoint
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
    memory_blocks: int = 0
    renamed_checkpoints: dict[str, str] = field(default_factory=dict)
    """Source checkpoint ID -> the new ID it got (only IDs already taken)."""


@dataclass(frozen=True)
class Incoming:
    """One session of an import: its key, its records and, for a fork, what it
    forks from."""

    key: str
    records: Iterable[Record]
    parent_key: str = ""
    """A fork's parent: a session written before it by the same import."""
    parent_seq: int = 0
    """The last seq the fork reads from its parent; its own messages come after."""


@dataclass
class _Written:
    """What the sessions written so far by one import left for the next ones."""

    last_seq: dict[str, int] = field(default_factory=dict)
    checkpoints: set[str] = field(default_factory=set)
    renamed: dict[str, str] = field(default_factory=dict)


class _Writer:
    def __init__(self, conn: AsyncConnection, incoming: Incoming, written: _Written) -> None:
        self.conn = conn
        self.incoming = incoming
        self.written = written
        self.result = ImportResult(incoming.key)
        self.pending: list[dict[str, Any]] = []
        self.pending_bytes = 0
        self.compaction_id = ""

    async def session(self, record: Mapping[str, Any], quota: TenantQuota) -> None:
        key, parent = self.result.key, self.incoming.parent_key
        parent_seq = self.incoming.parent_seq
        values = session_row(record, key)
        if parent:
            if parent not in self.written.last_seq:
                raise ValueError(f"fork {key!r}: its parent {parent!r} is not imported before it")
            if not 0 <= parent_seq <= min(self.written.last_seq[parent], int(values["last_seq"])):
                raise ValueError(f"fork {key!r}: parent_seq {parent_seq} is out of range")
            values.update(parent_key=parent, parent_seq=parent_seq, fork_seq=parent_seq + 1)
        charged = int(values["stored_bytes"]) + state_bytes(values.get("state_json"))
        await quota.claim_session(self.conn, tenant_of(key), charged)
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
        await write_labels(self.conn, key, checked_labels(record["labels"]), replace=False)
        self.written.last_seq[key] = int(values["last_seq"])

    async def revision(self, record: Mapping[str, Any]) -> None:
        await self.conn.execute(insert(V).values(**revision_row(record, self.result.key)))
        self.result.revisions += 1

    async def memory_block(self, record: Mapping[str, Any]) -> None:
        await self.conn.execute(insert(MB).values(**memory_block_row(record, self.result.key)))
        self.result.memory_blocks += 1

    async def checkpoint(self, record: Mapping[str, Any]) -> None:
        cid = str(record["compaction_id"])
        if record.get("inherited"):
            await self._inherited(record, self.written.renamed.get(cid, cid))
            return
        taken = await self.conn.execute(select(C.c.compaction_id).where(C.c.compaction_id == cid))
        if taken.first() is not None:
            new = ids.new_id()
            self.result.renamed_checkpoints[cid] = self.written.renamed[cid] = new
            cid = new
        await self.conn.execute(insert(C).values(**checkpoint_row(record, self.result.key, cid)))
        self.written.checkpoints.add(cid)
        self.result.checkpoints += 1

    async def _inherited(self, record: Mapping[str, Any], origin: str) -> None:
        """A fork's copy of a checkpoint of an ancestor (shows the original's ID)."""
        if not self.incoming.parent_key or origin not in self.written.checkpoints:
            raise ValueError(
                f"session {self.result.key!r}: inherited checkpoint {origin!r} is no "
                "checkpoint of a session this import wrote before"
            )
        values = checkpoint_row(record, self.result.key, ids.new_id())
        await self.conn.execute(insert(C).values(**values, origin_id=origin))
        self.result.checkpoints += 1

    async def message(self, record: Mapping[str, Any]) -> None:
        values = message_row(record, self.result.key)
        if values["seq"] <= self.incoming.parent_seq:
            raise ValueError(
                f"fork {self.result.key!r}: message seq {values['seq']} is not after "
                f"parent_seq {self.incoming.parent_seq}"
            )
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
        renamed = self.written.renamed.get(self.compaction_id)
        if renamed:
            await self.conn.execute(
                update(S).where(S.c.session_id == self.result.key).values(compaction_id=renamed)
            )

    async def write(self, quota: TenantQuota) -> ImportResult:
        it = iter(self.incoming.records)
        first = next(it, None)
        if first is None or first.get("type") != "session":
            raise ValueError("an import starts with the session record")
        await self.session(first, quota)
        for record in it:
            kind = record.get("type")
            if kind == "message":
                await self.message(record)
            elif kind == "checkpoint":
                await self.checkpoint(record)
            elif kind == "revision":
                await self.revision(record)
            elif kind == "memory_block":
                await self.memory_block(record)
            else:
                raise ValueError(f"unexpected record type {kind!r}")
        await self.finish()
        return self.result


@boundary
async def import_sessions(
    engine: AsyncEngine, sessions: Iterable[Incoming], *, quota: TenantQuota | None = None
) -> list[ImportResult]:
    """Write each session of ``sessions`` (records: a session record first, then
    its revisions, memory blocks, checkpoints and messages in any order) in one
    transaction.
    A fork's parent comes before it. Raises DuplicateKey when a live session
    has one of the keys, ValueError for records that do not fit together, and
    whatever a ``records`` raises (nothing is written then)."""
    quota = quota or TenantQuota()
    written = _Written()
    async with engine.begin() as conn:
        return [await _Writer(conn, s, written).write(quota) for s in sessions]


async def import_records(
    engine: AsyncEngine,
    key: str,
    records: Iterable[Record],
    *,
    quota: TenantQuota | None = None,
) -> ImportResult:
    """``import_sessions`` of one session that is no fork."""
    [result] = await import_sessions(engine, [Incoming(key, records)], quota=quota)
    return result
