"""Group commit for appends: concurrent appends share one transaction.

Each append is a compare-and-set of its session row (on the row's ``version``)
plus INSERTs. Done one by one, every append pays its own round trips and its
own durable commit (an fsync). Here appends queue up while a commit is in
flight and the next batch writes them all with a few statements and one commit
(``store.batch_write``). A caller is acknowledged only after its batch
committed. A batch never waits for company: a lone agent pays no extra latency.
Writers hold their own connections.

One member can never fail another: when a batch cannot commit as a whole (a
session moved on, a duplicate key, a quota, a value the database refuses), it
is rolled back and its appends are retried one per transaction, so each caller
gets its own precise outcome. A lost connection (or a database that does not
answer within the timeout) before COMMIT fails nothing: the batch is retried
once on a new connection. When COMMIT was sent (on MySQL it ends the batch's
script), a new connection settles the outcome: it ends the lost connection's
server thread and looks for the batch's first row, then the callers are told it
was stored, or the batch is retried; only an outcome that cannot be settled
gives the callers StoreUnavailable, saying it is unknown. A conflict reported at COMMIT (a
multi-primary cluster's certification failure) is known to have written
nothing: like a lost compare-and-set, each caller gets ConcurrentWrite (the
service plans again on the current session).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncEngine

from ctxwarden.store.batch_sql import BatchSql
from ctxwarden.store.batch_write import AppendOp, BatchFailed, BatchWrite
from ctxwarden.store.errors import StoreUnavailable
from ctxwarden.store.gate import WriteGate
from ctxwarden.store.writer import ServerThread, Writer

# AppendOp is defined with the batch's statements (store.batch_write); the
# repositories import it from here, with the committer they submit it to.
__all__ = ["MAX_BATCH_APPENDS", "MAX_BATCH_BYTES", "AppendOp", "GroupCommitter"]

log = logging.getLogger(__name__)
T = TypeVar("T")

MAX_BATCH_APPENDS = 256
MAX_BATCH_BYTES = 8 * 1024 * 1024
"""A batch stops growing at this much message content (keeps statements small)."""
SETTLE_TIMEOUT = 30.0
"""Seconds settling a lost batch may take when the committer has no timeout of its own."""
SETTLE_POLL = 0.005
"""Seconds between looks at whether a lost connection's server thread is gone."""


