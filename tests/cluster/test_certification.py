"""A write that loses Galera's certification at COMMIT is planned again, never reported as
a database outage.

On a multi-primary cluster two nodes may both accept a transaction on the same session row;
the one ordered second fails certification and its COMMIT answers 1213 (deadlock). The
transaction is known to be rolled back, so the append is a lost compare-and-set: the
service reloads the session and plans again (three tries), then answers ABORTED
CONCURRENT_MODIFICATION. Before, a conflict at COMMIT was taken for a lost connection
(UNAVAILABLE, "outcome unknown").

The conflict is made deterministic: replica B (node 2) has run its UPDATE and INSERT
when, from the group committer's statement observer, another writer commits a change of
the same session row on node 1. B's COMMIT is then ordered after it and fails
certification.
"""

from __future__ import annotations

import pytest

from ctxwarden.core.errors import Aborted
from ctxwarden.core.reasons import ErrorReason
from ctxwarden.service.manager import SessionManager
from tests.support.galera import GaleraCluster
from tests.support.inproc import new_session, replica, user_msg

pytestmark = pytest.mark.galera


class CommitOnNode1:
    """A statement observer for B's group committer: after B's INSERT, commit a change of
    the session row on node 1 (the first ``times`` appends only); records every COMMIT."""

    def __init__(self, galera: GaleraCluster, database: str, session_id: str, times: int):
        self.galera, self.database, self.session_id = galera, database, session_id
        self.remaining = times
        self.commits: list[bool] = []

    def __call__(self, operation: str, seconds: float, ok: bool) -> None:
        del seconds
        if operation == "COMMIT":
            self.commits.append(ok)
        if operation == "INSERT" and ok and self.remaining > 0:
            self.remaining -= 1
            conn = self.galera.connect(1, self.database)
            try:
                with conn.cursor() as cur:
                    cur.execute(
                        "UPDATE sessions SET version = version + 1 WHERE session_id = %s",
                        (self.session_id,),
                    )
                    assert cur.rowcount == 1
            finally:
                conn.close()


def _observe(manager: SessionManager, observer: CommitOnNode1) -> None:
    manager.store.committer._observe = observer


async def _texts(m: SessionManager, sid: str) -> list[str]:
    return [msg.text for msg in (await m.build_model_input(sid, 0)).messages]


async def test_a_certification_failure_at_commit_is_planned_again(
    galera: GaleraCluster, cluster_db: str
) -> None:
    async with (
        replica(galera.url(1, cluster_db)) as a,
        replica(galera.url(2, cluster_db), append_writers=1) as b,
    ):
        sid = await new_session(a)
        await a.append(sid, [user_msg("q1")], None, None)
        assert await _texts(b, sid) == ["q1"]  # hot on B
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
    async with (
        replica(galera.url(1, cluster_db)) as a,
        replica(galera.url(2, cluster_db), append_writers=1) as b,
    ):
        sid = await new_session(a)
        await a.append(sid, [user_msg("q1")], None, None)
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
