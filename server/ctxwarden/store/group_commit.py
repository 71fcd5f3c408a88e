"""Group commit for appends: concurrent appends share one transaction.

Each append is a compare-and-set of its session row plus INSERTs. Done one by
one, every append pays its own round trips and its own durable commit (an
fsync). Here appends queue up while a commit is in flight and the next batch
writes them all with three statements and one commit:

* one UPDATE of every session row in the batch, ``last_seq`` checked per row
  (``CASE session_id WHEN ... THEN expected ...``), so a concurrent writer
  elsewhere still makes the batch see fewer matched rows than it expected;
* one multi-row INSERT of all their messages, one of their idempotency records;
* COMMIT. Every caller is acknowledged only after its batch committed.

A batch never waits for company: an append that finds a writer idle goes out
at once, so a lone agent pays no extra latency. Writers hold their own
connections (no pool checkout, ping or reset per append).

When a batch cannot commit as a whole (a session moved on, a duplicate
message_id or request_id), it is rolled back and its appends are retried one
per transaction, so each caller gets its own precise outcome. A lost connection
before COMMIT was sent fails nothing: the batch is retried once on a new
connection. A failure during COMMIT leaves the outcome unknown; the callers get
the error (the service reports it as UNAVAILABLE and reloads the session).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar, cast

from sqlalchemy import Table
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from ctxwarden.core.messages import Message
from ctxwarden.core.session import Session
from ctxwarden.store.codec import calibration_json, message_row_values
from ctxwarden.store.errors import ConcurrentWrite, DuplicateKey

log = logging.getLogger(__name__)
T = TypeVar("T")

MAX_BATCH_APPENDS = 256
MAX_BATCH_BYTES = 8 * 1024 * 1024
"""A batch stops growing at this much message content (keeps statements small)."""


@dataclass(slots=True)
class AppendOp:
    """One caller's append: the new session row values, its messages, its record."""

    session: Session
    expected_last_seq: int
    messages: Sequence[Message]
    record_values: dict[str, Any] | None
    added_bytes: int
    future: asyncio.Future[None] | None = field(default=None, repr=False)
    """Set by GroupCommitter.submit; resolved when the op's batch committed or failed."""


class _BatchConflict(Exception):
    """The batch cannot commit as a whole; retry its appends one by one."""


