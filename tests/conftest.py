"""Shared fixtures: a real ctxwarden server process per backend.

Every test that takes ``backend_url`` (directly or through ``server``) runs
once on SQLite and once on MySQL. The MySQL run needs
``CTXWARDEN_TEST_MYSQL_URL`` (e.g. mysql+aiomysql://root@127.0.0.1:3306/test);
each run gets its own freshly created database, dropped afterwards.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest

# The private MariaDB server of the database outage tests (tests/support/mariadb.py).
from tests.support.mariadb import private_mariadb as private_mariadb
from tests.support.server import (
    ServerProcess,
    drop_mysql_database,
    make_mysql_database,
    migrate_database,
)

MYSQL_ENV = "CTXWARDEN_TEST_MYSQL_URL"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        callspec = getattr(item, "callspec", None)
        if callspec is not None and callspec.params.get("backend_url") == "mysql":
            item.add_marker(pytest.mark.mysql)


@pytest.fixture(scope="session", params=["sqlite", "mysql"])
def backend_url(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """A fresh, migrated database URL for this test session."""
    if request.param == "sqlite":
        path = tmp_path_factory.mktemp("db") / "ctxwarden.db"
        url = f"sqlite:///{path}"
        migrate_database(url)
        yield url
        return
    base = os.environ.get(MYSQL_ENV)
    if not base:
        pytest.skip(f"{MYSQL_ENV} is not set")
    name = f"ctxw_{os.getpid()}_{secrets.token_hex(3)}"
    url = make_mysql_database(base, name)
    try:
        migrate_database(url)
        yield url
    finally:
        drop_mysql_database(base, name)


@pytest.fixture(scope="session")
def server(backend_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    proc = ServerProcess(backend_url, log_dir=Path(tmp_path_factory.mktemp("logs")))
    proc.start()
    try:
        yield proc
    finally:
        proc.stop()


@pytest.fixture(scope="session")
def server_target(server: ServerProcess) -> str:
    return server.target
