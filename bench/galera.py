"""Append throughput through a 3-node Galera cluster, against one MariaDB server.

Usage: .venv/bin/python -m bench.galera [--seconds 20] [--workers 6] [--sessions 12]

Starts a private cluster (scripts/galera.sh) and a private stand-alone MariaDB server,
then for each topology three ``ctxwarden serve`` replicas and the load of
tests/cluster/load.py (every request with a request_id, retried until acknowledged):

- ``single``: the three replicas on the stand-alone server (no replication);
- ``one-node``: the three replicas on node 1 of the cluster (one writer node, the
  others replicate);
- ``three-nodes``: replica i on node i;

each with ``affinity`` (every session written through one replica only, as when calls
are routed by session_id) or ``shared`` (every session written through all three).

Every server commits with ``innodb_flush_log_at_trx_commit=2``. Prints appends/s,
latency percentiles (retries included) and what the retried attempts answered.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import grpc
from tests.cluster.load import Load
from tests.support.galera import GaleraCluster
from tests.support.mariadb import PrivateMariaDB
from tests.support.server import ServerProcess, migrate_database

from ctxwarden.v1 import context_service_pb2 as pb
from ctxwarden.v1 import context_service_pb2_grpc as pb_grpc


def _measure(
    urls: list[str], *, affinity: bool, args: argparse.Namespace, log_dir: Path
) -> dict[str, Any]:
    procs = [ServerProcess(url, log_dir, ["--log-level", "ERROR"]) for url in urls]
    with ThreadPoolExecutor(len(procs)) as pool:
        try:
            list(pool.map(lambda p: p.start(), procs))
            targets = [p.target for p in procs]
            sessions = [f"bench-{uuid.uuid4().hex[:8]}-{i}" for i in range(args.sessions)]
            with grpc.insecure_channel(targets[0]) as ch:
                stub = pb_grpc.ContextServiceStub(ch)
                for sid in sessions:
                    stub.CreateSession(pb.CreateSessionRequest(session_id=sid), timeout=30)
            load = Load(targets, sessions, args.workers, affinity=affinity)
            load.start()
            load.wait_for(args.workers * 5)  # warm: every replica has its sessions hot
            first, began = len(load.acks), time.monotonic()
            time.sleep(args.seconds)  # the measurement window itself, not synchronisation
            done, ended = len(load.acks), time.monotonic()
            load.stop()
        finally:
            list(pool.map(lambda p: p.stop(), procs))
    assert not load.failures, load.failures
    window = sorted(a.seconds for a in load.acks[first:done])
    return {
        "appends_per_s": round((done - first) / (ended - began), 1),
        "p50_ms": round(statistics.median(window) * 1000, 1),
        "p99_ms": round(window[int(len(window) * 0.99) - 1] * 1000, 1),
        "retried": dict(load.errors),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--workers", type=int, default=6)
    parser.add_argument("--sessions", type=int, default=12)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="ctxw-bench-galera-"))
    cluster = GaleraCluster(Path(tempfile.mkdtemp(prefix="ctxw-galera-")))
    single = PrivateMariaDB(Path(tempfile.mkdtemp(prefix="ctxw-mariadb-")))
    results: dict[str, dict[str, Any]] = {}
    try:
        started = time.monotonic()
        cluster.start()
        cluster_start = time.monotonic() - started
        single.start()
        single.execute("SET GLOBAL innodb_flush_log_at_trx_commit = 2")
        single_url = single.create_database()
        migrate_database(single_url)
        db = cluster.create_database()
        migrate_database(cluster.url(1, db))
        nodes = [cluster.url(n, db) for n in (1, 2, 3)]
        topologies: dict[str, tuple[list[str], bool]] = {
            "single/affinity": ([single_url] * 3, True),
            "single/shared": ([single_url] * 3, False),
            "one-node/affinity": ([nodes[0]] * 3, True),
            "three-nodes/affinity": (nodes, True),
            "three-nodes/shared": (nodes, False),
        }
        for name, (urls, affinity) in topologies.items():
            results[name] = _measure(urls, affinity=affinity, args=args, log_dir=work)
            print(name, json.dumps(results[name]), flush=True)
        results["cluster_start_s"] = {"seconds": round(cluster_start, 1)}
    finally:
        single.close()
        cluster.close()
        shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
