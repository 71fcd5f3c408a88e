"""Shared fixtures: a real ctxwarden server process per backend.

Every test that takes ``backend_url`` (directly or through ``server``) runs
once on SQLite and once on MySQL; the tests under tests/store and tests/e2e
once more on PostgreSQL. The MySQL run needs ``CTXWARDEN_TEST_MYSQL_URL`` (e.g.
mysql+aiomysql://root@127.0.0.1:3306/test), the PostgreSQL run
``CTXWARDEN_TEST_POSTGRES_URL`` (e.g.
postgresql+asyncpg://postgres@127.0.0.1:5432/test); each run gets its own
freshly created database, dropped afterwards (tests/support/databases.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

# The private MariaDB server of the database outage tests (tests/support/mariadb.py).
from tests.support.databases import MYSQL_ENV as MYSQL_ENV
from tests.support.databases import POSTGRES_ENV as POSTGRES_ENV
from tests.support.databases import fresh_database
from tests.support.mariadb import private_mariadb as private_mariadb

# The private PostgreSQL server of the PostgreSQL outage tests (tests/support/postgres.py).
from tests.support.postgres import private_postgres as private_postgres
from tests.support.server import ServerProcess, migrate_database

BACKENDS = ("sqlite", "mysql")
ALL_BACKENDS = (*BACKENDS, "postgres")
ON_ALL_BACKENDS = ("store", "e2e", "model")
"""The suites that also run on PostgreSQL (the rest would add minutes to CI and
exercise no store code of their own)."""

_TESTS = Path(__file__).parent


def _backends_for(path: Path) -> tuple[str, ...]:
    if any((_TESTS / suite) in path.parents for suite in ON_ALL_BACKENDS):
        return ALL_BACKENDS
    return BACKENDS


def _names_backend(marker: pytest.Mark) -> bool:
    names = marker.args[0] if marker.args else marker.kwargs.get("argnames", "")
    if isinstance(names, str):
        names = [n.strip() for n in names.split(",")]
    return "backend_url" in names


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "backend_url" not in metafunc.fixturenames:
        return
    if any(_names_backend(m) for m in metafunc.definition.iter_markers("parametrize")):
        return  # the test names its own backends
    kinds = _backends_for(metafunc.definition.path)
    metafunc.parametrize("backend_url", kinds, indirect=True, scope="session")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        callspec = getattr(item, "callspec", None)
        backend = None if callspec is None else callspec.params.get("backend_url")
        if backend == "mysql":
            item.add_marker(pytest.mark.mysql)
        elif backend == "postgres":
            item.add_marker(pytest.mark.postgres)


@pytest.fixture(scope="session")
def backend_url(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """A fresh, migrated database URL for this test session."""
    with fresh_database(request.param, tmp_path_factory.mktemp("db"), "ctxwarden") as url:
        migrate_database(url)
        yield url


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
