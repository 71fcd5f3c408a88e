"""Typed async repository. Every method is one short transaction.

Every write compares-and-sets the session row's ``version`` (advanced by every
change), so a replica holding a stale copy can never write over another's
change. The hot path (append) never reads history: it is one compare-and-set
UPDATE of the session row followed by INSERTs, in one transaction.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, cast

from sqlalchemy import Table, and_, func, insert, or_, select, update
from sqlalchemy.exc import IntegrityError, OperationalError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from ctxwarden.core.messages import Message, MessageState
from ctxwarden.core.session import Checkpoint, Session
from ctxwarden.core.tenancy import tenant_of
from ctxwarden.store import purge
from ctxwarden.store.codec import (
    checkpoint_bytes,
    checkpoint_from_row,
    checkpoint_row_values,
    message_from_row,
    message_row_values,
    revision_bytes,
    session_from_row,
    session_row_values,
    settings_data,
    stored_message_bytes,
)
from ctxwarden.store.errors import ConcurrentWrite, DuplicateKey, TooLarge
from ctxwarden.store.group_commit import AppendOp, GroupCommitter
from ctxwarden.store.models import (
    CompactionPlanRow,
    CompactionRow,
    MessageRow,
    RequestRow,
    SessionRevisionRow,
    SessionRow,
)
from ctxwarden.store.quota import TenantQuota
from ctxwarden.store.restore import Snapshot, load_snapshot, replay_snapshot

RECORD_OVERHEAD = 64
"""Bytes charged per idempotency record on top of its outcome."""

S = cast(Table, SessionRow.__table__)
M = cast(Table, MessageRow.__table__)
C = cast(Table, CompactionRow.__table__)
R = cast(Table, RequestRow.__table__)
P = cast(Table, CompactionPlanRow.__table__)
V = cast(Table, SessionRevisionRow.__table__)


@dataclass(frozen=True, slots=True)
class RequestScope:
    """Where a request_id is unique: a method of one session (or, for
    CreateSession, of one tenant)."""

    method: str
    session_id: str = ""
    tenant_id: str = ""


@dataclass(frozen=True, slots=True)
class RequestRecord:
    """An idempotent request's key and outcome, written with its effects."""

    scope: RequestScope
    request_id: str
    request_hash: str
    outcome: dict[str, Any]
    create_time_us: int


@dataclass(frozen=True, slots=True)
class StoredRequest:
    request_hash: str
    outcome: dict[str, Any]


def _record_values(record: RequestRecord) -> dict[str, Any]:
    return {
        "session_id": record.scope.session_id,
        "tenant_id": record.scope.tenant_id,
        "method": record.scope.method,
        "request_id": record.request_id,
        "request_hash": record.request_hash,
        "outcome": json.dumps(record.outcome, separators=(",", ":")).encode(),
        "create_time_us": record.create_time_us,
    }


def _is_deadlock(exc: OperationalError) -> bool:
    code = exc.orig.args[0] if exc.orig is not None and exc.orig.args else 0
    return code in (1205, 1213) or "locked" in str(exc.orig)


