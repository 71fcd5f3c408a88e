"""A write that loses Galera's certification is planned again, never reported as a
database outage.

On a multi-primary cluster two nodes may both accept a transaction on the same session row;
the one ordered second fails certification and its COMMIT answers 1213 (deadlock), or it is
aborted by the first one's replication at its next statement (1213 too). The transaction is
known to be rolled back, so the append is a lost compare-and-set: the service reloads the
session and plans again (three tries), then answers ABORTED CONCURRENT_MODIFICATION.
Before, a conflict at COMMIT was taken for a lost connection (UNAVAILABLE, "outcome
unknown").

Both ways a batch is written are made to conflict deterministically:

- A batch's COMMIT is a round trip of its own (on a cluster node it always is). Replica B
  (node 2) has run its UPDATE and INSERT when, from the group committer's statement
  observer, another writer commits a change of the same session row on node 1. B's COMMIT
  is then ordered after it and fails certification.
- A batch's UPDATE and INSERT go in one script (on a cluster node COMMIT always follows on
  its own: Galera may abort a transaction between a script's statements and run the rest
  of it in a new one). A transaction on node 2 holds a gap lock where B's INSERT goes, so
  B's script waits there after its UPDATE; then the change committed on node 1 is applied
  on node 2 and aborts B's transaction: the script fails, nothing is committed.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import pytest

from ctxwarden.core.errors import Aborted
from ctxwarden.core.reasons import ErrorReason
from ctxwarden.service.manager import SessionManager
from tests.support.galera import GaleraCluster
from tests.support.inproc import new_session, replica, user_msg

pytestmark = pytest.mark.galera
WAIT_S = 30.0


class CommitOnNode1:
    """A statement observer for B's group committer: after B's INSERT, commit a change of
    the session row on node 1 (the first ``times`` appends only); records every COMMIT."""

    def __init__(self, galera: GaleraCluster, database: str, session_id: str, times: int):
        self.galera, self.database, self.session_id = galera, database, session_id
        self.remaining = times
        self.commits: list[bool] = []
        self.operations: list[tuple[str, bool]] = []

    def __call__(self, operation: str, seconds: float, ok: bool) -> None:
        del seconds
        self.operations.append((operation, ok))
        if operation == "COMMIT":
            self.commits.append(ok)
        if operation == "INSERT" and ok and self.remaining > 0:
            self.remaining -= 1
            _commit_on_node1(self.galera, self.database, self.session_id)


def _commit_on_node1(galera: GaleraCluster, database: str, session_id: str) -> None:
    """Another writer's change of the session row, committed on node 1."""
    conn = galera.connect(1, database)
    try:
        with conn.cursor() as cur:
            cur.execute(
                "UPDATE sessions SET version = version + 1 WHERE session_id = %s", (session_id,)
            )
            assert cur.rowcount == 1
    finally:
        conn.close()


def _observe(manager: SessionManager, observer: CommitOnNode1) -> None:
    manager.store.committer._observe = observer


@asynccontextmanager
async def _two_nodes(
    galera: GaleraCluster, database: str
) -> AsyncIterator[tuple[SessionManager, SessionManager, str]]:
    """Replica A on node 1, replica B (one append writer) on node 2, and a session with
    one message that B holds hot."""
    async with (
        replica(galera.url(1, database)) as a,
        replica(galera.url(2, database), append_writers=1) as b,
    ):
        sid = await new_session(a)
        await a.append(sid, [user_msg("q1")], None, None)
        assert await _texts(b, sid) == ["q1"]  # hot on B
        yield a, b, sid


async def _texts(m: SessionManager, sid: str) -> list[str]:
    return [msg.text for msg in (await m.build_model_input(sid, 0)).messages]


async def test_a_certification_failure_at_commit_is_planned_again(
    galera: GaleraCluster, cluster_db: str
) -> None:
    async with _two_nodes(galera, cluster_db) as (a, b, sid):
        observer = CommitOnNode1(galera, cluster_db, sid, times=1)
        _observe(b, observer)
        appended = await b.append(sid, [user_msg("from b")], None, None)
        assert observer.commits == [False, True]  # refused at COMMIT, then committed
        assert appended.last_seq == 2
        assert [m.seq for m in appended.messages] == [2]
        assert await _texts(a, sid) == ["q1", "from b"]
        assert await _texts(b, sid) == ["q1", "from b"]


async def test_three_certification_failures_are_aborted_and_write_nothing(
    galera: GaleraCluster, cluster_db: str
) -> None:
    async with _two_nodes(galera, cluster_db) as (a, b, sid):
        observer = CommitOnNode1(galera, cluster_db, sid, times=3)
        _observe(b, observer)
        with pytest.raises(Aborted) as caught:
            await b.append(sid, [user_msg("never stored")], None, None)
        assert caught.value.reason == ErrorReason.CONCURRENT_MODIFICATION
        assert observer.commits == [False, False, False]
        assert await _texts(a, sid) == ["q1"]
        # The session is not stuck: the next append commits.
        assert (await b.append(sid, [user_msg("q2")], None, None)).last_seq == 2
        assert await _texts(a, sid) == ["q1", "q2"]


async def _until(condition: Callable[[], bool], what: str) -> None:
    """Wait (polling, bounded) until ``condition`` holds."""
    deadline = time.monotonic() + WAIT_S
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting until {what}")
        await asyncio.sleep(0.01)


async def test_a_conflict_inside_the_batch_script_is_planned_again(
    galera: GaleraCluster, cluster_db: str
) -> None:
    async with _two_nodes(galera, cluster_db) as (a, b, sid):
        observer = CommitOnNode1(galera, cluster_db, sid, times=0)
        _observe(b, observer)
        blocker = galera.connect(2, cluster_db)
        watcher = galera.connect(2, cluster_db)
        try:
            with blocker.cursor() as cur:  # a gap lock where seq 2 goes
                cur.execute("BEGIN")
                cur.execute(
                    "SELECT seq FROM messages WHERE session_id = %s AND seq >= 2 FOR UPDATE",
                    (sid,),
                )

            def at_insert() -> int:
                """Threads running an INSERT into messages (B's, held by the gap lock)."""
                with watcher.cursor() as cur:
                    cur.execute(
                        "SELECT COUNT(*) FROM information_schema.PROCESSLIST "
                        "WHERE INFO LIKE 'INSERT INTO messages%%'"
                    )
                    (n,) = cur.fetchone() or (0,)
                return int(n)

            append = asyncio.create_task(b.append(sid, [user_msg("from b")], None, None))
            await _until(lambda: at_insert() > 0, "B's script waits at its INSERT")
            _commit_on_node1(galera, cluster_db, sid)
            await _until(lambda: ("INSERT", False) in observer.operations, "B is aborted")
            blocker.rollback()
            appended = await append
        finally:
            blocker.close()
            watcher.close()
        # The script failed (aborted), then the batch planned again committed, its COMMIT
        # a round trip of its own on a cluster node.
        assert observer.operations == [("INSERT", False), ("INSERT", True), ("COMMIT", True)]
        assert appended.last_seq == 2
        assert [m.seq for m in appended.messages] == [2]
        assert await _texts(a, sid) == ["q1", "from b"]
        assert await _texts(b, sid) == ["q1", "from b"]
