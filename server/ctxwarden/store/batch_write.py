"""One batch of appends written in one transaction, on a writer's connection.

One UPDATE of every session row, ``version`` checked per row (a concurrent
writer makes it match fewer rows); with a storage quota, one conditional UPDATE
of the tenant counters; multi-row INSERTs of messages and idempotency records;
COMMIT. On MySQL (a single server, not a node of a multi-primary cluster) a batch
that stores a message and fits one statement budget is one script, guards and
COMMIT included: one round trip. What keeps the batch
from committing as a whole is raised as ``BatchFailed``, with the error a lone
append gets; a lost connection is raised as it is (``store.group_commit``
decides what the callers get, and settles a lost COMMIT).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from sqlalchemy.engine import Dialect

from ctxwarden.core.session import Session
from ctxwarden.store.batch_sql import BatchSql
from ctxwarden.store.errors import (
    ConcurrentWrite,
    DuplicateKey,
    QuotaExceeded,
    StoreRejected,
    StoreUnavailable,
    classify,
    driver_error_types,
)
from ctxwarden.store.writer import Writer

T = TypeVar("T")


class Timed(Protocol):
    """Runs one statement (or COMMIT) and observes how long it took."""

    def __call__(self, operation: str, call: Awaitable[T]) -> Awaitable[T]: ...


@dataclass(slots=True)
class AppendOp:
    """One caller's append: the new session row values, its rows, its records."""

    session: Session
    expected_version: int
    rows: Sequence[dict[str, Any]]
    """Encoded message rows (store.codec.message_row_values)."""
    record_values: Sequence[dict[str, Any]]
    """Idempotency records (store.records.record_values): one per request with a
    request_id that the append carries (a streamed run carries several)."""
    added_bytes: int
    tenant: str
    future: asyncio.Future[None] | None = field(default=None, repr=False)
    """Set by GroupCommitter.submit; resolved when the op's batch committed or failed."""
    resolved: bool = field(default=False, repr=False)
    """The batch committed or failed (whether or not the caller still waited)."""
    settled: asyncio.Event | None = field(default=None, repr=False)
    """Set by GroupCommitter.submit when the caller went away before the outcome;
    set when the batch committed or failed all the same."""


class BatchFailed(Exception):
    """The batch cannot commit as a whole; ``error`` is what a lone op gets."""

    def __init__(self, error: Exception) -> None:
        super().__init__(str(error))
        self.error = error