class GroupCommitter:
    """Batches appends onto ``writers`` dedicated connections."""

    def __init__(
        self,
        engine: AsyncEngine,
        sessions: Table,
        messages: Table,
        requests: Table,
        single: Callable[[AppendOp], Awaitable[None]],
        *,
        writers: int = 1,
        observe: Callable[[str, float, bool], None] | None = None,
    ) -> None:
        """``single`` writes one append in its own transaction (the fallback);
        ``observe(operation, seconds, ok)`` is told about every statement."""
        self.engine = engine
        self._dialect = engine.dialect
        self._dbapi: Any = engine.dialect.loaded_dbapi
        self._sql = _Sql(self._dialect.name, sessions.name, messages, requests)
        self._message_columns = [c.name for c in messages.columns]
        self._request_columns = [c.name for c in requests.columns]
        self._observe = observe or _no_observer
        self._single = single
        self._writers = max(1, writers)
        self._queue: deque[AppendOp] = deque()
        self._ready: asyncio.Event | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._closed = False
        self.batches = 0
        """Committed batches (for tests and metrics)."""

    async def submit(self, op: AppendOp) -> None:
        """Queue ``op`` and wait until its batch committed (or failed)."""
        if self._closed:
            raise RuntimeError("the group committer is closed")
        if self._ready is None:
            self._ready = asyncio.Event()
            self._tasks = [
                asyncio.create_task(self._writer(), name=f"ctxwarden-append-writer-{i}")
                for i in range(self._writers)
            ]
        future = op.future = asyncio.get_running_loop().create_future()
        self._queue.append(op)
        self._ready.set()
        # A cancelled caller cancels only this future: the op stays queued or in
        # its batch, so the write goes on whether or not somebody still waits.
        await future

    async def close(self) -> None:
        self._closed = True
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        for op in self._queue:
            _resolve(op, RuntimeError("the server is shutting down"))
        self._queue.clear()

    # -- the writers ------------------------------------------------------------

    def _take(self) -> list[AppendOp]:
        batch: list[AppendOp] = []
        size = 0
        while self._queue and len(batch) < MAX_BATCH_APPENDS:
            op = self._queue[0]
            if batch and size + op.added_bytes > MAX_BATCH_BYTES:
                break
            batch.append(self._queue.popleft())
            size += op.added_bytes
        return batch

    async def _writer(self) -> None:
        assert self._ready is not None
        w: _Writer | None = None
        try:
            while True:
                while not self._queue:
                    self._ready.clear()
                    await self._ready.wait()
                w = await self._run(w, self._take())
        finally:
            if w is not None:
                with contextlib.suppress(Exception):
                    await w.conn.close()

    async def _connect(self) -> _Writer:
        conn = await self.engine.connect()
        try:
            raw = await conn.get_raw_connection()
        except BaseException:
            await conn.close()
            raise
        return _Writer(conn, raw.driver_connection, self._dialect.name)

    def _wrap(self, exc: Exception) -> DBAPIError:
        """A driver error as SQLAlchemy's (what the service maps to UNAVAILABLE)."""
        lost = isinstance(exc, OSError) or self._dialect.is_disconnect(cast(Any, exc), None, None)
        return cast(
            DBAPIError,
            DBAPIError.instance(
                "append batch",
                None,
                exc,
                self._dbapi.Error,
                connection_invalidated=lost,
                dialect=self._dialect,
            ),
        )

    async def _run(self, w: _Writer | None, batch: list[AppendOp]) -> _Writer | None:
        """Commit ``batch``; returns the connection to keep using (None: reconnect)."""
        try:
            for attempt in (1, 2):
                stage = ["connect"]
                try:
                    if w is None:
                        w = await self._connect()
                    await self._write(w, batch, stage)
                except (_BatchConflict, self._dbapi.IntegrityError) as exc:
                    await w.rollback()  # type: ignore[union-attr]
                    if len(batch) > 1:
                        await self._one_by_one(batch)  # each caller gets its own outcome
                    elif isinstance(exc, _BatchConflict):
                        _resolve(batch[0], ConcurrentWrite(batch[0].session.session_id))
                    else:
                        _resolve(batch[0], DuplicateKey(str(exc)))
                    return w
                except (self._dbapi.Error, OSError, DBAPIError) as exc:
                    await _discard(w)
                    w = None
                    error = exc if isinstance(exc, DBAPIError) else self._wrap(exc)
                    if attempt == 1 and error.connection_invalidated and stage[0] == "write":
                        # Nothing was committed: try once more on a new connection.
                        log.info("append writer reconnecting after: %s", exc)
                        continue
                    for op in batch:
                        _resolve(op, error)
                    return None
                for op in batch:
                    _resolve(op, None)
                self.batches += 1
                return w
        except asyncio.CancelledError:
            for op in batch:
                _resolve(op, RuntimeError("the server is shutting down"))
            raise
        except Exception as exc:  # an unexpected bug: never leave a caller waiting
            log.exception("append writer failed")
            await _discard(w)
            for op in batch:
                _resolve(op, exc)
            return None
        raise AssertionError("unreachable: the second attempt always returns")

    async def _one_by_one(self, batch: Sequence[AppendOp]) -> None:
        for op in batch:
            try:
                await self._single(op)
            except Exception as exc:
                _resolve(op, exc)
            else:
                _resolve(op, None)

    async def _write(self, w: _Writer, batch: Sequence[AppendOp], stage: list[str]) -> None:
        """UPDATE, INSERTs and COMMIT of one batch; ``stage`` says how far it got."""
        stage[0] = "write"
        sql = self._sql
        if sql.begin:
            await w.execute(sql.begin, ())
        params: list[Any] = []
        if len(batch) == 1:
            op = batch[0]
            params = [_set_value(op, column) for column in _SET_COLUMNS]
            params += (op.session.session_id, op.expected_last_seq)
        else:
            for column in _SET_COLUMNS:
                for op in batch:
                    params += (op.session.session_id, _set_value(op, column))
            params += (op.session.session_id for op in batch)
            for op in batch:
                params += (op.session.session_id, op.expected_last_seq)
        matched = await self._timed("UPDATE", w.execute(sql.update(len(batch)), params))
        if matched != len(batch):
            raise _BatchConflict
        rows = [
            _row(self._message_columns, message_row_values(op.session.session_id, m))
            for op in batch
            for m in op.messages
        ]
        if rows:
            await self._timed("INSERT", w.executemany(sql.insert_messages, rows))
        records = [
            _row(self._request_columns, op.record_values)
            for op in batch
            if op.record_values is not None
        ]
        if records:
            await self._timed("INSERT", w.executemany(sql.insert_requests, records))
        stage[0] = "commit"
        await self._timed("COMMIT", w.commit())

    async def _timed(self, operation: str, call: Awaitable[T]) -> T:
        start = time.perf_counter()
        ok = False
        try:
            value = await call
            ok = True
            return value
        finally:
            self._observe(operation, time.perf_counter() - start, ok)


_SET_COLUMNS = (
    "last_seq",
    "context_tokens",
    "update_time_us",
    "consecutive_failures",
    "calibration_json",
    "stored_bytes",
)


def _set_value(op: AppendOp, column: str) -> Any:
    s = op.session
    if column == "calibration_json":
        return calibration_json(s.estimate_ratio, s.estimate_samples)
    if column == "stored_bytes":
        return op.added_bytes
    return getattr(s, column)


def _row(columns: Sequence[str], values: dict[str, Any]) -> tuple[Any, ...]:
    return tuple(values[c] for c in columns)


