"""A fork made while ``ctxwarden purge`` removes its archived source: exactly one of
the two wins, whole. The test orders them with the source row's own lock (held by
a test-side transaction) and watches the database for the waiters; no sleeps.

Also: a fork of an archived session is a new, live session (not born archived)."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

import grpc
import pytest
from sqlalchemy import create_engine, text

from ctxwarden.store.urls import sync_url
from ctxwarden.util import ids
from ctxwarden.v1 import context_service_pb2 as pb
from ctxwarden.v1 import context_service_pb2_grpc as pb_grpc
from ctxwarden.v1 import session_pb2 as ses
from tests.support.builders import assistant, user
from tests.support.errors import call_error, error_info
from tests.support.inproc import replica
from tests.support.server import ServerProcess

Stub = pb_grpc.ContextServiceStub
DAY_US = 86_400_000_000
TURNS = 3

WAITERS = {
    "mysql": (
        "SELECT COUNT(DISTINCT requesting_trx_id) FROM information_schema.innodb_lock_waits "
        "WHERE blocking_trx_id = :holder"
    ),
    "postgresql": (
        "SELECT COUNT(*) FROM pg_stat_activity "
        "WHERE datname = current_database() AND wait_event_type = 'Lock'"
    ),
}
"""Transactions waiting for a lock: on MariaDB, for one the holder's transaction
(``:holder``) holds; on PostgreSQL, any in this test's database (there a second
waiter for a row waits for the first, not for the holder)."""

HOLDER = (
    "SELECT trx_id FROM information_schema.innodb_trx WHERE trx_mysql_thread_id = CONNECTION_ID()"
)
"""The test's own transaction (MariaDB)."""


@pytest.fixture(scope="module")
def patient(backend_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stub]:
    """A server whose calls wait for a row lock as long as the test holds it (the
    fork waits while a purge process starts), not the default 5 s."""
    server = ServerProcess(
        backend_url,
        log_dir=tmp_path_factory.mktemp("logs"),
        extra_args=["--db-timeout", "120"],
    )
    server.start()
    try:
        with grpc.insecure_channel(server.target) as channel:
            yield pb_grpc.ContextServiceStub(channel)
    finally:
        server.stop()


def _archived_source(stub: Stub, url: str) -> str:
    """A session of TURNS turns, archived three days ago."""
    sid = f"src-{uuid.uuid4().hex[:12]}"
    stub.CreateSession(pb.CreateSessionRequest(session=ses.Session(model="gpt-4o"), session_id=sid))
    for i in range(TURNS):
        stub.AppendMessages(
            pb.AppendMessagesRequest(session_id=sid, messages=[user(f"q{i}?"), assistant(f"a{i}")])
        )
    stub.ArchiveSession(pb.ArchiveSessionRequest(session_id=sid))
    engine = create_engine(sync_url(url))
    with engine.begin() as conn:
        conn.execute(
            text("UPDATE sessions SET archive_time_us = :t WHERE session_id = :s"),
            {"t": ids.now_us() - 3 * DAY_US, "s": sid},
        )
    engine.dispose()
    return sid


@contextmanager
def _row_locked(url: str, sid: str) -> Iterator[Callable[[], int]]:
    """Holds the session row's lock (SELECT ... FOR UPDATE) until the block ends;
    yields how many transactions wait for a lock now."""
    engine = create_engine(sync_url(url))
    try:
        with engine.connect() as conn, engine.connect() as watcher:
            tx = conn.begin()
            conn.execute(
                text("SELECT session_id FROM sessions WHERE session_id = :s FOR UPDATE"), {"s": sid}
            )
            holder = ""
            if engine.dialect.name == "mysql":
                holder = str(conn.execute(text(HOLDER)).scalar_one())

            def waiters() -> int:
                query = text(WAITERS[engine.dialect.name])
                n = int(watcher.execute(query, {"holder": holder}).scalar_one())
                watcher.rollback()  # the next poll reads afresh
                return n

            yield waiters
            tx.commit()
    finally:
        engine.dispose()


def _until(done: Callable[[], bool], what: str, timeout: float = 120.0) -> None:
    """Poll the database (or a process) until ``done`` says so. Every 0.25 s:
    MariaDB refreshes its INFORMATION_SCHEMA lock tables only when they were not
    read for 0.1 s, so faster polling would keep reading a stale copy."""
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.25)