class BatchWrite:
    """The statements of a batch and what their errors mean for it."""

    def __init__(self, dialect: Dialect, sql: BatchSql, timed: Timed) -> None:
        self.dialect = dialect
        self.sql = sql
        self.errors = driver_error_types(dialect)
        self._timed = timed

    async def write(self, w: Writer, batch: Sequence[AppendOp], stage: list[str]) -> None:
        """UPDATEs, INSERTs and COMMIT of one batch; ``stage`` says how far it got."""
        stage[0] = "write"
        sql = self.sql
        committed = False
        try:
            if sql.begin:
                await self._timed("BEGIN", w.execute(sql.begin, ()))
            statement, params = sql.update(
                [(op.session, op.expected_version, op.added_bytes) for op in batch]
            )
            rows = [sql.message_row(values) for op in batch for values in op.rows]
            records = [sql.record_row(values) for op in batch for values in op.record_values]
            if w.mysql:
                committed = await self._write_mysql(
                    w, batch, (statement, params), rows, records, stage
                )
            else:
                counts = [await self._timed("UPDATE", w.execute(statement, params))]
                self._check_counts(batch, (), counts, None)
                added = _tenant_bytes(batch) if sql.quota_enabled else []
                if added:
                    counts.append(await self._timed("UPDATE", w.execute(*sql.quota(added))))
                    self._check_counts(batch, added, counts, None)
                if rows:
                    await self._timed("INSERT", w.insert_many(sql.messages, rows))
                if records:
                    await self._timed("INSERT", w.insert_many(sql.records, records))
        except self.errors as exc:
            kind = classify(exc, self.dialect)
            if kind == "lost":
                raise
            if kind == "duplicate":
                raise BatchFailed(DuplicateKey(str(exc))) from exc
            if kind == "rejected":
                raise BatchFailed(StoreRejected(str(exc))) from exc
            if kind == "conflict":
                raise BatchFailed(
                    ConcurrentWrite(f"the database aborted the batch: {exc}")
                ) from exc
            raise BatchFailed(StoreUnavailable(f"the database refused the write: {exc}")) from exc
        if committed:
            return
        stage[0] = "commit"
        try:
            await self._timed("COMMIT", w.commit())
        except self.errors as exc:
            if classify(exc, self.dialect) != "conflict":
                raise  # lost during COMMIT: the outcome is unknown
            # A multi-primary cluster certifies a transaction at COMMIT: Galera answers
            # 1213, Group Replication 3101 when a write committed first on another node
            # touched the same rows. The transaction is rolled back, nothing was written.
            raise BatchFailed(
                ConcurrentWrite(f"the cluster rolled back the batch at commit: {exc}")
            ) from exc

    async def _write_mysql(
        self,
        w: Writer,
        batch: Sequence[AppendOp],
        update: tuple[str, Sequence[Any]],
        rows: Sequence[Sequence[Any]],
        records: Sequence[Sequence[Any]],
        stage: list[str],
    ) -> bool:
        """The batch in one round trip when it fits one statement budget, stores a
        message and the server is not a cluster node: UPDATEs, guards, INSERTs and
        COMMIT (True: committed). Else the
        UPDATEs and the first INSERTs in one round trip, the rest one by one (False:
        COMMIT is the caller's). A guard fails the script, before anything is
        committed, when an UPDATE matched fewer rows than it must (a lost
        compare-and-set or quota). A connection lost while the script runs leaves
        its outcome to be settled (``stage`` "script", store.group_commit)."""
        added = _tenant_bytes(batch) if self.sql.quota_enabled else []
        checks = [(w.inline(*update), len(batch))]
        if added:
            checks.append((w.inline(*self.sql.quota(added)), len(added)))
        inserts = w.insert_statements(self.sql.messages, rows)
        inserts += w.insert_statements(self.sql.records, records)
        size = sum(len(x) for x, _ in checks) + sum(len(x) for x in inserts)
        guards = len(checks) * len(_GUARD)
        # Not on a multi-primary node: Galera can abort the transaction between two
        # statements of a script and then run the rest of it, COMMIT included, in a new
        # one (a request log row committed without its messages, under a node kill).
        whole = not w.cluster and bool(rows) and size + guards <= w.budget
        head: list[str] = []
        for statement, matched in checks:
            head.append(statement)
            if whole:
                head.append(_GUARD.format(matched))
        size = sum(len(x) for x in head)
        while inserts and size + len(inserts[0]) <= w.budget:
            size += len(inserts[0])
            head.append(inserts.pop(0))
        if whole:
            head.append("COMMIT")
            stage[0] = "script"
        counts: list[int] = []
        # Observed as the last kind of statement it carries (an INSERT as a rule).
        kind = "INSERT" if len(head) > len(checks) * (1 + whole) else "UPDATE"
        try:
            await self._timed(kind, w.execute_script(head, counts))
        except self.errors as exc:
            # A lost compare-and-set or quota explains a later statement's error (a
            # failed guard; another writer's rows: a duplicate key) better than that
            # error does; a lost connection is still a lost connection.
            if classify(exc, self.dialect) != "lost":
                self._check_counts(batch, added, counts[:: 1 + whole], exc)
            raise
        self._check_counts(batch, added, counts[:: 1 + whole], None)
        for statement in inserts:
            await self._timed("INSERT", w.execute_script([statement], []))
        return whole

    def _check_counts(
        self,
        batch: Sequence[AppendOp],
        added: Sequence[tuple[str, int]],
        counts: Sequence[int],
        cause: BaseException | None,
    ) -> None:
        """Raise for a lost compare-and-set (counts[0]) or quota (counts[1]), as far as
        the counts were read (both write paths check the same way)."""
        if counts and counts[0] != len(batch):
            raise BatchFailed(ConcurrentWrite(batch[0].session.session_id)) from cause
        if added and len(counts) > 1 and counts[1] != len(added):
            limit = self.sql.max_stored_bytes
            raise BatchFailed(QuotaExceeded("stored_bytes", -1, limit)) from cause


_GUARD = "SET @ctxwarden_matched = (SELECT 1 UNION ALL SELECT 1 FROM DUAL WHERE ROW_COUNT() <> {})"
"""Fails (error 1242: more than one row) unless the statement before it matched
the given number of rows, which stops the script before its COMMIT."""


def _tenant_bytes(batch: Sequence[AppendOp]) -> list[tuple[str, int]]:
    """The bytes the batch adds per tenant, by tenant."""
    added: dict[str, int] = {}
    for op in batch:
        added[op.tenant] = added.get(op.tenant, 0) + op.added_bytes
    return sorted(added.items())
