"""Cheap answers to "which version of this session is stored?".

Every read that serves a hot session asks it first (another replica may have
changed the session), so it sits on the hot path. A dedicated driver connection
answers, without pool checkout, pre-ping or ORM work, and questions that arrive
while a query is in flight share the next one (``session_id IN (...)``), the
way group commit shares writes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Sequence

from sqlalchemy.ext.asyncio import AsyncEngine

from ctxwarden.store.batch_sql import VersionSql
from ctxwarden.store.errors import StoreUnavailable
from ctxwarden.store.writer import Writer

log = logging.getLogger(__name__)

MAX_IDS = 500
"""Sessions asked about in one query."""

Answer = tuple[int, bool] | None
"""(version, deleted), or None when no such session is stored."""


class VersionReader:
    def __init__(self, engine: AsyncEngine, timeout: float = 0.0) -> None:
        self.engine = engine
        self.timeout = timeout
        self._sql = VersionSql(engine.dialect)
        self._pending: dict[str, list[asyncio.Future[Answer]]] = {}
        self._wake: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None
        self._conn: Writer | None = None
        self.queries = 0
        """Queries run (for tests)."""

    async def version(self, session_id: str) -> Answer:
        future: asyncio.Future[Answer] = asyncio.get_running_loop().create_future()
        self._pending.setdefault(session_id, []).append(future)
        if self._task is None:
            self._wake = asyncio.Event()
            self._task = asyncio.create_task(self._run(), name="ctxwarden-version-reader")
        assert self._wake is not None
        self._wake.set()
        return await future

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
        self._fail(self._pending, StoreUnavailable("the server is shutting down"))
        if self._conn is not None:
            await self._conn.close()

    async def _run(self) -> None:
        assert self._wake is not None
        while True:
            while not self._pending:
                self._wake.clear()
                await self._wake.wait()
            ids = list(self._pending)[:MAX_IDS]
            asked = {sid: self._pending.pop(sid) for sid in ids}
            try:
                rows = await self._query(ids)
            except Exception as exc:  # lost, hung or refused: every asker learns it
                log.warning("version check failed: %s", exc)
                if self._conn is not None:
                    await self._conn.discard()
                    self._conn = None
                self._fail(asked, StoreUnavailable(f"version check failed: {exc}"))
                continue
            found = {str(sid): (int(v), bool(d)) for sid, v, d in rows}
            for sid, futures in asked.items():
                for f in futures:
                    if not f.done():
                        f.set_result(found.get(sid))

    async def _query(self, ids: Sequence[str]) -> list[tuple[str, int, int]]:
        sql, params = self._sql.query(ids)
        async with asyncio.timeout(self.timeout if self.timeout > 0 else None):
            for attempt in (1, 2):
                fresh = self._conn is None
                if self._conn is None:
                    self._conn = await Writer.open(self.engine)
                    await self._conn.autocommit()
                try:
                    rows = await self._conn.fetch_all(sql, params)
                    break
                except Exception:
                    # A connection that served before may have died since (the
                    # database restarted): a read is safe to try once more.
                    await self._conn.discard()
                    self._conn = None
                    if fresh or attempt == 2:
                        raise
        self.queries += 1
        return rows

    @staticmethod
    def _fail(asked: dict[str, list[asyncio.Future[Answer]]], exc: Exception) -> None:
        for futures in asked.values():
            for f in futures:
                if not f.done():
                    f.set_exception(exc)
                    f.exception()
        asked.clear()
