"""Async engine construction with the settings each backend needs."""

from __future__ import annotations

import functools
import logging
import weakref
from dataclasses import dataclass, replace
from typing import Any

from sqlalchemy import Engine, create_engine, event, text
from sqlalchemy.engine.interfaces import Dialect
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine
from sqlalchemy.pool import ConnectionPoolEntry, PoolResetState

from ctxwarden.store.urls import async_url, sync_url

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class _Settings:
    url: str
    pool_size: int = 10
    connect_timeout: float = 5.0
    pool_timeout: float = 5.0
    multi_statements: bool = False


_SETTINGS: weakref.WeakKeyDictionary[Engine, _Settings] = weakref.WeakKeyDictionary()
"""What make_engine built each engine with (append_engine builds a sibling)."""


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
    multi_statements: bool = False,
) -> AsyncEngine:
    """``connect_timeout``: seconds to open a connection; ``pool_timeout``: seconds
    to wait for a free one (then sqlalchemy.exc.TimeoutError, which the service
    reports as UNAVAILABLE). ``multi_statements`` (MySQL/MariaDB): the connections
    accept several statements in one query (the append writers' engine alone,
    ``append_engine``); every MySQL connection drops NO_BACKSLASH_ESCAPES from its
    session's sql_mode (store/mysql_connection.py)."""
    return _register(_Settings(url, pool_size, connect_timeout, pool_timeout, multi_statements))


def append_engine(engine: AsyncEngine, writers: int) -> AsyncEngine:
    """The engine of the append writers beside ``engine``: on MySQL/MariaDB a pool of
    its own whose connections accept the group commit's multi-statement script (as
    many connections as ``writers``; with 0, one per append: ``engine``'s pool size);
    elsewhere ``engine`` itself."""
    if engine.dialect.name != "mysql":
        return engine
    settings = _SETTINGS.get(engine.sync_engine) or _Settings(
        engine.url.render_as_string(hide_password=False)
    )
    size = writers if writers > 0 else settings.pool_size
    return _register(replace(settings, pool_size=size, multi_statements=True))


def _register(settings: _Settings) -> AsyncEngine:
    engine = _create(settings)
    _SETTINGS[engine.sync_engine] = settings
    return engine


def _create(settings: _Settings) -> AsyncEngine:
    parsed = async_url(settings.url)
    if parsed.drivername.startswith("sqlite"):
        engine = create_async_engine(parsed, pool_timeout=settings.pool_timeout)
        event.listen(engine.sync_engine, "connect", _sqlite_pragmas)
        return engine
    timeout = max(1, round(settings.connect_timeout))
    # asyncpg names its connect timeout ``timeout``; the MySQL drivers ``connect_timeout``.
    connect_args: dict[str, Any] = {"timeout": timeout}
    if not parsed.drivername.startswith("postgresql"):
        connect_args = {"connect_timeout": timeout, "async_creator_fn": _mysql_connect(settings)}
    engine = create_async_engine(
        parsed,
        pool_size=settings.pool_size,
        max_overflow=settings.pool_size,
        pool_recycle=1800,
        pool_pre_ping=True,
        pool_timeout=settings.pool_timeout,
        pool_reset_on_return=None,  # _reset_on_return does it
        isolation_level="READ COMMITTED",
        connect_args=connect_args,
    )
    event.listen(engine.sync_engine.pool, "reset", functools.partial(_reset, engine.dialect))
    return engine


def _reset(
    dialect: Dialect, dbapi_connection: Any, record: ConnectionPoolEntry, state: PoolResetState
) -> None:
    """A connection going back to the pool is rolled back (SQLAlchemy's
    reset-on-return). One that died meanwhile (the database restarted while it
    was idle) is dropped with one line at INFO, not the pool's ERROR with a
    traceback; the next checkout opens a new one."""
    if state.terminate_only or not state.asyncio_safe or state.transaction_was_reset:
        return
    try:
        dbapi_connection.rollback()
    except Exception as exc:
        lost = dialect.is_disconnect(exc, dbapi_connection, None)  # type: ignore[arg-type]
        log.log(
            logging.INFO if lost else logging.WARNING,
            "dropping a pooled connection whose rollback failed: %s: %s",
            type(exc).__name__,
            exc,
        )
        record.invalidate(exc)


def make_sync_engine(url: str) -> Engine:
    """A synchronous engine (the migrations); on MySQL/MariaDB every connection drops
    NO_BACKSLASH_ESCAPES from its session's sql_mode, as make_engine's do."""
    parsed = sync_url(url)
    if parsed.drivername.startswith("mysql"):
        from ctxwarden.store.mysql_connection import SAFE_SQL_MODE

        return create_engine(parsed, connect_args={"init_command": SAFE_SQL_MODE})
    return create_engine(parsed)


def _mysql_connect(settings: _Settings) -> Any:
    """The connect function of a MySQL/MariaDB pool. Its module (and aiomysql) is
    imported only here: a server on SQLite or PostgreSQL never loads a MySQL
    driver (~8 MiB at rest)."""
    from ctxwarden.store import mysql_connection

    return functools.partial(mysql_connection.connect, multi_statements=settings.multi_statements)


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