class _Sql:
    """The batch's statements as driver-level SQL (no ORM work per append)."""

    def __init__(self, dialect: str, sessions: str, messages: Table, requests: Table) -> None:
        self.ph = "%s" if dialect == "mysql" else "?"
        # SQLite: take the write lock up front rather than upgrade a read lock.
        self.begin = "BEGIN IMMEDIATE" if dialect == "sqlite" else ""
        self.sessions = sessions
        self.insert_messages = self._insert(messages)
        self.insert_requests = self._insert(requests)
        self._updates: dict[int, str] = {}

    def _insert(self, table: Table) -> str:
        names = [c.name for c in table.columns]
        marks = ", ".join(self.ph for _ in names)
        return f"INSERT INTO {table.name} ({', '.join(names)}) VALUES ({marks})"

    def update(self, k: int) -> str:
        """The compare-and-set UPDATE of ``k`` session rows."""
        sql = self._updates.get(k)
        if sql is not None:
            return sql
        ph = self.ph
        if k == 1:
            sets = ", ".join(
                f"{c} = {c} + {ph}" if c == "stored_bytes" else f"{c} = {ph}" for c in _SET_COLUMNS
            )
            where = f"session_id = {ph} AND last_seq = {ph}"
        else:
            whens = " ".join(f"WHEN {ph} THEN {ph}" for _ in range(k))
            sets = ", ".join(
                f"{c} = {c} + CASE session_id {whens} END"
                if c == "stored_bytes"
                else f"{c} = CASE session_id {whens} END"
                for c in _SET_COLUMNS
            )
            ids = ", ".join(ph for _ in range(k))
            where = f"session_id IN ({ids}) AND last_seq = CASE session_id {whens} END"
        sql = f"UPDATE {self.sessions} SET {sets} WHERE {where} AND delete_time_us = 0"
        if len(self._updates) < 512:
            self._updates[k] = sql
        return sql


class _Writer:
    """One dedicated connection and its driver-level calls."""

    def __init__(self, conn: AsyncConnection, driver: Any, dialect: str) -> None:
        self.conn = conn
        self.driver = driver
        self.mysql = dialect == "mysql"

    async def execute(self, sql: str, params: Sequence[Any]) -> int:
        if self.mysql:
            async with self.driver.cursor() as cur:
                await cur.execute(sql, params)
                return int(cur.rowcount)
        cur = await self.driver.execute(sql, params)
        count = int(cur.rowcount)
        await cur.close()
        return count

    async def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        if self.mysql:
            # One multi-row INSERT per ~4 MB, its values written here: long strings
            # as hex literals (bytes.hex runs in C; escaping a message body
            # character by character was the writer's biggest cost).
            head = sql[: sql.index(" VALUES ") + 8]
            async with self.driver.cursor() as cur:
                for statement in _mysql_inserts(head, rows, self.driver.escape):
                    await cur.execute(statement)
            return
        await self.driver.executemany(sql, rows)

    async def commit(self) -> None:
        await self.driver.commit()

    async def rollback(self) -> None:
        with contextlib.suppress(Exception):
            await self.driver.rollback()


def _no_observer(operation: str, seconds: float, ok: bool) -> None:
    del operation, seconds, ok


def _resolve(op: AppendOp, exc: BaseException | None) -> None:
    future = op.future
    if future is None or future.done():
        return
    if exc is None:
        future.set_result(None)
    else:
        future.set_exception(exc)
        # Mark it retrieved: a caller that was cancelled never awaits it.
        future.exception()


MAX_STATEMENT_CHARS = 4 * 1024 * 1024
"""Well under MySQL's default max_allowed_packet (16 MB on MariaDB 10.11)."""
HEX_MAX_CHARS = 256 * 1024
"""Hex doubles the size on the wire; longer strings are escaped by the driver."""


def _mysql_literal(value: Any, escape: Callable[[Any], str]) -> str:
    if isinstance(value, str):
        # A hex literal needs no escaping, whatever the server's sql_mode.
        if len(value) <= HEX_MAX_CHARS:
            return "X'" + value.encode("utf-8").hex() + "'"
        return escape(value)
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, (bytes, bytearray)) and len(value) <= HEX_MAX_CHARS:
        return "X'" + value.hex() + "'"
    if value is None:
        return "NULL"
    return escape(value)


def _mysql_inserts(
    head: str, rows: Sequence[Sequence[Any]], escape: Callable[[Any], str]
) -> list[str]:
    """INSERT statements with the rows' values inlined, each at most ~4 MB."""
    statements: list[str] = []
    parts: list[str] = []
    size = 0
    for row in rows:
        part = "(" + ",".join(_mysql_literal(v, escape) for v in row) + ")"
        if parts and size + len(part) > MAX_STATEMENT_CHARS:
            statements.append(head + ",".join(parts))
            parts, size = [], 0
        parts.append(part)
        size += len(part) + 1
    if parts:
        statements.append(head + ",".join(parts))
    return statements


async def _discard(w: _Writer | None) -> None:
    """Drop a connection that failed; the next batch opens a new one."""
    if w is None:
        return
    with contextlib.suppress(Exception):
        await w.conn.invalidate()
    with contextlib.suppress(Exception):
        await w.conn.close()
