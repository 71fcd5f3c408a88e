"""Write transactions, serialised in-process where the database has one writer.

SQLite lets one transaction write at a time. Left to itself, every write
transaction would check a connection out of the pool and then wait inside
SQLite for the file lock (``busy_timeout``): under load the waiters hold every
pooled connection, and reads time out waiting for the pool although the
database is healthy. The gate makes writers queue in the process instead,
before they take a connection, so the pool only ever lends connections that are
doing work. On MySQL/MariaDB and PostgreSQL it is a plain ``engine.begin()``.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine


class WriteGate:
    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine
        self._lock = asyncio.Lock() if engine.dialect.name == "sqlite" else None
        self.waiting = 0
        """Writers queued for their turn (for tests and metrics)."""

    @property
    def serialised(self) -> bool:
        return self._lock is not None

    @contextlib.asynccontextmanager
    async def hold(self) -> AsyncIterator[None]:
        """The write turn alone (for a writer that brings its own connection)."""
        if self._lock is None:
            yield
            return
        self.waiting += 1
        try:
            await self._lock.acquire()
        finally:
            self.waiting -= 1
        try:
            yield
        finally:
            self._lock.release()

    @contextlib.asynccontextmanager
    async def begin(self) -> AsyncIterator[AsyncConnection]:
        """A write transaction on a pooled connection, committed on success."""
        async with self.hold(), self.engine.begin() as conn:
            yield conn