class Repository:
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
        self.max_message_bytes = max_message_bytes
        self.quota = quota or TenantQuota()
        if append_writers is None:
            append_writers = 1 if engine.dialect.name == "sqlite" else 2
        self.committer = GroupCommitter(
            engine,
            writers=append_writers,
            observe=observe,
            max_stored_bytes=self.quota.max_stored_bytes,
            timeout=statement_timeout,
        )

    async def close(self) -> None:
        await self.committer.close()
        await self.engine.dispose()

    async def ping(self) -> None:
        async with self.engine.connect() as conn:
            await conn.execute(select(1))

    # -- idempotency ----------------------------------------------------------

    @staticmethod
    async def _record(conn: AsyncConnection, record: RequestRecord | None) -> int:
        """Insert an idempotency record; returns the bytes it stores."""
        if record is None:
            return 0
        values = _record_values(record)
        await conn.execute(insert(R).values(**values))
        return len(values["outcome"]) + RECORD_OVERHEAD

    async def get_request(self, scope: RequestScope, request_id: str) -> StoredRequest | None:
        async with self.engine.connect() as conn:
            row = (
                await conn.execute(
                    select(R.c.request_hash, R.c.outcome).where(
                        R.c.session_id == scope.session_id,
                        R.c.tenant_id == scope.tenant_id,
                        R.c.method == scope.method,
                        R.c.request_id == request_id,
                    )
                )
            ).first()
        if row is None:
            return None
        return StoredRequest(row.request_hash, json.loads(bytes(row.outcome)))

    # -- sessions -------------------------------------------------------------

    async def create_session(self, session: Session, record: RequestRecord | None) -> None:
        """Insert a session. Raises DuplicateKey if the ID or request is taken,
        QuotaExceeded if the tenant's quota is used up (nothing is written)."""
        record_values = None if record is None else _record_values(record)
        added = revision_bytes(session)
        if record_values is not None:
            added += len(record_values["outcome"]) + RECORD_OVERHEAD
        for attempt in range(3):
            try:
                async with self.engine.begin() as conn:
                    await self.quota.claim_session(conn, tenant_of(session.session_id), added)
                    await conn.execute(
                        insert(S).values(**session_row_values(session), stored_bytes=added)
                    )
                    await self._revision(conn, session)
                    if record_values is not None:
                        await conn.execute(insert(R).values(**record_values))
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

    async def get_session(self, session_id: str) -> Session | None:
        async with self.engine.connect() as conn:
            row = (await conn.execute(select(S).where(S.c.session_id == session_id))).first()
        return session_from_row(row) if row is not None else None

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

    async def session_version(self, session_id: str) -> tuple[int, bool] | None:
        """(version, deleted) of the stored session: what a replica compares its
        in-memory copy with before serving it."""
        async with self.engine.connect() as conn:
            row = (
                await conn.execute(
                    select(S.c.version, S.c.delete_time_us).where(S.c.session_id == session_id)
                )
            ).first()
        return None if row is None else (int(row.version), bool(row.delete_time_us))

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
        async with self.engine.begin() as conn:
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

    async def delete_session(self, session_id: str, now_us: int) -> bool:
        async with self.engine.begin() as conn:
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
        record_values = None if record is None else _record_values(record)
        if record_values is not None:
            added += len(record_values["outcome"]) + RECORD_OVERHEAD
        return AppendOp(
            session, expected_version, rows, record_values, added, tenant_of(session.session_id)
        )

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

    async def find_by_message_ids(
        self, session_id: str, message_ids: Sequence[str]
    ) -> dict[str, Message]:
        if not message_ids:
            return {}
        async with self.engine.connect() as conn:
            rows = (
                await conn.execute(
                    select(M).where(M.c.session_id == session_id, M.c.message_id.in_(message_ids))
                )
            ).all()
        return {r.message_id: message_from_row(r) for r in rows}

    async def get_messages(self, session_id: str, seqs: Sequence[int]) -> list[Message]:
        async with self.engine.connect() as conn:
            rows = (
                await conn.execute(
                    select(M)
                    .where(M.c.session_id == session_id, M.c.seq.in_(list(seqs)))
                    .order_by(M.c.seq)
                )
            ).all()
        return [message_from_row(r) for r in rows]

    async def get_message(self, session_id: str, seq: int) -> Message | None:
        async with self.engine.connect() as conn:
            row = (
                await conn.execute(select(M).where(M.c.session_id == session_id, M.c.seq == seq))
            ).first()
        return message_from_row(row) if row is not None else None

    async def list_messages(
        self,
        session_id: str,
        *,
        after_seq: int,
        limit: int,
        include_rolled_back: bool,
        max_bytes: int = 0,
    ) -> tuple[list[Message], bool]:
        """Up to ``limit`` messages after ``after_seq`` and whether more follow.

        With ``max_bytes`` the page also stops before its stored bodies pass that
        many bytes (always at least one message): the sizes are read first, so a
        page of huge messages never loads more than it returns.
        """
        where = [M.c.session_id == session_id, M.c.seq > after_seq]
        if not include_rolled_back:
            where.append(M.c.state == int(MessageState.ACTIVE))
        async with self.engine.connect() as conn:
            if max_bytes <= 0:
                rows = (
                    await conn.execute(select(M).where(*where).order_by(M.c.seq).limit(limit + 1))
                ).all()
                return [message_from_row(r) for r in rows[:limit]], len(rows) > limit
            size = func.coalesce(func.length(M.c.data), 0) + func.coalesce(func.length(M.c.body), 0)
            sizes = (
                await conn.execute(
                    select(M.c.seq, size.label("size"))
                    .where(*where)
                    .order_by(M.c.seq)
                    .limit(limit + 1)
                )
            ).all()
            if not sizes:
                return [], False
            total, last = 0, sizes[0].seq
            for i, r in enumerate(sizes[:limit]):
                total += int(r.size)
                if i > 0 and total > max_bytes:
                    break
                last = r.seq
            rows = (
                await conn.execute(select(M).where(*where, M.c.seq <= last).order_by(M.c.seq))
            ).all()
        return [message_from_row(r) for r in rows], sizes[-1].seq > last

    async def _advance(
        self, conn: AsyncConnection, session: Session, expected_version: int, **values: Any
    ) -> None:
        """Compare-and-set the session row on its version (else ConcurrentWrite)."""
        result = await conn.execute(
            update(S)
            .where(
                S.c.session_id == session.session_id,
                S.c.version == expected_version,
                S.c.delete_time_us == 0,
            )
            .values(version=session.version, update_time_us=session.update_time_us, **values)
        )
        if result.rowcount != 1:
            raise ConcurrentWrite(session.session_id)

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
            async with self.engine.begin() as conn:
                added = await self._record(conn, record)
                await self._advance(
                    conn,
                    session,
                    expected_version,
                    context_tokens=session.context_tokens,
                    consecutive_failures=session.consecutive_failures,
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

    # -- compaction -------------------------------------------------------------

    async def commit_compaction(
        self,
        checkpoint: Checkpoint,
        session: Session,
        *,
        expected_version: int,
        plan_id: str = "",
        record: RequestRecord | None = None,
    ) -> None:
        """Insert the checkpoint and make it the session's current one, atomically,
        compare-and-set on the session's version. History rows are not touched."""
        values = checkpoint_row_values(checkpoint)
        try:
            async with self.engine.begin() as conn:
                added = await self._record(conn, record) + checkpoint_bytes(values)
                await self._advance(
                    conn,
                    session,
                    expected_version,
                    compaction_id=checkpoint.compaction_id,
                    context_tokens=session.context_tokens,
                    stored_bytes=S.c.stored_bytes + added,
                )
                await self.quota.add_bytes(conn, tenant_of(session.session_id), added)
                await conn.execute(insert(C).values(**values))
                if plan_id:
                    await conn.execute(
                        update(P)
                        .where(P.c.plan_id == plan_id)
                        .values(committed_compaction_id=checkpoint.compaction_id)
                    )
        except IntegrityError as exc:
            raise DuplicateKey(str(exc.orig)) from exc

    async def save_plan(
        self, plan_id: str, session_id: str, payload: dict[str, Any], expire_us: int, now_us: int
    ) -> None:
        async with self.engine.begin() as conn:
            await conn.execute(
                insert(P).values(
                    plan_id=plan_id,
                    session_id=session_id,
                    payload=json.dumps(payload, separators=(",", ":")),
                    expire_time_us=expire_us,
                    committed_compaction_id="",
                    create_time_us=now_us,
                )
            )

    async def get_plan(self, plan_id: str) -> tuple[str, dict[str, Any], int, str] | None:
        """(session_id, payload, expire_time_us, committed_compaction_id)."""
        async with self.engine.connect() as conn:
            row = (await conn.execute(select(P).where(P.c.plan_id == plan_id))).first()
        if row is None:
            return None
        return (
            row.session_id,
            json.loads(row.payload),
            row.expire_time_us,
            row.committed_compaction_id,
        )

    async def get_compaction(self, compaction_id: str) -> Checkpoint | None:
        async with self.engine.connect() as conn:
            row = (await conn.execute(select(C).where(C.c.compaction_id == compaction_id))).first()
        return checkpoint_from_row(row) if row is not None else None

    async def list_compactions(
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

    async def rollback_across_checkpoints(
        self,
        session: Session,
        *,
        expected_version: int,
        to_seq: int,
        record: Callable[[list[int]], RequestRecord | None],
    ) -> tuple[list[int], str]:
        """Rewind to ``to_seq`` when that is before the current checkpoint.

        Marks every active message after ``to_seq`` rolled back, supersedes
        every checkpoint that summarised messages after ``to_seq`` and falls
        back to the newest one still valid. Returns the rolled-back seqs and
        the checkpoint now in effect ("" for none).
        """
        sid = session.session_id
        try:
            async with self.engine.begin() as conn:
                await self._advance(
                    conn,
                    session,
                    expected_version,
                    consecutive_failures=session.consecutive_failures,
                )
                seqs = [
                    int(r.seq)
                    for r in (
                        await conn.execute(
                            select(M.c.seq)
                            .where(
                                M.c.session_id == sid,
                                M.c.seq > to_seq,
                                M.c.state == int(MessageState.ACTIVE),
                            )
                            .order_by(M.c.seq)
                        )
                    ).all()
                ]
                await conn.execute(
                    update(M)
                    .where(
                        M.c.session_id == sid,
                        M.c.seq > to_seq,
                        M.c.state == int(MessageState.ACTIVE),
                    )
                    .values(
                        state=int(MessageState.ROLLED_BACK), rolled_back_at_seq=session.last_seq
                    )
                )
                await conn.execute(
                    update(C)
                    .where(
                        C.c.session_id == sid,
                        C.c.superseded_at_seq == 0,
                        C.c.first_kept_seq - 1 > to_seq,
                    )
                    .values(superseded_at_seq=session.last_seq)
                )
                newest = (
                    await conn.execute(
                        select(C.c.compaction_id)
                        .where(C.c.session_id == sid, C.c.superseded_at_seq == 0)
                        .order_by(C.c.created_at.desc(), C.c.compaction_id.desc())
                        .limit(1)
                    )
                ).first()
                current = str(newest.compaction_id) if newest is not None else ""
                added = await self._record(conn, record(seqs))
                await conn.execute(
                    update(S)
                    .where(S.c.session_id == sid)
                    .values(compaction_id=current, stored_bytes=S.c.stored_bytes + added)
                )
                await self.quota.add_bytes(conn, tenant_of(sid), added)
        except IntegrityError as exc:
            raise DuplicateKey(str(exc.orig)) from exc
        return seqs, current

    # -- restore --------------------------------------------------------------

    async def load_snapshot(self, session_id: str) -> Snapshot | None:
        """Restore reads: session row, newest valid checkpoint, kept active messages.

        Cost is O(kept messages), independent of the length of the history.
        """
        return await load_snapshot(self.engine, session_id)

    async def replay_snapshot(self, session_id: str, as_of_seq: int) -> Snapshot | None:
        """What the session looked like just before message ``as_of_seq`` was appended."""
        return await replay_snapshot(self.engine, session_id, as_of_seq)


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