def _purge(url: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "ctxwarden",
            "purge",
            "--database-url",
            url,
            "--purge-archived-after-days",
            "2",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _stored(url: str, sql: str, sid: str) -> int:
    engine = create_engine(sync_url(url))
    try:
        with engine.connect() as conn:
            return int(conn.execute(text(sql), {"s": sid}).scalar_one())
    finally:
        engine.dispose()


async def _cold_input(url: str, fork: str) -> list[str]:
    """The fork's BuildModelInput on a replica that never saw it (restored from rows)."""
    async with replica(url) as m:
        view = await m.build_model_input(fork, 0)
    return [msg.text for msg in view.messages]


@pytest.mark.parametrize("backend_url", ["mysql", "postgres"], indirect=True)
@pytest.mark.parametrize("first", ["purge", "fork"])
def test_a_fork_and_the_purge_of_its_source_never_both_win(
    patient: Stub, backend_url: str, first: str
) -> None:
    stub = patient
    src = _archived_source(stub, backend_url)
    inherited = [t for i in range(TURNS) for t in (f"q{i}?", f"a{i}")]
    with ThreadPoolExecutor(1) as pool, _row_locked(backend_url, src) as waiters:
        if first == "purge":
            purge = _purge(backend_url)
            _until(lambda: purge.poll() is not None or waiters() == 1, "the purge to wait")
            assert purge.returncode is None, purge.communicate()
        fork = pool.submit(stub.ForkSession, pb.ForkSessionRequest(session_id=src), timeout=60)
        if first == "fork":
            # Fixed, the fork waits for the row; unfixed, it needs no lock and is done.
            _until(lambda: fork.done() or waiters() == 1, "the fork to wait")
            purge = _purge(backend_url)
            expected = 1 if fork.done() else 2
            _until(lambda: purge.poll() is not None or waiters() == expected, "the purge")
        else:
            _until(lambda: fork.done() or waiters() == 2, "the fork to wait")
    _, err = purge.communicate(timeout=60)
    assert purge.returncode == 0, err
    source = "SELECT COUNT(*) FROM sessions WHERE session_id = :s"
    refused = fork.exception(timeout=60)
    if refused is not None:
        # The purge won: the fork is refused, and the source is gone with no fork.
        assert isinstance(refused, grpc.RpcError), refused
        assert call_error(refused).code() == grpc.StatusCode.NOT_FOUND, refused
        assert error_info(refused).reason == "SESSION_NOT_FOUND"
        assert _stored(backend_url, source, src) == 0
        orphans = "SELECT COUNT(*) FROM sessions WHERE parent_key = :s"
        assert _stored(backend_url, orphans, src) == 0
        return
    made = fork.result()
    # The fork won: it is live and whole, and its source was kept for it.
    assert _stored(backend_url, source, src) == 1
    assert _stored(backend_url, "SELECT COUNT(*) FROM messages WHERE session_id = :s", src) == 6
    got = stub.GetSession(pb.GetSessionRequest(session_id=made.session_id))
    assert not got.HasField("archive_time") and got.parent_seq == 2 * TURNS
    listed = stub.ListMessages(pb.ListMessagesRequest(session_id=made.session_id))
    assert [x.content[0].text.text for x in listed.messages] == inherited
    assert asyncio.run(_cold_input(backend_url, made.session_id)) == inherited


def test_a_fork_of_an_archived_session_is_live(stub: Stub, backend_url: str) -> None:
    src = _archived_source(stub, backend_url)
    fork = stub.ForkSession(pb.ForkSessionRequest(session_id=src))
    assert not fork.HasField("archive_time")
    stub.AppendMessages(pb.AppendMessagesRequest(session_id=fork.session_id, messages=[user("on")]))
    got = stub.GetSession(pb.GetSessionRequest(session_id=fork.session_id))
    assert not got.HasField("archive_time") and got.last_seq == 2 * TURNS + 1
    listed = stub.ListSessions(pb.ListSessionsRequest(parent_session_id=src))
    assert [s.session_id for s in listed.sessions] == [fork.session_id]
    # The archived-sessions rule keeps the source (its fork reads from it) and the fork.
    purge = _purge(backend_url)
    _, err = purge.communicate(timeout=60)
    assert purge.returncode == 0, err
    assert _stored(backend_url, "SELECT COUNT(*) FROM sessions WHERE session_id = :s", src) == 1
    assert stub.GetSession(pb.GetSessionRequest(session_id=fork.session_id)).last_seq == 7
