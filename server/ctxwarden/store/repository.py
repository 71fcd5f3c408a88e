"""Typed async repository. Every method is one short transaction.

The hot path (append) never reads history: it is one compare-and-set UPDATE
of the session row followed by INSERTs, in one transaction.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, cast

from sqlalchemy import Table, and_, func, insert, or_, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from ctxwarden.core.messages import Message, MessageState
from ctxwarden.core.session import Checkpoint, Session
from ctxwarden.store.codec import (
    calibration_json,
    checkpoint_from_row,
    checkpoint_row_values,
    message_from_row,
    message_row_values,
    session_from_row,
    session_row_values,
    session_with_settings,
    settings_json,
)
from ctxwarden.store.errors import ConcurrentWrite, DuplicateKey
from ctxwarden.store.group_commit import AppendOp, GroupCommitter
from ctxwarden.store.models import (
    CompactionPlanRow,
    CompactionRow,
    MessageRow,
    RequestRow,
    SessionRevisionRow,
    SessionRow,
)

S = cast(Table, SessionRow.__table__)
M = cast(Table, MessageRow.__table__)
C = cast(Table, CompactionRow.__table__)
R = cast(Table, RequestRow.__table__)
P = cast(Table, CompactionPlanRow.__table__)
V = cast(Table, SessionRevisionRow.__table__)


@dataclass(frozen=True, slots=True)
class RequestRecord:
    """An idempotent request's key and outcome, written with its effects."""

    scope: str
    request_id: str
    request_hash: str
    outcome: dict[str, Any]
    create_time_us: int


@dataclass(frozen=True, slots=True)
class StoredRequest:
    request_hash: str
    outcome: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Snapshot:
    """What a restore reads: the session, its newest valid checkpoint, kept messages."""

    session: Session
    checkpoint: Checkpoint | None
    kept: list[Message]


def _record_values(record: RequestRecord) -> dict[str, Any]:
    return {
        "scope": record.scope,
        "request_id": record.request_id,
        "request_hash": record.request_hash,
        "outcome": json.dumps(record.outcome, separators=(",", ":")).encode(),
        "create_time_us": record.create_time_us,
    }


