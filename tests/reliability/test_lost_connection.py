"""A pooled connection lost to a database restart is dropped quietly.

When a connection dies while it is idle (in the pool, or checked out between
statements), returning it to the pool rolls it back: the rollback fails, and the pool
used to log "Exception during reset or similar" at ERROR with a traceback (the flake of
``test_mariadb_restart_under_load``, which asserts a log without tracebacks). Here the
connection is invalidated without one: the next checkout opens a new connection and
works. The database restarted is the private MariaDB (PostgreSQL) server of the outage
tests, never the shared one.
"""

from __future__ import annotations

import logging
from typing import Protocol

import pytest
from sqlalchemy import text

from ctxwarden.store.engine import make_engine
from tests.support.mariadb import PrivateMariaDB
from tests.support.postgres import PrivatePostgres

pytestmark = pytest.mark.db_outage


class Restartable(Protocol):
    def stop(self) -> None: ...
    def start(self) -> None: ...
    def create_database(self) -> str: ...


def _noisy(caplog: pytest.LogCaptureFixture) -> list[str]:
    """Records an operator would read as a failure: ERROR or worse, or any traceback."""
    return [
        f"{r.name} {r.levelname}: {r.getMessage()}"
        for r in caplog.records
        if r.levelno >= logging.ERROR or r.exc_info
    ]


async def _lose_idle_connections(database: Restartable, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="sqlalchemy.pool")
    engine = make_engine(database.create_database(), pool_size=3)
    try:
        # Two connections in the pool (checked in), one checked out and idle.
        first, second = await engine.connect(), await engine.connect()
        for conn in (first, second):
            await conn.execute(text("SELECT 1"))
            await conn.commit()
        await second.close()
        held = await engine.connect()
        await held.execute(text("SELECT 1"))
        await held.commit()
        await first.close()
        try:
            database.stop()
        finally:
            database.start()
        await held.close()  # its reset-on-return rollback meets a dead connection
        for _ in range(3):
            async with engine.connect() as conn:
                assert (await conn.execute(text("SELECT 1"))).scalar_one() == 1
    finally:
        await engine.dispose()
    assert not _noisy(caplog), _noisy(caplog)
    assert any("nvalidat" in r.getMessage() for r in caplog.records), "nothing was dropped"


@pytest.mark.parametrize("backend", [pytest.param("mysql", marks=pytest.mark.mysql)])
async def test_mariadb_connection_lost_while_idle_is_dropped_quietly(
    backend: str, private_mariadb: PrivateMariaDB, caplog: pytest.LogCaptureFixture
) -> None:
    await _lose_idle_connections(private_mariadb, caplog)


@pytest.mark.parametrize("backend", [pytest.param("postgres", marks=pytest.mark.postgres)])
async def test_postgres_connection_lost_while_idle_is_dropped_quietly(
    backend: str, private_postgres: PrivatePostgres, caplog: pytest.LogCaptureFixture
) -> None:
    await _lose_idle_connections(private_postgres, caplog)
