"""When a Galera node may serve (store/cluster.py): what clustercheck requires."""

from __future__ import annotations

from ctxwarden.store.cluster import not_ready_reason

SYNCED = {
    "wsrep_ready": "ON",
    "wsrep_cluster_status": "Primary",
    "wsrep_local_state": "4",
    "wsrep_local_state_comment": "Synced",
}


def test_a_synced_primary_node_may_serve() -> None:
    assert not_ready_reason(SYNCED) is None


def test_a_joining_donor_or_non_primary_node_may_not() -> None:
    joining = {**SYNCED, "wsrep_local_state": "1", "wsrep_local_state_comment": "Joining"}
    assert not_ready_reason(joining) == (
        "Galera node not ready: wsrep_local_state 1 (Joining), "
        "wsrep_cluster_status Primary, wsrep_ready ON"
    )
    donor = {**SYNCED, "wsrep_local_state": "2", "wsrep_local_state_comment": "Donor/Desynced"}
    assert "Donor/Desynced" in (not_ready_reason(donor) or "")
    alone = {**SYNCED, "wsrep_cluster_status": "non-Primary", "wsrep_ready": "OFF"}
    assert "non-Primary" in (not_ready_reason(alone) or "")
    assert not_ready_reason({}) == (
        "Galera node not ready: wsrep_local_state ? (unknown), "
        "wsrep_cluster_status ?, wsrep_ready ?"
    )
