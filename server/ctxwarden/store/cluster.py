"""Is this database node fit to serve? For a Galera cluster member, more than "it answers".

A Galera node that lost its quorum, or is joining and still receiving a state transfer,
accepts connections and answers ``SELECT 1`` (and ``SHOW``), yet refuses every query that
reads or writes a table (error 1047, "WSREP has not yet prepared node for application
use") or serves data that is behind the cluster. So on a MySQL-family server with
``wsrep_on`` the health probe also requires what Galera's own ``clustercheck`` requires:
``wsrep_ready`` ON, ``wsrep_cluster_status`` Primary and ``wsrep_local_state`` 4 (Synced).
A donor (state 2) counts as not ready: during an rsync or mysqldump state transfer it
blocks writes. Any other server (plain MariaDB, MySQL, SQLite, PostgreSQL) is checked
by the ping alone.
"""

from __future__ import annotations

from collections.abc import Mapping

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

SYNCED = "4"

_WSREP_ON = text("SHOW VARIABLES LIKE 'wsrep_on'")
_WSREP_STATUS = text(
    "SHOW GLOBAL STATUS WHERE Variable_name IN "
    "('wsrep_ready', 'wsrep_cluster_status', 'wsrep_local_state', 'wsrep_local_state_comment')"
)


class NodeNotReady(Exception):
    """The database answers, but as a cluster member it must not serve now."""


def not_ready_reason(status: Mapping[str, str]) -> str | None:
    """Why a Galera node with these ``wsrep_%`` status values must not serve (None: it may)."""
    ready = status.get("wsrep_ready", "")
    cluster = status.get("wsrep_cluster_status", "")
    state = status.get("wsrep_local_state", "")
    if ready.upper() == "ON" and cluster == "Primary" and state == SYNCED:
        return None
    comment = status.get("wsrep_local_state_comment", "") or "unknown"
    return (
        f"Galera node not ready: wsrep_local_state {state or '?'} ({comment}), "
        f"wsrep_cluster_status {cluster or '?'}, wsrep_ready {ready or '?'}"
    )


async def check_cluster_member(conn: AsyncConnection) -> None:
    """Raise NodeNotReady when ``conn``'s server is a Galera node that is not Synced."""
    if conn.dialect.name != "mysql":
        return
    row = (await conn.execute(_WSREP_ON)).first()
    if row is None or str(row[1]).upper() != "ON":
        return
    status = {str(k).lower(): str(v) for k, v in (await conn.execute(_WSREP_STATUS)).all()}
    reason = not_ready_reason(status)
    if reason is not None:
        raise NodeNotReady(reason)
