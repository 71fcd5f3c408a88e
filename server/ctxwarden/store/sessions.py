"""Sessions: the session rows, their settings revisions and tenant counters.

Every write compares-and-sets the row's ``version`` (advanced by every change),
so a replica holding a stale copy can never write over another's change.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from sqlalchemy import and_, insert, or_, select, update
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from ctxwarden.core.session import Checkpoint, Session
from ctxwarden.core.tenancy import tenant_of
from ctxwarden.store.checkpoint_codec import checkpoint_bytes, checkpoint_row_values
from ctxwarden.store.codec import (
    memory_json,
    revision_bytes,
    session_from_row,
    session_row_values,
    settings_data,
)
from ctxwarden.store.errors import ConcurrentWrite, boundary, is_conflict
from ctxwarden.store.gate import WriteGate
from ctxwarden.store.labels import write_labels
from ctxwarden.store.locks import lock_sessions
from ctxwarden.store.memory_blocks import block_row_bytes, record_block, record_change
from ctxwarden.store.quota import TenantQuota, state_bytes
from ctxwarden.store.records import RequestRecord, compare_and_set, record_bytes, record_values
from ctxwarden.store.tables import MB, SL, C, M, P, R, S, V
from ctxwarden.store.version_reader import VersionReader
from ctxwarden.util import ids


@dataclass(frozen=True, slots=True)
class StoredVersion:
    version: int
    deleted: bool


RETIRED_SEPARATOR = "#"
"""Never part of a session ID (see core.validation), so a retired key never
collides with one a client can name."""


def retired_key(session_id: str, delete_time_us: int) -> str:
    """Where a deleted incarnation's rows go when its ID is used again."""
    return f"{session_id}{RETIRED_SEPARATOR}{delete_time_us}"


@dataclass(frozen=True, slots=True)
class _NewRows:
    """What a new session brings besides its row: its idempotency record, a
    fork's copy of the inherited checkpoint, and the bytes they all store."""

    record: dict[str, Any] | None
    copy: dict[str, Any] | None
    current: str
    """The checkpoint in effect (a fork: the inherited one's ID; else "")."""
    added: int

    @staticmethod
    def of(
        session: Session, record: RequestRecord | None, inherited: Checkpoint | None
    ) -> _NewRows:
        stored = None if record is None else record_values(record)
        added = revision_bytes(session)
        if session.memory:  # the first row of its block's history
            added += block_row_bytes(memory_json(session.memory))
        if stored is not None:
            added += record_bytes(stored)
        if inherited is None:
            return _NewRows(stored, None, "", added)
        copy = checkpoint_row_values(
            replace(inherited, compaction_id=ids.new_id(), session_id=session.session_id)
        )
        copy["origin_id"] = inherited.compaction_id
        return _NewRows(stored, copy, inherited.compaction_id, added + checkpoint_bytes(copy))


