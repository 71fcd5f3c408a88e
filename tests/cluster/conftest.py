"""The cluster suite: a private 3-node Galera cluster and one ctxwarden replica per node.

Collected only when ``CTXWARDEN_TEST_GALERA`` is set (CI sets it; .ci/check_backends_ran.py
fails the run when these tests did not run): the cluster needs the Debian packages
mariadb-server, galera-4 and rsync, and about 45 s to start on a loaded machine.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.support.galera import ENV, GaleraCluster
from tests.support.server import ServerProcess, migrate_database

collect_ignore_glob = [] if os.environ.get(ENV) else ["test_*.py"]

HEALTH_INTERVAL = 0.2
DB_TIMEOUT = 3.0


@pytest.fixture(scope="session")
def galera() -> Iterator[GaleraCluster]:
    # A short base path: the sockets' paths must fit in sun_path (108 bytes).
    cluster = GaleraCluster(Path(tempfile.mkdtemp(prefix="ctxw-galera-")))
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.close()


@pytest.fixture(scope="session")
def cluster_db(galera: GaleraCluster) -> str:
    """A migrated database on the cluster (created and migrated through node 1)."""
    name = galera.create_database()
    migrate_database(galera.url(1, name))
    return name


@pytest.fixture(scope="session")
def replicas(
    galera: GaleraCluster, cluster_db: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[list[ServerProcess]]:
    """``ctxwarden serve`` on each node: replicas[i] talks to node i + 1 only."""
    procs = [
        ServerProcess(
            galera.url(node, cluster_db),
            log_dir=Path(tmp_path_factory.mktemp(f"replica{node}")),
            extra_args=[
                "--health-interval",
                str(HEALTH_INTERVAL),
                "--db-timeout",
                str(DB_TIMEOUT),
                "--db-connect-timeout",
                "1",
            ],
        )
        for node in (1, 2, 3)
    ]
    # Started and stopped side by side: each takes seconds on a busy machine.
    with ThreadPoolExecutor(len(procs)) as pool:
        try:
            list(pool.map(lambda p: p.start(), procs))
            yield procs
        finally:
            list(pool.map(lambda p: p.stop(), procs))
