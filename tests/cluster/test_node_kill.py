"""Three replicas write through three Galera nodes to the same sessions while one node is
killed (SIGKILL) and rejoins: nothing acknowledged is lost or stored twice, seqs stay
dense, and the health of the replica on the killed node follows its node.

Every session is written through all three replicas at once (no session affinity), the
worst case: replicas keep hot copies, a copy goes stale whenever another replica appends,
and the compare-and-set of the session row (plus Galera's certification of concurrent
commits on different nodes) turns that into a reload and a new plan, or ABORTED.
"""

from __future__ import annotations

import time
import uuid

import grpc
import pytest

from ctxwarden.v1 import context_service_pb2 as pb
from ctxwarden.v1 import context_service_pb2_grpc as pb_grpc
from tests.cluster.health import NOT_SERVING, SERVING, health, wait_health
from tests.cluster.load import Load
from tests.support.galera import GaleraCluster
from tests.support.server import ServerProcess

pytestmark = pytest.mark.galera

SESSIONS = 4
"""About 100 appends a second each, six writers through three replicas on every session.
Before stale copies caught up from their appends, one replica could starve here: each of
its tries restored the whole session, and the others appended again meanwhile
(docs/operations.md, Galera)."""
WORKERS = 6


def _history(target: str, sid: str) -> list[tuple[int, str]]:
    out: list[tuple[int, str]] = []
    token = ""
    with grpc.insecure_channel(target) as ch:
        stub = pb_grpc.ContextServiceStub(ch)
        while True:
            page = stub.ListMessages(
                pb.ListMessagesRequest(session_id=sid, page_token=token, page_size=1000),
                timeout=30,
            )
            out += [(m.seq, m.message_id) for m in page.messages]
            token = page.next_page_token
            if not token:
                return out


def test_a_node_killed_under_load_loses_and_duplicates_nothing(
    galera: GaleraCluster,
    cluster_db: str,
    replicas: list[ServerProcess],
) -> None:
    targets = [r.target for r in replicas]
    sessions = [f"galera-{uuid.uuid4().hex[:8]}-{i}" for i in range(SESSIONS)]
    with grpc.insecure_channel(targets[0]) as ch:
        for sid in sessions:
            pb_grpc.ContextServiceStub(ch).CreateSession(
                pb.CreateSessionRequest(session_id=sid), timeout=30
            )
    for t in targets:
        assert health(t) == SERVING

    load = Load(targets, sessions, WORKERS)
    load.start()
    try:
        load.wait_for(60)
        steady = len(load.acks) / (time.monotonic() - load.started)

        killed_at = time.monotonic()
        galera.kill(3)
        wait_health(targets[2], NOT_SERVING, timeout=10)
        detected = time.monotonic() - killed_at
        before = len(load.acks)
        load.wait_for(before + 40)  # the two survivors carry the load
        degraded_from = time.monotonic()
        galera.start(3)  # rejoins (IST), returns once node 3 is Synced
        rejoin = time.monotonic() - degraded_from
        degraded = (len(load.acks) - before) / (time.monotonic() - killed_at)
        serving = wait_health(targets[2], SERVING, timeout=10)
        assert galera.status()[3] == "Synced 3"
        load.wait_for(load.acked_by(2) + 10, replica=2)  # replica 3 writes again
    finally:
        ran = load.stop()
    assert not load.failures, load.failures

    figures = {
        "acknowledged": len(load.acks),
        "seconds": round(ran, 1),
        "steady_appends_per_s": round(steady, 1),
        "degraded_appends_per_s": round(degraded, 1),
        "health_not_serving_after_s": round(detected, 2),
        "node_rejoin_s": round(rejoin, 1),
        "health_serving_after_rejoin_s": round(serving, 2),
        "retried": dict(load.errors),
    }
    print("cluster figures:", figures)  # shown with -s; the operations guide quotes them

    assert detected < 5.0  # a few health intervals after the node died
    # Every retry was one the client may make: failover or a lost compare-and-set.
    assert set(load.errors) <= {
        "UNAVAILABLE",
        "DEADLINE_EXCEEDED",
        "ABORTED CONCURRENT_MODIFICATION",
    }, load.errors

    acked: dict[str, dict[str, int]] = {sid: {} for sid in sessions}
    for a in load.acks:
        assert a.message_id not in acked[a.session_id], f"{a.message_id} acknowledged twice"
        acked[a.session_id][a.message_id] = a.seq
    for sid in sessions:
        for target in (targets[0], targets[2]):  # a survivor and the node that rejoined
            history = _history(target, sid)
            assert [seq for seq, _ in history] == list(range(1, len(history) + 1))  # dense
            stored = dict((mid, seq) for seq, mid in history)
            assert len(stored) == len(history)  # no message stored twice
            assert stored == acked[sid]  # each acknowledged message, at its seq; no other

    # The three nodes hold the same rows (the rejoined one caught up).
    ids = ", ".join(f"'{sid}'" for sid in sessions)
    count = (
        "SELECT COUNT(*), COUNT(DISTINCT session_id, message_id), COALESCE(SUM(seq), 0) "
        f"FROM messages WHERE session_id IN ({ids})"
    )
    rows = {n: galera.execute(n, count, cluster_db)[0] for n in (1, 2, 3)}
    assert rows[1] == rows[2] == rows[3], rows
    assert rows[1][0] == rows[1][1] == len(load.acks)
