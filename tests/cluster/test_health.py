"""The health of a replica follows its Galera node's state, not only whether it answers.

A desynced node (``wsrep_desync``, as for a backup), like a joining or non-primary one,
still answers ``SELECT 1``; the replica on it must report NOT_SERVING all the same, so a
load balancer sends the calls elsewhere, and SERVING again once the node is Synced.
"""

from __future__ import annotations

import pytest

from tests.cluster.health import NOT_SERVING, SERVING, wait_health
from tests.support.galera import GaleraCluster
from tests.support.server import ServerProcess

pytestmark = pytest.mark.galera


def test_a_desynced_node_makes_its_replica_not_serving(
    galera: GaleraCluster, replicas: list[ServerProcess]
) -> None:
    target = replicas[1].target  # on node 2
    wait_health(target, SERVING, timeout=10)
    galera.execute(2, "SET GLOBAL wsrep_desync = ON")
    try:
        wait_health(target, NOT_SERVING, timeout=10)
        assert galera.status()[2].startswith("Donor/Desynced")
        assert galera.execute(2, "SELECT 1") == [(1,)]  # the node still answers
        wait_health(replicas[0].target, SERVING, timeout=10)  # the others are unaffected
    finally:
        galera.execute(2, "SET GLOBAL wsrep_desync = OFF")
    wait_health(target, SERVING, timeout=10)
    log = replicas[1].log_text()
    assert "Galera node not ready: wsrep_local_state 2 (Donor/Desynced)" in log
    assert "database reachable again" in log