class GroupCommitter:
    """Batches appends onto ``writers`` dedicated connections (0: no batching, one
    pooled connection per append)."""

    def __init__(
        self,
        engine: AsyncEngine,
        *,
        writers: int = 1,
        gate: WriteGate | None = None,
        observe: Callable[[str, float, bool], None] | None = None,
        max_stored_bytes: int = 0,
        timeout: float = 0.0,
    ) -> None:
        """``observe(operation, seconds, ok)`` is told about every statement;
        ``timeout``: seconds a batch's statements and commit may take before the
        connection is considered lost (0: unbounded)."""
        self.engine = engine
        self._gate = gate or WriteGate(engine)
        sql = BatchSql(engine.dialect, max_stored_bytes)
        self._batch = BatchWrite(engine.dialect, sql, self._timed)
        self._connection_errors: tuple[type[BaseException], ...] = (
            *self._batch.errors,
            DBAPIError,
            OSError,
            TimeoutError,
        )
        self._observe = observe or _no_observer
        self._writers = max(0, writers)
        self._timeout = timeout
        self._queue: deque[AppendOp] = deque()
        self._ready: asyncio.Event | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._alone: set[asyncio.Task[Writer | None]] = set()
        """No batching: the appends being written, each by a task of its own."""
        self._abandoned: dict[str, asyncio.Event] = {}
        """Per session, the newest append whose caller went away: set once settled."""
        self._closed = False
        self.batches = 0
        """Committed batches (for tests and metrics)."""

    async def submit(self, op: AppendOp) -> None:
        """Queue ``op`` and wait until its batch committed (or failed)."""
        if self._closed:
            raise RuntimeError("the group committer is closed")
        future = op.future = asyncio.get_running_loop().create_future()
        if self._writers == 0:
            self._write_alone(op)
        else:
            self._enqueue(op)
        # A cancelled caller cancels only this future: the op stays queued or in
        # its batch, so the write goes on whether or not somebody still waits.
        try:
            await future
        except asyncio.CancelledError:
            # The cancel reached the future a step before this coroutine: the batch
            # may have been resolved in between (``resolved``), or still be to come.
            if not op.resolved:  # no outcome yet: reads of the session wait for it
                self._abandon(op)
            raise

    def _write_alone(self, op: AppendOp) -> None:
        """No batching: the append's own task writes it on a pooled connection; not
        the caller's, whose cancel would interrupt the write after its COMMIT was
        perhaps sent."""
        task = asyncio.create_task(self._run(None, [op], keep=False))
        self._alone.add(task)
        task.add_done_callback(self._alone.discard)

    def _enqueue(self, op: AppendOp) -> None:
        if self._ready is None:
            self._ready = asyncio.Event()
            self._tasks = [
                asyncio.create_task(self._writer(), name=f"ctxwarden-append-writer-{i}")
                for i in range(self._writers)
            ]
        self._queue.append(op)
        self._ready.set()

    def _abandon(self, op: AppendOp) -> None:
        op.settled = asyncio.Event()
        for sid in [sid for sid, done in self._abandoned.items() if done.is_set()]:
            del self._abandoned[sid]
        self._abandoned[op.session.session_id] = op.settled

    def unsettled(self, session_id: str) -> bool:
        """Whether an append of ``session_id`` whose caller went away may still commit."""
        settled = self._abandoned.get(session_id)
        return settled is not None and not settled.is_set()

    async def settled(self, session_id: str) -> None:
        """Wait until the append of ``session_id`` whose caller went away (if any)
        committed or failed, so that a read of the session is not older than what
        this process wrote."""
        settled = self._abandoned.get(session_id)
        if settled is not None:
            await settled.wait()
            if self._abandoned.get(session_id) is settled:
                del self._abandoned[session_id]

    async def close(self) -> None:
        self._closed = True
        if self._alone:  # writes under way finish (their callers may be gone) ...
            await asyncio.wait(set(self._alone), timeout=self._timeout or SETTLE_TIMEOUT)
        for task in list(self._alone):  # ... unless the database does not answer
            task.cancel()
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
        w: Writer | None = None
        try:
            while True:
                while not self._queue:
                    self._ready.clear()
                    await self._ready.wait()
                w = await self._run(w, self._take())
        finally:
            if w is not None:
                await w.close()

    async def _connect(self) -> Writer:
        return await self._bounded(Writer.open(self.engine))

    async def _bounded(self, call: Awaitable[T]) -> T:
        if self._timeout <= 0:
            return await call
        async with asyncio.timeout(self._timeout):
            return await call

    async def _run(
        self, w: Writer | None, batch: list[AppendOp], keep: bool = True
    ) -> Writer | None:
        """Commit ``batch``; returns the connection to keep using (None: reconnect)."""
        try:
            for attempt in (1, 2):
                stage = ["connect"]
                try:
                    if w is None:
                        w = await self._connect()
                    async with self._gate.hold():
                        try:
                            await self._bounded(self._batch.write(w, batch, stage))
                        except BatchFailed:
                            await w.rollback()  # inside the write turn: frees the lock
                            raise
                except BatchFailed as failed:
                    assert w is not None
                    if len(batch) > 1:
                        await self._one_by_one(w, batch)  # each caller gets its own outcome
                    else:
                        _resolve(batch[0], failed.error)
                    if not keep:
                        await _release(w)
                        return None
                    return w
                except self._connection_errors as exc:
                    lost = w.thread if w is not None else None
                    await _discard(w)
                    w = None
                    committed: bool | None = False  # nothing was sent that commits
                    if stage[0] in ("script", "commit"):  # COMMIT was sent: did it?
                        committed, w = await self._settle(lost, batch)
                    if committed:
                        return await self._committed(w, batch, keep)
                    if attempt == 1 and committed is False and stage[0] != "connect":
                        # Nothing was committed: try once more on a new connection.
                        log.info("append writer reconnecting after: %s", exc)
                        continue
                    await _discard(w)
                    for op in batch:
                        _resolve(op, _lost_error(stage[0], committed, exc))
                    return None
                return await self._committed(w, batch, keep)
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

    async def _committed(
        self, w: Writer | None, batch: Sequence[AppendOp], keep: bool
    ) -> Writer | None:
        for op in batch:
            _resolve(op, None)
        self.batches += 1
        if not keep:
            await _release(w)
            return None
        return w

    async def _settle(
        self, lost: ServerThread | None, batch: Sequence[AppendOp]
    ) -> tuple[bool | None, Writer | None]:
        """Whether a batch committed whose connection was lost after its COMMIT was
        sent, and the new connection that found out. The new connection ends the lost
        one's server thread, then looks for the batch's first message row as this
        batch wrote it. None: that cannot be told (no new connection, another server,
        no answer, no message in the batch)."""
        probe = next((op for op in batch if op.rows), None)
        if lost is None or probe is None:
            return None, None  # SQLite, or a batch of no message
        row = probe.rows[0]
        w: Writer | None = None
        try:
            w = await self._connect()
            async with asyncio.timeout(self._timeout or SETTLE_TIMEOUT):
                if not await w.end_thread(lost, SETTLE_POLL):
                    return None, w
                # The row as this batch wrote it: a resend of the same request through
                # another replica stores the same message at the same seq, but planned at
                # another time (create_time_us is the server's clock at planning).
                found = await w.exists(
                    self._batch.sql.messages.name,
                    [(c, row[c]) for c in ("session_id", "seq", "message_id", "create_time_us")],
                )
        except self._connection_errors as exc:
            log.warning("could not settle a lost append batch: %s", exc)
            await _discard(w)
            return None, None
        log.info("a lost append batch was %s", "committed" if found else "not committed")
        return found, w

    async def _one_by_one(self, w: Writer, batch: Sequence[AppendOp]) -> None:
        current: Writer | None = w
        for op in batch:
            current = await self._run(current, [op])
        if current is not None and current is not w:
            await current.close()

    async def _timed(self, operation: str, call: Awaitable[T]) -> T:
        start = time.perf_counter()
        ok = False
        try:
            value = await call
            ok = True
            return value
        finally:
            self._observe(operation, time.perf_counter() - start, ok)


def _lost_error(stage: str, committed: bool | None, exc: BaseException) -> StoreUnavailable:
    if stage in ("script", "commit") and committed is None:
        return StoreUnavailable(
            f"the connection to the database was lost while the append committed ({exc}); "
            "whether it was stored is unknown: resend it with the same request_id, which "
            "applies it once"
        )
    return StoreUnavailable(f"append failed ({stage}): {exc}")


def _no_observer(operation: str, seconds: float, ok: bool) -> None:
    del operation, seconds, ok


def _resolve(op: AppendOp, exc: BaseException | None) -> None:
    op.resolved = True
    if op.settled is not None:
        op.settled.set()
    future = op.future
    if future is None or future.done():
        return
    if exc is None:
        future.set_result(None)
    else:
        future.set_exception(exc)
        # Mark it retrieved: a caller that was cancelled never awaits it.
        future.exception()


async def _release(w: Writer | None) -> None:
    """Return a per-append connection to the pool (no-batching mode)."""
    if w is not None:
        await w.close()


async def _discard(w: Writer | None) -> None:
    """Drop a connection that failed; the next batch opens a new one."""
    if w is not None:
        await w.discard()
