"""Fresh, private databases on each backend the suite runs against.

SQLite gets a file in a temporary directory; MySQL/MariaDB and PostgreSQL get a
database of their own on the server named by ``CTXWARDEN_TEST_MYSQL_URL`` /
``CTXWARDEN_TEST_POSTGRES_URL``, dropped afterwards, so tests never see each
other's rows. A backend whose variable is not set is skipped (CI sets both and
fails on any skipped MySQL or PostgreSQL test: .ci/check_backends_ran.py).
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.support.server import (
    drop_mysql_database,
    drop_postgres_database,
    make_mysql_database,
    make_postgres_database,
)

MYSQL_ENV = "CTXWARDEN_TEST_MYSQL_URL"
POSTGRES_ENV = "CTXWARDEN_TEST_POSTGRES_URL"
ENV = {"mysql": MYSQL_ENV, "postgres": POSTGRES_ENV}


def server_url(kind: str) -> str:
    """The base URL of the ``kind`` server (skips the test when it is not configured)."""
    base = os.environ.get(ENV[kind])
    if not base:
        pytest.skip(f"{ENV[kind]} is not set")
    return base


@contextmanager
def fresh_database(kind: str, directory: Path, prefix: str = "ctxw") -> Iterator[str]:
    """The URL of a new, empty (unmigrated) database on backend ``kind``."""
    if kind == "sqlite":
        yield f"sqlite:///{directory / f'{prefix}.db'}"
        return
    base = server_url(kind)
    name = f"{prefix}_{os.getpid()}_{secrets.token_hex(3)}"
    if kind == "mysql":
        url = make_mysql_database(base, name)
        try:
            yield url
        finally:
            drop_mysql_database(base, name)
        return
    url = make_postgres_database(base, name)
    try:
        yield url
    finally:
        drop_postgres_database(base, name)


BACKEND_PARAMS = [
    "sqlite",
    pytest.param("mysql", marks=pytest.mark.mysql),
    pytest.param("postgres", marks=pytest.mark.postgres),
]
"""The backends as parameters of a test's own database fixture (``fresh_database``)."""

SERVER_BACKEND_PARAMS = BACKEND_PARAMS[1:]
"""The backends with a server (and connections to lose)."""
