"""Async engine construction with the settings each backend needs."""

from __future__ import annotations

from typing import Any

from sqlalchemy import event
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from ctxwarden.store.urls import async_url


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    # WAL lets readers run beside the writer; synchronous=FULL makes every
    # acknowledged commit survive power loss; busy_timeout lets a second
    # process wait for the write lock instead of failing at once.
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=FULL")
    cursor.execute("PRAGMA busy_timeout=10000")
    cursor.close()


def make_engine(url: str, *, pool_size: int = 10) -> AsyncEngine:
    parsed = async_url(url)
    if parsed.drivername.startswith("sqlite"):
        engine = create_async_engine(parsed)
        event.listen(engine.sync_engine, "connect", _sqlite_pragmas)
        return engine
    return create_async_engine(
        parsed,
        pool_size=pool_size,
        max_overflow=pool_size,
        pool_recycle=1800,
        pool_pre_ping=True,
        isolation_level="READ COMMITTED",
    )
