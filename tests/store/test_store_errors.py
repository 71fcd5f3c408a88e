"""The store boundary: every driver error leaves the store as a StoreError."""

from __future__ import annotations

import inspect
import sqlite3

import pymysql
import pytest
from sqlalchemy import exc as sa

from ctxwarden.core.session import Session
from ctxwarden.store.compactions import CheckpointRepository
from ctxwarden.store.engine import make_engine
from ctxwarden.store.errors import (
    ConcurrentWrite,
    DuplicateKey,
    StoreError,
    StoreRejected,
    StoreUnavailable,
    driver_errors,
)
from ctxwarden.store.messages import MessageRepository
from ctxwarden.store.plans import PlanRepository
from ctxwarden.store.records import RequestRepository
from ctxwarden.store.repository import Store
from ctxwarden.store.sessions import SessionRepository
from ctxwarden.util import ids


def _wrapped(cls: type[sa.DBAPIError], orig: Exception, invalidated: bool = False) -> Exception:
    return cls("INSERT ...", {}, orig, connection_invalidated=invalidated)


MAPPED: list[tuple[str, BaseException, type[StoreError]]] = [
    (
        "mysql duplicate key",
        _wrapped(sa.IntegrityError, pymysql.err.IntegrityError(1062, "Duplicate entry")),
        DuplicateKey,
    ),
    (
        "sqlite unique constraint",
        _wrapped(sa.IntegrityError, sqlite3.IntegrityError("UNIQUE constraint failed")),
        DuplicateKey,
    ),
    (
        "mysql deadlock",
        _wrapped(sa.OperationalError, pymysql.err.OperationalError(1213, "Deadlock found")),
        ConcurrentWrite,
    ),
    (
        "mysql lock wait timeout",
        _wrapped(sa.OperationalError, pymysql.err.OperationalError(1205, "Lock wait timeout")),
        ConcurrentWrite,
    ),
    (
        "mysql data too long",
        _wrapped(sa.DataError, pymysql.err.DataError(1406, "Data too long")),
        StoreRejected,
    ),
    (
        "mysql packet too large",
        _wrapped(sa.OperationalError, pymysql.err.OperationalError(1153, "Got a packet bigger")),
        StoreRejected,
    ),
    (
        "mysql server gone",
        _wrapped(
            sa.OperationalError, pymysql.err.OperationalError(2006, "MySQL server has gone away")
        ),
        StoreUnavailable,
    ),
    (
        "lost connection (invalidated)",
        _wrapped(sa.DBAPIError, pymysql.err.InterfaceError(0, ""), invalidated=True),
        StoreUnavailable,
    ),
    (
        "sqlite busy",
        _wrapped(sa.OperationalError, sqlite3.OperationalError("database is locked")),
        StoreUnavailable,
    ),
    ("pool exhausted", sa.TimeoutError("QueuePool limit reached"), StoreUnavailable),
    ("socket error", ConnectionResetError(104, "reset by peer"), StoreUnavailable),
    ("statement timeout", TimeoutError(), StoreUnavailable),
]


@pytest.mark.parametrize(("name", "error", "expected"), MAPPED, ids=[m[0] for m in MAPPED])
def test_each_driver_error_becomes_its_store_error(
    name: str, error: BaseException, expected: type[StoreError]
) -> None:
    with pytest.raises(expected) as caught, driver_errors():
        raise error
    assert caught.value.__cause__ is error, name


@pytest.mark.parametrize(
    "error",
    [
        _wrapped(sa.ProgrammingError, pymysql.err.ProgrammingError(1064, "syntax error")),
        ValueError("a bug"),
        KeyError("column"),
    ],
    ids=["sql syntax error", "value error", "key error"],
)
def test_bugs_stay_bugs(error: BaseException) -> None:
    """A programming error is not the database's fault: it must not look retryable."""
    with pytest.raises(type(error)), driver_errors():
        raise error


def test_store_errors_pass_through_unchanged() -> None:
    original = DuplicateKey("m-1")
    with pytest.raises(DuplicateKey) as caught, driver_errors():
        raise original
    assert caught.value is original


STORE_CLASSES = [
    Store,
    SessionRepository,
    MessageRepository,
    CheckpointRepository,
    PlanRepository,
    RequestRepository,
]


@pytest.mark.parametrize("cls", STORE_CLASSES, ids=[c.__name__ for c in STORE_CLASSES])
def test_every_public_store_coroutine_is_behind_the_boundary(cls: type) -> None:
    public = [
        (name, fn)
        for name, fn in inspect.getmembers(cls, inspect.iscoroutinefunction)
        if not name.startswith("_") and name != "close"
    ]
    assert public, f"{cls.__name__} has no public coroutine to check"
    assert [name for name, fn in public if not hasattr(fn, "__wrapped__")] == []


@pytest.mark.parametrize("backend_url", ["sqlite"], indirect=True)
async def test_a_real_duplicate_is_reported_as_duplicate_key(backend_url: str) -> None:
    repo = Store(make_engine(backend_url))
    try:
        session = Session(session_id=f"dup-{ids.new_id()}", create_time_us=ids.now_us())
        await repo.sessions.create(session, None)
        with pytest.raises(DuplicateKey):
            await repo.sessions.create(session, None)
    finally:
        await repo.close()