class Repository:
    def __init__(
        self,
        engine: AsyncEngine,
        *,
        append_writers: int | None = None,
        observe: Callable[[str, float, bool], None] | None = None,
    ) -> None:
        """``append_writers``: connections that group-commit appends (None: one on
        SQLite, which has a single writer anyway, two elsewhere; 0: no group
        commit, every append is its own transaction). ``observe(operation, seconds,
        ok)`` times the group commit's statements, which bypass the engine's events."""
        self.engine = engine
        if append_writers is None:
            append_writers = 1 if engine.dialect.name == "sqlite" else 2
        self._committer = (
            GroupCommitter(
                engine, S, M, R, self._append_one, writers=append_writers, observe=observe
            )
            if append_writers > 0
            else None
        )

    @property
    def committer(self) -> GroupCommitter | None:
        return self._committer

    async def close(self) -> None:
        if self._committer is not None:
            await self._committer.close()
        await self.engine.dispose()

    async def ping(self) -> None:
        async with self.engine.connect() as conn:
            await conn.execute(select(1))

    # -- idempotency ----------------------------------------------------------

    @staticmethod
    async def _record(conn: AsyncConnection, record: RequestRecord | None) -> None:
        if record is None:
            return
        await conn.execute(insert(R).values(**_record_values(record)))

    async def get_request(self, scope: str, request_id: str) -> StoredRequest | None:
        async with self.engine.connect() as conn:
            row = (
                await conn.execute(
                    select(R.c.request_hash, R.c.outcome).where(
                        R.c.scope == scope, R.c.request_id == request_id
                    )
                )
            ).first()
        if row is None:
            return None
        return StoredRequest(row.request_hash, json.loads(bytes(row.outcome)))

    # -- sessions -------------------------------------------------------------

    async def create_session(self, session: Session, record: RequestRecord | None) -> None:
        """Insert a session. Raises DuplicateKey if the ID or request is taken."""
        try:
            async with self.engine.begin() as conn:
                await conn.execute(insert(S).values(**session_row_values(session)))
                await self._revision(conn, session)
                await self._record(conn, record)
        except IntegrityError as exc:
            raise DuplicateKey(str(exc.orig)) from exc

    @staticmethod
    async def _revision(conn: AsyncConnection, session: Session) -> None:
        await conn.execute(
            insert(V).values(
                session_id=session.session_id,
                revision=session.revision,
                at_seq=session.last_seq,
                settings_json=settings_json(session),
                create_time_us=session.update_time_us,
            )
        )

    async def get_session(self, session_id: str) -> Session | None:
        async with self.engine.connect() as conn:
            row = (await conn.execute(select(S).where(S.c.session_id == session_id))).first()
        return session_from_row(row) if row is not None else None

    async def count_sessions(self, tenant: str) -> int:
        async with self.engine.connect() as conn:
            value = (
                await conn.execute(
                    select(func.count())
                    .select_from(S)
                    .where(S.c.tenant_id == tenant, S.c.delete_time_us == 0)
                )
            ).scalar_one()
        return int(value)

    async def tenant_stored_bytes(self, tenant: str) -> int:
        async with self.engine.connect() as conn:
            value = (
                await conn.execute(
                    select(func.coalesce(func.sum(S.c.stored_bytes), 0)).where(
                        S.c.tenant_id == tenant, S.c.delete_time_us == 0
                    )
                )
            ).scalar_one()
        return int(value)

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

    async def update_session(
        self,
        session: Session,
        *,
        expected_revision: int,
        token_counts: Sequence[tuple[int, int, str]] = (),
    ) -> None:
        """Write new settings if the revision still matches (else ConcurrentWrite).

        ``token_counts`` re-records (seq, count, tokenizer) after a tokenizer change.
        """
        values = session_row_values(session)
        for key in ("session_id", "create_time_us", "last_seq", "delete_time_us"):
            values.pop(key)
        values.pop("calibration_json")
        async with self.engine.begin() as conn:
            result = await conn.execute(
                update(S)
                .where(
                    S.c.session_id == session.session_id,
                    S.c.revision == expected_revision,
                    S.c.delete_time_us == 0,
                )
                .values(**values)
            )
            if result.rowcount != 1:
                raise ConcurrentWrite(session.session_id)
            await self._revision(conn, session)
            for seq, count, spec in token_counts:
                await conn.execute(
                    update(M)
                    .where(M.c.session_id == session.session_id, M.c.seq == seq)
                    .values(token_count=count, counted_with=spec)
                )

    async def delete_session(self, session_id: str, now_us: int) -> bool:
        async with self.engine.begin() as conn:
            result = await conn.execute(
                update(S)
                .where(S.c.session_id == session_id, S.c.delete_time_us == 0)
                .values(delete_time_us=now_us, update_time_us=now_us)
            )
        return bool(result.rowcount == 1)

    # -- messages -------------------------------------------------------------

    async def append(
        self,
        session: Session,
        *,
        expected_last_seq: int,
        messages: Sequence[Message],
        record: RequestRecord | None,
        added_bytes: int = 0,
    ) -> None:
        """Insert messages and advance the session row, atomically.

        ``session`` carries the new last_seq, context_tokens, update time and
        failure count. Raises ConcurrentWrite when another writer advanced the
        session first, DuplicateKey when a message_id or request_id exists.
        Concurrent appends share transactions (see group_commit); each returns
        only after its own transaction committed.
        """
        values = None if record is None else _record_values(record)
        op = AppendOp(session, expected_last_seq, messages, values, added_bytes)
        if self._committer is None:
            await self._append_one(op)
        else:
            await self._committer.submit(op)

    async def _append_one(self, op: AppendOp) -> None:
        """One append in its own transaction (no group commit, or a batch's fallback)."""
        session = op.session
        try:
            async with self.engine.begin() as conn:
                result = await conn.execute(
                    update(S)
                    .where(
                        S.c.session_id == session.session_id,
                        S.c.last_seq == op.expected_last_seq,
                        S.c.delete_time_us == 0,
                    )
                    .values(
                        last_seq=session.last_seq,
                        context_tokens=session.context_tokens,
                        update_time_us=session.update_time_us,
                        consecutive_failures=session.consecutive_failures,
                        calibration_json=calibration_json(
                            session.estimate_ratio, session.estimate_samples
                        ),
                        stored_bytes=S.c.stored_bytes + op.added_bytes,
                    )
                )
                if result.rowcount != 1:
                    raise ConcurrentWrite(session.session_id)
                if op.messages:
                    await conn.execute(
                        insert(M),
                        [message_row_values(session.session_id, m) for m in op.messages],
                    )
                if op.record_values is not None:
                    await conn.execute(insert(R).values(**op.record_values))
        except IntegrityError as exc:
            raise DuplicateKey(str(exc.orig)) from exc

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

    async def list_messages(
        self, session_id: str, *, after_seq: int, limit: int, include_rolled_back: bool
    ) -> list[Message]:
        q = select(M).where(M.c.session_id == session_id, M.c.seq > after_seq)
        if not include_rolled_back:
            q = q.where(M.c.state == int(MessageState.ACTIVE))
        q = q.order_by(M.c.seq).limit(limit)
        async with self.engine.connect() as conn:
            rows = (await conn.execute(q)).all()
        return [message_from_row(r) for r in rows]

    async def rollback(
        self,
        session: Session,
        *,
        seqs: Sequence[int],
        record: RequestRecord | None,
    ) -> None:
        """Mark messages rolled back (never deleted) and update the session row.

        The session row is compare-and-set on last_seq so a concurrent append
        by another process makes this fail with ConcurrentWrite.
        """
        try:
            async with self.engine.begin() as conn:
                result = await conn.execute(
                    update(S)
                    .where(
                        S.c.session_id == session.session_id,
                        S.c.last_seq == session.last_seq,
                        S.c.delete_time_us == 0,
                    )
                    .values(
                        context_tokens=session.context_tokens,
                        consecutive_failures=session.consecutive_failures,
                        update_time_us=session.update_time_us,
                    )
                )
                if result.rowcount != 1:
                    raise ConcurrentWrite(session.session_id)
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
                await self._record(conn, record)
        except IntegrityError as exc:
            raise DuplicateKey(str(exc.orig)) from exc

    # -- compaction -------------------------------------------------------------

    async def commit_compaction(
        self,
        checkpoint: Checkpoint,
        *,
        base_compaction_id: str,
        context_tokens: int,
        update_time_us: int,
        plan_id: str = "",
        record: RequestRecord | None = None,
    ) -> None:
        """Insert the checkpoint and make it the session's current one, atomically.

        Compare-and-set on the session's current checkpoint: a concurrent
        compaction (or a rollback that superseded the base) makes this fail
        with ConcurrentWrite. History rows are not touched.
        """
        try:
            async with self.engine.begin() as conn:
                result = await conn.execute(
                    update(S)
                    .where(
                        S.c.session_id == checkpoint.session_id,
                        S.c.compaction_id == base_compaction_id,
                        S.c.delete_time_us == 0,
                    )
                    .values(
                        compaction_id=checkpoint.compaction_id,
                        context_tokens=context_tokens,
                        update_time_us=update_time_us,
                    )
                )
                if result.rowcount != 1:
                    raise ConcurrentWrite(checkpoint.session_id)
                await conn.execute(insert(C).values(**checkpoint_row_values(checkpoint)))
                if plan_id:
                    await conn.execute(
                        update(P)
                        .where(P.c.plan_id == plan_id)
                        .values(committed_compaction_id=checkpoint.compaction_id)
                    )
                await self._record(conn, record)
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
                result = await conn.execute(
                    update(S)
                    .where(
                        S.c.session_id == sid,
                        S.c.last_seq == session.last_seq,
                        S.c.delete_time_us == 0,
                    )
                    .values(
                        consecutive_failures=session.consecutive_failures,
                        update_time_us=session.update_time_us,
                    )
                )
                if result.rowcount != 1:
                    raise ConcurrentWrite(sid)
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
                await conn.execute(
                    update(S).where(S.c.session_id == sid).values(compaction_id=current)
                )
                await self._record(conn, record(seqs))
        except IntegrityError as exc:
            raise DuplicateKey(str(exc.orig)) from exc
        return seqs, current

    async def get_message(self, session_id: str, seq: int) -> Message | None:
        async with self.engine.connect() as conn:
            row = (
                await conn.execute(select(M).where(M.c.session_id == session_id, M.c.seq == seq))
            ).first()
        return message_from_row(row) if row is not None else None

    # -- restore --------------------------------------------------------------

    async def load_snapshot(self, session_id: str) -> Snapshot | None:
        """Restore reads: session row, newest valid checkpoint, kept active messages.

        Cost is O(kept messages), independent of the length of the history.
        """
        async with self.engine.connect() as conn:
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

    async def replay_snapshot(self, session_id: str, as_of_seq: int) -> Snapshot | None:
        """What the session looked like just before message ``as_of_seq`` was appended.

        Events are ordered by the session's last_seq when they happened: a
        checkpoint, rollback or settings change made while last_seq < N had
        happened by then; one made later had not.
        """
        n = as_of_seq
        async with self.engine.connect() as conn:
            srow = (await conn.execute(select(S).where(S.c.session_id == session_id))).first()
            if srow is None:
                return None
            base = session_from_row(srow)
            vrow = (
                await conn.execute(
                    select(V.c.settings_json, V.c.revision)
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
                    select(M.c.body)
                    .where(
                        M.c.session_id == session_id,
                        M.c.seq < n,
                        M.c.body.like('%"calib":%'),
                    )
                    .order_by(M.c.seq.desc())
                    .limit(1)
                )
            ).first()
        session = base
        if vrow is not None:
            session = session_with_settings(base, vrow.settings_json)
            session = replace(session, revision=int(vrow.revision))
        ratio, samples = session.estimate_ratio, session.estimate_samples
        if vrow is None or calib is not None:
            ratio, samples = 1.0, 0
        if calib is not None:
            ratio, samples = json.loads(calib.body)["calib"]
        session = replace(
            session,
            last_seq=n - 1,
            estimate_ratio=float(ratio),
            estimate_samples=int(samples),
        )
        kept = [replace(message_from_row(r), state=MessageState.ACTIVE) for r in rows]
        return Snapshot(session, checkpoint, kept)


async def purge_deleted(
    repo: Repository,
    *,
    deleted_before_us: int,
    batch: int = 100,
    progress: Callable[[int], None] | None = None,
) -> int:
    """Remove soft-deleted sessions (and all their rows) deleted before the cutoff.

    Live sessions are never touched: every statement is restricted to
    sessions whose delete_time_us is set and older than the cutoff. Works in
    batches so a large purge never holds long locks. Returns sessions purged.
    """
    purged = 0
    while True:
        async with repo.engine.begin() as conn:
            ids = [
                str(r.session_id)
                for r in (
                    await conn.execute(
                        select(S.c.session_id)
                        .where(S.c.delete_time_us > 0, S.c.delete_time_us < deleted_before_us)
                        .limit(batch)
                    )
                ).all()
            ]
            if not ids:
                return purged
            for table in (M, C, P, V):
                await conn.execute(table.delete().where(table.c.session_id.in_(ids)))
            for sid in ids:
                await conn.execute(R.delete().where(R.c.scope.like(f"%/{sid}")))
            await conn.execute(S.delete().where(S.c.session_id.in_(ids), S.c.delete_time_us > 0))
        purged += len(ids)
        if progress is not None:
            progress(purged)
