"""PostgreSQL specifics: its errors, its query plans, and the guarantees that rest on them.

The rest of tests/store and tests/e2e runs on PostgreSQL as on SQLite and MySQL; these
are the checks MySQL has its own versions of (error codes, EXPLAIN).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import psycopg
import pytest
from sqlalchemy import event, insert, text
from sqlalchemy import exc as sa
from sqlalchemy.dialects.postgresql.asyncpg import AsyncAdapt_asyncpg_dbapi

from ctxwarden.config import Settings
from ctxwarden.core.messages import ContentBlock, Message, Role
from ctxwarden.core.session import Session
from ctxwarden.service.manager import SessionManager
from ctxwarden.store.engine import make_engine
from ctxwarden.store.errors import (
    ConcurrentWrite,
    DuplicateKey,
    StoreError,
    StoreRejected,
    StoreUnavailable,
    classify,
    driver_errors,
)
from ctxwarden.store.models import CompactionRow
from ctxwarden.store.repository import Store
from ctxwarden.store.urls import async_url, is_postgres, is_sqlite, sync_url
from ctxwarden.util import ids

pytestmark = pytest.mark.parametrize("backend_url", ["postgres"], indirect=True)


def _wrapped(cls: type[sa.DBAPIError], orig: Exception) -> Exception:
    return cls("UPDATE ...", {}, orig)


ADAPTED_OUT_OF_STEP: Any = AsyncAdapt_asyncpg_dbapi.InternalClientError
"""SQLAlchemy's adapter of asyncpg's InternalClientError (untyped)."""

MAPPED: list[tuple[str, BaseException, type[StoreError]]] = [
    (
        "unique violation",
        _wrapped(sa.IntegrityError, psycopg.errors.UniqueViolation()),
        DuplicateKey,
    ),
    (
        "serialization failure",
        _wrapped(sa.OperationalError, psycopg.errors.SerializationFailure()),
        ConcurrentWrite,
    ),
    ("deadlock", _wrapped(sa.OperationalError, psycopg.errors.DeadlockDetected()), ConcurrentWrite),
    (
        "lock not available",
        _wrapped(sa.OperationalError, psycopg.errors.LockNotAvailable()),
        ConcurrentWrite,
    ),
    (
        "value too long",
        _wrapped(sa.DataError, psycopg.errors.StringDataRightTruncation()),
        StoreRejected,
    ),
    (
        "NUL in text",
        _wrapped(sa.DBAPIError, psycopg.errors.CharacterNotInRepertoire()),
        StoreRejected,
    ),
    (
        "NULL in NOT NULL",
        _wrapped(sa.IntegrityError, psycopg.errors.NotNullViolation()),
        StoreRejected,
    ),
    (
        "admin shutdown",
        _wrapped(sa.OperationalError, psycopg.errors.AdminShutdown()),
        StoreUnavailable,
    ),
    (
        "connection lost",
        _wrapped(sa.DBAPIError, psycopg.errors.ConnectionDoesNotExist()),
        StoreUnavailable,
    ),
    (
        "too many connections",
        _wrapped(sa.OperationalError, psycopg.errors.TooManyConnections()),
        StoreUnavailable,
    ),
    (
        "statement timeout",
        _wrapped(sa.OperationalError, psycopg.errors.QueryCanceled()),
        StoreUnavailable,
    ),
    (
        "protocol out of step",
        _wrapped(sa.InternalError, ADAPTED_OUT_OF_STEP("out of step")),
        StoreUnavailable,
    ),
]


@pytest.mark.parametrize(("name", "error", "expected"), MAPPED, ids=[m[0] for m in MAPPED])
def test_each_postgres_error_becomes_its_store_error(
    backend_url: str, name: str, error: BaseException, expected: type[StoreError]
) -> None:
    with pytest.raises(expected) as caught, driver_errors():
        raise error
    assert caught.value.__cause__ is error, name


OUT_OF_STEP = asyncpg.exceptions.InternalClientError(
    "cannot switch to state 15; another operation (2) is in progress"
)

RAW: list[tuple[BaseException, str]] = [
    (asyncpg.exceptions.UniqueViolationError("dup"), "duplicate"),
    (asyncpg.exceptions.DeadlockDetectedError("deadlock"), "conflict"),
    (asyncpg.exceptions.SerializationError("serialize"), "conflict"),
    (asyncpg.exceptions.StringDataRightTruncationError("long"), "rejected"),
    (asyncpg.exceptions.CharacterNotInRepertoireError("nul"), "rejected"),
    (asyncpg.exceptions.AdminShutdownError("bye"), "lost"),
    (asyncpg.exceptions.ConnectionDoesNotExistError("gone"), "lost"),
    (asyncpg.exceptions.InterfaceError("connection is closed"), "lost"),
    (ConnectionResetError(104, "reset"), "lost"),
    (asyncpg.exceptions.TooManyConnectionsError("full"), "transient"),
    # What asyncpg raised on an idle connection that PostgreSQL's shutdown terminated.
    (OUT_OF_STEP, "lost"),
]


@pytest.mark.parametrize(("error", "kind"), RAW, ids=[type(e).__name__ for e, _ in RAW])
def test_the_group_commit_reads_asyncpg_errors_by_sqlstate(
    backend_url: str, error: BaseException, kind: str
) -> None:
    dialect = make_engine("postgresql+asyncpg://postgres@127.0.0.1/unused").dialect
    assert classify(error, dialect) == kind


@pytest.fixture
async def repo(backend_url: str) -> AsyncIterator[Store]:
    store = Store(make_engine(backend_url), append_writers=2)
    yield store
    await store.close()


def _msg(seq: int, text_: str = "") -> Message:
    return Message(
        role=Role.USER if seq % 2 else Role.ASSISTANT,
        content=(ContentBlock.of_text(text_ or f"message {seq} " + "x" * 200),),
        seq=seq,
        message_id=f"m{seq}",
        token_count=55,
        create_time_us=1,
    )


async def _session(repo: Store) -> str:
    sid = f"pg-{ids.new_id()}"
    now = ids.now_us()
    await repo.sessions.create(Session(session_id=sid, create_time_us=now), None)
    return sid


def _at(sid: str, last_seq: int, version: int) -> Session:
    return Session(session_id=sid, last_seq=last_seq, version=version, update_time_us=1)


async def test_real_errors_leave_the_store_as_store_errors(repo: Store) -> None:
    sid = await _session(repo)
    with pytest.raises(DuplicateKey):
        await repo.sessions.create(Session(session_id=sid, create_time_us=1), None)
    # PostgreSQL's text cannot hold NUL (the API refuses it before; the store too).
    bad = f"pg-{ids.new_id()}"
    with pytest.raises(StoreRejected):
        await repo.sessions.create(
            Session(session_id=bad, system_prompt="a\x00b", create_time_us=1), None
        )
    async with repo.engine.connect() as conn:
        count = "SELECT COUNT(*) FROM sessions WHERE session_id = :s"
        assert await conn.scalar(text(count), {"s": bad}) == 0
    await repo.messages.append_messages(
        _at(sid, 1, 1), expected_version=0, messages=[_msg(1)], record=None
    )
    assert [m.seq for m in await repo.messages.get_many(sid, [1, 2])] == [1]


async def test_a_real_deadlock_is_a_concurrent_write(backend_url: str) -> None:
    """Two transactions lock two rows in opposite orders: PostgreSQL aborts one (40P01)."""
    engine = make_engine(backend_url)
    try:
        async with engine.begin() as conn:
            await conn.execute(text("CREATE TABLE deadlock_probe (k INT PRIMARY KEY, v INT)"))
            await conn.execute(text("INSERT INTO deadlock_probe VALUES (1, 0), (2, 0)"))
        locked = [asyncio.Event(), asyncio.Event()]

        async def cross(first: int, second: int, me: int) -> None:
            async with engine.begin() as conn:
                await conn.execute(text(f"UPDATE deadlock_probe SET v = v + 1 WHERE k = {first}"))
                locked[me].set()
                await locked[1 - me].wait()
                await conn.execute(text(f"UPDATE deadlock_probe SET v = v + 1 WHERE k = {second}"))

        async def guarded(first: int, second: int, me: int) -> None:
            with driver_errors():
                await cross(first, second, me)

        outcomes = await asyncio.gather(guarded(1, 2, 0), guarded(2, 1, 1), return_exceptions=True)
        failed = [o for o in outcomes if isinstance(o, BaseException)]
        assert len(failed) == 1 and isinstance(failed[0], ConcurrentWrite), outcomes
    finally:
        await engine.dispose()


async def test_a_stale_replica_is_fenced_off(backend_url: str) -> None:
    """Two stores on one database (two replicas): the one whose version is stale can
    neither append nor commit a batch with a fresh writer; nothing of it is stored."""
    first = Store(make_engine(backend_url), append_writers=2)
    second = Store(make_engine(backend_url), append_writers=1)
    try:
        sid = await _session(first)
        await first.messages.append_messages(
            _at(sid, 1, 1), expected_version=0, messages=[_msg(1)], record=None
        )
        with pytest.raises(ConcurrentWrite):
            await second.messages.append_messages(
                _at(sid, 1, 1), expected_version=0, messages=[_msg(1, "stale")], record=None
            )
        stored = await first.messages.get_many(sid, [1])
        assert [(m.seq, m.content[0].text) for m in stored] == [(1, _msg(1).content[0].text)]
    finally:
        await first.close()
        await second.close()


HISTORY = 20_000
KEPT = 100


def _nodes(plan: dict[str, Any]) -> list[dict[str, Any]]:
    found = [plan]
    for child in plan.get("Plans", []):
        found.extend(_nodes(child))
    return found


async def test_restore_reads_the_kept_messages_by_index(repo: Store) -> None:
    """O(kept) on PostgreSQL: the restore's message query is a range scan of the primary
    key that reads the kept rows alone (EXPLAIN ANALYZE)."""
    sid = await _session(repo)
    for version, start in enumerate(range(1, HISTORY + 1, 2000)):
        batch = [_msg(s) for s in range(start, start + 2000)]
        await repo.messages.append_messages(
            _at(sid, batch[-1].seq, version + 1),
            expected_version=version,
            messages=batch,
            record=None,
        )
    first_kept = HISTORY - KEPT + 1
    await _checkpoint(repo, sid, first_kept)
    async with repo.engine.begin() as conn:
        await conn.execute(text("ANALYZE messages"))

    seen: list[tuple[str, Any]] = []

    def capture(conn: Any, cursor: Any, statement: str, params: Any, *_: Any) -> None:
        if "FROM messages" in statement:
            seen.append((statement, params))

    event.listen(repo.engine.sync_engine, "before_cursor_execute", capture)
    try:
        view = await SessionManager(repo, Settings()).build_model_input(sid, 0)
    finally:
        event.remove(repo.engine.sync_engine, "before_cursor_execute", capture)
    assert view.first_kept_seq == first_kept and len(view.messages) == KEPT + 1
    assert len(seen) == 1, seen
    statement, params = seen[0]
    async with repo.engine.connect() as conn:
        raw = await conn.exec_driver_sql(
            f"EXPLAIN (ANALYZE, FORMAT JSON) {statement}", tuple(params)
        )
        report: Any = raw.scalar()
    plan = (json.loads(report) if isinstance(report, str) else report)[0]["Plan"]
    nodes = _nodes(plan)
    scans = [n for n in nodes if n.get("Relation Name") == "messages"]
    assert len(scans) == 1, nodes
    # An index scan in key order, or (with other sessions' rows about) a bitmap scan of the
    # same index and a sort of what it found: either way only the kept rows are read.
    assert scans[0]["Node Type"] in ("Index Scan", "Bitmap Heap Scan"), nodes
    assert [n.get("Index Name") for n in nodes if "Index Name" in n] == ["pk_messages"], nodes
    assert scans[0]["Actual Rows"] == KEPT, scans
    assert all(n.get("Actual Rows", 0) <= KEPT for n in nodes), nodes
    assert all(n.get("Rows Removed by Filter", 0) == 0 for n in nodes), nodes
    assert all(n.get("Rows Removed by Index Recheck", 0) == 0 for n in nodes), nodes


async def _checkpoint(repo: Store, sid: str, first_kept: int) -> None:
    async with repo.engine.begin() as conn:
        await conn.execute(
            insert(CompactionRow).values(
                compaction_id=f"c-{sid}",
                session_id=sid,
                summary="Goal: restore.",
                first_kept_seq=first_kept,
                tokens_before=HISTORY * 55,
                tokens_after=KEPT * 55,
                at_seq=HISTORY,
                superseded_at_seq=0,
                details_json="{}",
                created_at=ids.now_us(),
            )
        )


@pytest.mark.parametrize(
    "given",
    [
        "postgresql://u:p@db:5432/ctx",
        "postgres://u:p@db:5432/ctx",
        "postgresql+asyncpg://u:p@db:5432/ctx",
        "postgresql+psycopg://u:p@db:5432/ctx",
    ],
)
def test_postgres_urls_name_asyncpg_to_serve_and_psycopg_to_migrate(
    backend_url: str, given: str
) -> None:
    assert async_url(given).render_as_string(False) == "postgresql+asyncpg://u:p@db:5432/ctx"
    assert sync_url(given).render_as_string(False) == "postgresql+psycopg://u:p@db:5432/ctx"
    assert is_postgres(given) and not is_sqlite(given)
