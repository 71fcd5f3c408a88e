"""Typed async repository. Every method is one short transaction.

Every write compares-and-sets the session row's ``version`` (advanced by every
change), so a replica holding a stale copy can never write over another's
change. The hot path (append) never reads history: it is one compare-and-set
UPDATE of the session row followed by INSERTs, in one transaction.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from sqlalchemy import and_, insert, or_, select, update
from sqlalchemy.exc import IntegrityError, OperationalError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from ctxwarden.core.messages import Message, MessageState
from ctxwarden.core.session import Session
from ctxwarden.core.tenancy import tenant_of
from ctxwarden.store import purge
from ctxwarden.store.codec import (
    message_row_values,
    revision_bytes,
    session_from_row,
    session_row_values,
    settings_data,
    stored_message_bytes,
)
from ctxwarden.store.compactions import CompactionStore
from ctxwarden.store.errors import ConcurrentWrite, DuplicateKey, TooLarge, boundary
from ctxwarden.store.gate import WriteGate
from ctxwarden.store.group_commit import AppendOp, GroupCommitter
from ctxwarden.store.message_reads import MessageReads
from ctxwarden.store.plans import PlanRepository
from ctxwarden.store.quota import TenantQuota
from ctxwarden.store.records import (
    RequestRecord,
    RequestScope,
    StoredRequest,
    advance,
    get_request,
    insert_record,
    record_bytes,
    record_values,
)
from ctxwarden.store.restore import Snapshot, load_snapshot, replay_snapshot
from ctxwarden.store.tables import M, R, S, V
from ctxwarden.store.version_reader import VersionReader


def _is_deadlock(exc: OperationalError) -> bool:
    code = exc.orig.args[0] if exc.orig is not None and exc.orig.args else 0
    return code in (1205, 1213) or "locked" in str(exc.orig)


class Repository(CompactionStore, MessageReads):
    def __init__(
        self,
        engine: AsyncEngine,
        *,
        append_writers: int | None = None,
        observe: Callable[[str, float, bool], None] | None = None,
        max_message_bytes: int = 8 * 1024 * 1024,
        quota: TenantQuota | None = None,
        statement_timeout: float = 0.0,
    ) -> None:
        """``append_writers``: connections that group-commit appends (None: one on
        SQLite, which has a single writer anyway, two elsewhere; 0: no batching,
        every append is its own transaction on a pooled connection). ``observe
        (operation, seconds, ok)`` times the group commit's statements, which bypass
        the engine's events. ``max_message_bytes`` bounds a message's stored body.
        ``statement_timeout``: seconds an append may wait for the database (0: no bound)."""
        self.engine = engine
        self.gate = WriteGate(engine)
        self.max_message_bytes = max_message_bytes
        self.quota = quota or TenantQuota()
        if append_writers is None:
            append_writers = 1 if engine.dialect.name == "sqlite" else 2
        self.plans = PlanRepository(engine, self.gate)
        self.versions = VersionReader(engine, statement_timeout)
        self.committer = GroupCommitter(
            engine,
            gate=self.gate,
            writers=append_writers,
            observe=observe,
            max_stored_bytes=self.quota.max_stored_bytes,
            timeout=statement_timeout,
        )

    @boundary
    async def get_request(self, scope: RequestScope, request_id: str) -> StoredRequest | None:
        return await get_request(self.engine, scope, request_id)

    async def close(self) -> None:
        await self.versions.close()
        await self.committer.close()
        await self.engine.dispose()

    @boundary
    async def ping(self) -> None:
        async with self.engine.connect() as conn:
            await conn.execute(select(1))

    # -- idempotency ----------------------------------------------------------

    # -- sessions -------------------------------------------------------------

    @boundary
    async def create_session(self, session: Session, record: RequestRecord | None) -> None:
        """Insert a session. Raises DuplicateKey if the ID or request is taken,
        QuotaExceeded if the tenant's quota is used up (nothing is written)."""
        stored = None if record is None else record_values(record)
        added = revision_bytes(session)
        if stored is not None:
            added += record_bytes(stored)
        for attempt in range(3):
            try:
                async with self.gate.begin() as conn:
                    await self.quota.claim_session(conn, tenant_of(session.session_id), added)
                    await conn.execute(
                        insert(S).values(**session_row_values(session), stored_bytes=added)
                    )
                    await self._revision(conn, session)
                    if stored is not None:
                        await conn.execute(insert(R).values(**stored))
                return
            except IntegrityError as exc:
                raise DuplicateKey(str(exc.orig)) from exc
            except OperationalError as exc:
                # Two tenants' first sessions can deadlock on the new counter rows.
                if attempt == 2 or not _is_deadlock(exc):
                    raise

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
    async def get_session(self, session_id: str) -> Session | None:
        async with self.engine.connect() as conn:
            row = (await conn.execute(select(S).where(S.c.session_id == session_id))).first()
        return session_from_row(row) if row is not None else None

    @boundary
    async def list_sessions(
        self,
        *,
        tenant: str = "",
        user_id: str,
        project_id: str,
        limit: int,
        before: tuple[int, str] | None,
    ) -> list[Session]:
        """Live sessions, newest first; ``before`` is the last (create_time, id) seen."""
        q = select(S).where(S.c.tenant_id == tenant, S.c.delete_time_us == 0)
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
    async def session_version(self, session_id: str) -> tuple[int, bool] | None:
        """(version, deleted) of the stored session: what a replica compares its
        in-memory copy with before serving it (see version_reader)."""
        return await self.versions.version(session_id)

    @boundary
    async def update_session(
        self,
        session: Session,
        *,
        expected_version: int,
        token_counts: Sequence[tuple[int, int, str]] = (),
    ) -> None:
        """Write new settings if nothing changed the session since ``expected_version``
        (else ConcurrentWrite). ``token_counts`` re-records (seq, count, tokenizer)
        after a tokenizer change."""
        values = session_row_values(session)
        for key in ("session_id", "create_time_us", "last_seq", "delete_time_us"):
            values.pop(key)
        values.pop("calibration_json")
        added = revision_bytes(session)
        async with self.gate.begin() as conn:
            result = await conn.execute(
                update(S)
                .where(
                    S.c.session_id == session.session_id,
                    S.c.version == expected_version,
                    S.c.delete_time_us == 0,
                )
                .values(**values, stored_bytes=S.c.stored_bytes + added)
            )
            if result.rowcount != 1:
                raise ConcurrentWrite(session.session_id)
            await self.quota.add_bytes(conn, tenant_of(session.session_id), added)
            await self._revision(conn, session)
            for seq, count, spec in token_counts:
                await conn.execute(
                    update(M)
                    .where(M.c.session_id == session.session_id, M.c.seq == seq)
                    .values(token_count=count, counted_with=spec)
                )

    @boundary
    async def delete_session(self, session_id: str, now_us: int) -> bool:
        async with self.gate.begin() as conn:
            row = (
                await conn.execute(
                    select(S.c.stored_bytes).where(
                        S.c.session_id == session_id, S.c.delete_time_us == 0
                    )
                )
            ).first()
            if row is None:
                return False
            result = await conn.execute(
                update(S)
                .where(S.c.session_id == session_id, S.c.delete_time_us == 0)
                .values(delete_time_us=now_us, update_time_us=now_us, version=S.c.version + 1)
            )
            if result.rowcount != 1:
                return False
            await self.quota.release(conn, tenant_of(session_id), int(row.stored_bytes))
        return True

    # -- messages -------------------------------------------------------------

    def encode_append(
        self,
        session: Session,
        *,
        expected_version: int,
        messages: Sequence[Message],
        record: RequestRecord | None,
    ) -> AppendOp:
        """Encode an append for the writers; raises TooLarge (nothing written) when a
        message's stored body is over the limit."""
        rows = []
        added = 0
        for i, m in enumerate(messages):
            values = message_row_values(session.session_id, m)
            size = len(values["data"])
            if size > self.max_message_bytes:
                raise TooLarge(f"messages[{i}]", size, self.max_message_bytes)
            rows.append(values)
            added += stored_message_bytes(values)
        stored = None if record is None else record_values(record)
        if stored is not None:
            added += record_bytes(stored)
        return AppendOp(
            session, expected_version, rows, stored, added, tenant_of(session.session_id)
        )

    @boundary
    async def append(self, op: AppendOp) -> None:
        """Insert the messages and advance the session row, atomically.

        ``op.session`` carries the new last_seq, version, context_tokens, update
        time and failure count. Raises ConcurrentWrite when another writer changed
        the session first, DuplicateKey when a message_id or request_id exists,
        QuotaExceeded when the tenant's storage quota would be crossed.
        Concurrent appends share transactions (see group_commit); each returns
        only after its own transaction committed.
        """
        await self.committer.submit(op)

    @boundary
    async def append_messages(
        self,
        session: Session,
        *,
        expected_version: int,
        messages: Sequence[Message],
        record: RequestRecord | None,
    ) -> None:
        """encode_append + append."""
        await self.append(
            self.encode_append(
                session, expected_version=expected_version, messages=messages, record=record
            )
        )

    @boundary
    async def rollback(
        self,
        session: Session,
        *,
        expected_version: int,
        seqs: Sequence[int],
        record: RequestRecord | None,
    ) -> None:
        """Mark messages rolled back (never deleted) and update the session row,
        compare-and-set on the version."""
        try:
            async with self.gate.begin() as conn:
                added = await insert_record(conn, record)
                await advance(
                    conn,
                    session,
                    expected_version,
                    stored_bytes=S.c.stored_bytes + added,
                )
                await self.quota.add_bytes(conn, tenant_of(session.session_id), added)
                if seqs:
                    result = await conn.execute(
                        update(M)
                        .where(
                            M.c.session_id == session.session_id,
                            M.c.seq.in_(list(seqs)),
                            M.c.state == int(MessageState.ACTIVE),
                        )
                        .values(
                            state=int(MessageState.ROLLED_BACK),
                            rolled_back_at_seq=session.last_seq,
                        )
                    )
                    if result.rowcount != len(seqs):
                        raise ConcurrentWrite(session.session_id)
        except IntegrityError as exc:
            raise DuplicateKey(str(exc.orig)) from exc

    # -- restore --------------------------------------------------------------

    @boundary
    async def load_snapshot(self, session_id: str) -> Snapshot | None:
        """Restore reads: session row, newest valid checkpoint, kept active messages.

        Cost is O(kept messages), independent of the length of the history.
        """
        return await load_snapshot(self.engine, session_id)

    @boundary
    async def replay_snapshot(self, session_id: str, as_of_seq: int) -> Snapshot | None:
        """What the session looked like just before message ``as_of_seq`` was appended."""
        return await replay_snapshot(self.engine, session_id, as_of_seq)


@boundary
async def purge_deleted(
    repo: Repository,
    *,
    deleted_before_us: int,
    batch: int = 100,
    progress: Callable[[int], None] | None = None,
) -> int:
    """See store.purge.purge_deleted."""
    return await purge.purge_deleted(
        repo.engine, deleted_before_us=deleted_before_us, batch=batch, progress=progress
    )


__all__ = [
    "Repository",
    "RequestRecord",
    "RequestScope",
    "Snapshot",
    "StoredRequest",
    "purge_deleted",
]
