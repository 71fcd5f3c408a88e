"""Async engine construction with the settings each backend needs."""

from __future__ import annotations

import logging
from typing import Any

from sqlalchemy import event, text
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from ctxwarden.store.urls import async_url

log = logging.getLogger(__name__)


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    # WAL lets readers run beside the writer; synchronous=FULL makes every
    # acknowledged commit survive power loss; busy_timeout lets a second
    # process wait for the write lock instead of failing at once.
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=FULL")
    cursor.execute("PRAGMA busy_timeout=10000")
    cursor.close()


def make_engine(
    url: str,
    *,
    pool_size: int = 10,
    connect_timeout: float = 5.0,
    pool_timeout: float = 5.0,
) -> AsyncEngine:
    """``connect_timeout``: seconds to open a connection; ``pool_timeout``: seconds
    to wait for a free one (then sqlalchemy.exc.TimeoutError, which the service
    reports as UNAVAILABLE)."""
    parsed = async_url(url)
    if parsed.drivername.startswith("sqlite"):
        engine = create_async_engine(parsed, pool_timeout=pool_timeout)
        event.listen(engine.sync_engine, "connect", _sqlite_pragmas)
        return engine
    timeout = max(1, round(connect_timeout))
    # asyncpg names its connect timeout ``timeout``; the MySQL drivers ``connect_timeout``.
    connect_args = (
        {"timeout": timeout}
        if parsed.drivername.startswith("postgresql")
        else {"connect_timeout": timeout}
    )
    return create_async_engine(
        parsed,
        pool_size=pool_size,
        max_overflow=pool_size,
        pool_recycle=1800,
        pool_pre_ping=True,
        pool_timeout=pool_timeout,
        isolation_level="READ COMMITTED",
        connect_args=connect_args,
    )


async def writable_message_bytes(engine: AsyncEngine, configured: int) -> int:
    """The largest message body this database can store: ``configured``, lowered
    on MySQL/MariaDB to leave room under ``max_allowed_packet`` (a single value
    can never be longer than one packet, however it is sent)."""
    if engine.dialect.name != "mysql":
        return configured
    async with engine.connect() as conn:
        packet = int((await conn.execute(text("SELECT @@max_allowed_packet"))).scalar_one())
    limit = max(64 * 1024, packet - 1024 * 1024)
    if configured > limit:
        log.warning(
            "max_allowed_packet is %d bytes: messages are limited to %d bytes (not %d); "
            "raise max_allowed_packet on the server to store larger ones",
            packet,
            limit,
            configured,
        )
        return limit
    return configured