class SessionRepository:
    def __init__(
        self, engine: AsyncEngine, gate: WriteGate, quota: TenantQuota, versions: VersionReader
    ) -> None:
        self.engine = engine
        self.gate = gate
        self.quota = quota
        self.versions = versions

    @boundary
    async def create(
        self,
        session: Session,
        record: RequestRecord | None,
        inherited: Checkpoint | None = None,
        parent_created_us: int = 0,
    ) -> Session:
        """Insert a session; returns it as stored. Raises DuplicateKey if the ID
        (of a live session) or the request is taken, QuotaExceeded if the tenant's
        quota is used up (nothing is written).

        A deleted session with the same ID is moved out of the way first: its
        rows (and those of its messages, checkpoints, plans, revisions, memory
        blocks, labels and idempotency records) get the key ``ID#DELETE_TIME``, which no request
        can name, so they stay for audit and purge but are never visible again.
        The new session's version continues after the deleted one's, so no
        replica mistakes its copy of the old session for the new one.

        A fork (``session.parent_session_id`` set) gets a copy of ``inherited``,
        the checkpoint in force where it was made: a row of its own (so a rewind
        in the fork can supersede it) that shows the original's ID. Raises
        ConcurrentWrite when the parent is no longer the live session created at
        ``parent_created_us`` (deleted, purged, or its ID used again meanwhile);
        the parent's row stays locked until the fork is committed."""
        rows = _NewRows.of(session, record, inherited)
        for attempt in range(3):
            try:
                async with self.gate.begin() as conn:
                    if session.parent_session_id:
                        await self._check_parent(conn, session.parent_session_id, parent_created_us)
                    reused = await self._deleted_exists(conn, session.session_id)
                    created = await self._retire_deleted(conn, session) if reused else session
                    await self._insert(conn, created, rows)
                    # Last: the tenant's counter row stays locked until the commit, and
                    # every create of the tenant queues on it, so only the commit may
                    # follow (over the quota, the rollback takes the rows back).
                    charged = rows.added + state_bytes(session_row_values(session)["state_json"])
                    await self.quota.claim_session(conn, tenant_of(session.session_id), charged)
                return created
            except DBAPIError as exc:
                # Two tenants' first sessions can deadlock on the new counter rows.
                if attempt == 2 or not is_conflict(exc):
                    raise
        raise AssertionError("unreachable: the last attempt returns or raises")

    @classmethod
    async def _insert(cls, conn: AsyncConnection, created: Session, rows: _NewRows) -> None:
        """The new session's row and every row that comes with it."""
        await conn.execute(
            insert(S).values(
                **session_row_values(created),
                stored_bytes=rows.added,
                compaction_id=rows.current,
            )
        )
        await cls._revision(conn, created)
        await write_labels(conn, created.session_id, created.labels, replace=False)
        if created.memory:
            await record_block(
                conn,
                created.session_id,
                created.last_seq + 1,
                created.memory,
                created.create_time_us,
            )
        if rows.copy is not None:
            await conn.execute(insert(C).values(**rows.copy))
        if rows.record is not None:
            await conn.execute(insert(R).values(**rows.record))

    @staticmethod
    async def _check_parent(conn: AsyncConnection, parent: str, created_us: int) -> None:
        """Lock the parent's row (a purge locks it too before it removes a session
        no fork reads from: store/locks.py), then check it is still there."""
        live = and_(S.c.session_id == parent, S.c.delete_time_us == 0)
        rows = await lock_sessions(conn, live, S.c.create_time_us)
        if not rows or int(rows[0].create_time_us) != created_us:
            raise ConcurrentWrite(parent)

    @staticmethod
    async def _deleted_exists(conn: AsyncConnection, session_id: str) -> bool:
        """Whether a deleted session has the ID (a plain read: a locking read of a
        key that does not exist would take a gap lock on MariaDB, and concurrent
        creates of new IDs would deadlock on each other's gaps)."""
        query = select(S.c.version).where(S.c.session_id == session_id, S.c.delete_time_us > 0)
        return (await conn.execute(query)).first() is not None

    @staticmethod
    async def _retire_deleted(conn: AsyncConnection, session: Session) -> Session:
        """Move a deleted incarnation of ``session``'s ID to its retired key;
        returns ``session`` with the version to create it with."""
        sid = session.session_id
        row = (
            await conn.execute(
                select(S.c.version, S.c.delete_time_us)
                .where(S.c.session_id == sid, S.c.delete_time_us > 0)
                .with_for_update()  # the row exists: a record lock, no gap lock
            )
        ).first()
        if row is None:
            return session  # taken meanwhile: the INSERT raises DuplicateKey
        retired = retired_key(sid, int(row.delete_time_us))
        for table in (M, C, P, V, R, MB):
            await conn.execute(
                update(table).where(table.c.session_id == sid).values(session_id=retired)
            )
        await conn.execute(update(S).where(S.c.session_id == sid).values(session_id=retired))
        # After the session row (the foreign key cascades where it is enforced).
        await conn.execute(update(SL).where(SL.c.session_id == sid).values(session_id=retired))
        # Forks keep reading the incarnation they were made from.
        await conn.execute(update(S).where(S.c.parent_key == sid).values(parent_key=retired))
        return replace(session, version=max(session.version, int(row.version) + 1))

    @staticmethod
    async def _revision(conn: AsyncConnection, session: Session) -> None:
        await conn.execute(
            insert(V).values(
                session_id=session.session_id,
                revision=session.revision,
                at_seq=session.last_seq,
                settings=settings_data(session),
                create_time_us=session.update_time_us,
            )
        )

    @boundary
    async def get(self, session_id: str) -> Session | None:
        async with self.engine.connect() as conn:
            row = (await conn.execute(select(S).where(S.c.session_id == session_id))).first()
        return session_from_row(row) if row is not None else None

    @boundary
    async def page(
        self,
        *,
        tenant: str = "",
        user_id: str,
        project_id: str,
        limit: int,
        before: tuple[int, str] | None,
        parent: str = "",
        show_archived: bool = False,
    ) -> list[Session]:
        """Live sessions, newest first; ``before`` is the last (create_time, id) seen;
        ``parent`` (an internal key): only its forks. Archived sessions only with
        ``show_archived``."""
        q = select(S).where(S.c.tenant_id == tenant, S.c.delete_time_us == 0)
        if parent:
            q = q.where(S.c.parent_key == parent)
        if not show_archived:
            q = q.where(S.c.archive_time_us == 0)
        if user_id:
            q = q.where(S.c.user_id == user_id)
        if project_id:
            q = q.where(S.c.project_id == project_id)
        if before is not None:
            t, sid = before
            q = q.where(
                or_(
                    S.c.create_time_us < t,
                    and_(S.c.create_time_us == t, S.c.session_id < sid),
                )
            )
        q = q.order_by(S.c.create_time_us.desc(), S.c.session_id.desc()).limit(limit)
        async with self.engine.connect() as conn:
            rows = (await conn.execute(q)).all()
        return [session_from_row(r) for r in rows]

    @boundary
    async def version(self, session_id: str) -> StoredVersion | None:
        """The stored session's version: what a replica compares its
        in-memory copy with before serving it (see version_reader)."""
        answer = await self.versions.version(session_id)
        return None if answer is None else StoredVersion(*answer)

    @boundary
    async def update(
        self,
        session: Session,
        *,
        expected_version: int,
        token_counts: Sequence[tuple[int, int, str]] = (),
        memory_changed: bool = False,
        labels_changed: bool = True,
    ) -> None:
        """Write new settings if nothing changed the session since ``expected_version``
        (else ConcurrentWrite). ``token_counts`` re-records (seq, count, tokenizer)
        after a tokenizer change; ``memory_changed``: the settings selected a new
        memory block (recorded in its history); ``labels_changed``: the labels'
        rows are written again."""
        values = session_row_values(session)
        for key in (
            "session_id",
            "create_time_us",
            "last_seq",
            "delete_time_us",
            "parent_key",
            "parent_seq",
            "fork_seq",
            "archive_time_us",
        ):
            values.pop(key)
        values.pop("calibration_json")
        added = revision_bytes(session)
        async with self.gate.begin() as conn:
            values["stored_bytes"] = S.c.stored_bytes + added
            await compare_and_set(conn, session.session_id, expected_version, values)
            await self.quota.add_bytes(conn, tenant_of(session.session_id), added)
            await self._revision(conn, session)
            if memory_changed:
                await record_change(conn, session, self.quota)
            if labels_changed:
                await write_labels(conn, session.session_id, session.labels, replace=True)
            for seq, count, spec in token_counts:
                await conn.execute(
                    update(M)
                    .where(M.c.session_id == session.session_id, M.c.seq == seq)
                    .values(token_count=count, counted_with=spec)
                )

    @boundary
    async def set_archived(self, session_id: str, archive_time_us: int) -> Session | None:
        """Archive (``archive_time_us`` > 0) or unarchive (0) a live session; returns
        it as stored, None when there is no live session. A session already in
        that state is returned unchanged; a change advances the version, so every
        replica's copy is stale (reads reload it, writes lose their compare-and-set)."""
        live = and_(S.c.session_id == session_id, S.c.delete_time_us == 0)
        async with self.gate.begin() as conn:
            row = (await conn.execute(select(S).where(live).with_for_update())).first()
            if row is None:
                return None
            if (int(row.archive_time_us) > 0) == (archive_time_us > 0):
                return session_from_row(row)
            await conn.execute(
                update(S)
                .where(live, S.c.version == row.version)
                .values(archive_time_us=archive_time_us, version=S.c.version + 1)
            )
            row = (await conn.execute(select(S).where(live))).first()
        return None if row is None else session_from_row(row)

    @boundary
    async def delete(self, session_id: str, now_us: int) -> bool:
        async with self.gate.begin() as conn:
            result = await conn.execute(
                update(S)
                .where(S.c.session_id == session_id, S.c.delete_time_us == 0)
                .values(delete_time_us=now_us, update_time_us=now_us, version=S.c.version + 1)
            )
            if result.rowcount != 1:
                return False
            # Its bytes stay stored, and counted, until it is purged (store/purge.py).
            await self.quota.release(conn, tenant_of(session_id))
        return True
