"""``serve --workers 1`` against ``--workers 2`` on MariaDB, in the same run.

    .venv/bin/python -m bench.workers [--backend mysql] [--streams 8] [--messages 400]
                                      [--rounds 2] [--json PATH]

Each round starts a server with 1 worker, then one with 2 (then the other order),
and drives it with ``--streams`` StreamMessages calls, each on its own channel
(so the kernel spreads them over the workers) and its own session, one message
per request, 16 unacknowledged at most. It reports throughput (messages/s) and
the CPU per message of the server (supervisor and workers, read from /proc), of
this client and of the database server when it runs here.

On a 2-core machine the client and MariaDB share the two cores with the workers:
the second worker can only use what they leave, so the throughput gain there is
a floor of what separate machines would show, not a forecast.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import grpc
from tests.support.server import ServerProcess

from bench.common import (
    CHANNEL_OPTIONS,
    backend_database,
    create_session,
    log,
    one_message_requests,
    stream_appends,
)
from bench.host_load import cpu_seconds
from bench.unary_floor import pid_of
from bench.workload import Conversation
from ctxwarden.v1 import context_service_pb2_grpc as pb_grpc

WINDOW = 16


def _server_pids(server: ServerProcess) -> list[int]:
    assert server.proc is not None
    pid = server.proc.pid
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    return [pid, *map(int, children)]


def _drive(
    server: ServerProcess, streams: int, messages: int, db_pid: int | None
) -> dict[str, Any]:
    channels = [
        grpc.insecure_channel(server.target, options=CHANNEL_OPTIONS) for _ in range(streams)
    ]
    stubs = [pb_grpc.ContextServiceStub(c) for c in channels]
    work = []
    for i, stub in enumerate(stubs):
        sid = create_session(stub, f"workers-{i}")
        work.append(one_message_requests(sid, list(Conversation(100 + i).alternating(messages))))
    barrier = threading.Barrier(streams + 1)
    results: list[tuple[list[int], int, int]] = [([], 0, 0)] * streams

    def one(i: int) -> None:
        results[i] = stream_appends(stubs[i], work[i], WINDOW, barrier)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(streams)]
    for t in threads:
        t.start()
    pids = _server_pids(server)
    before = {p: cpu_seconds(p) for p in pids}
    db_before = cpu_seconds(db_pid) if db_pid else 0.0
    client_before = time.process_time()
    t0 = time.perf_counter()
    barrier.wait()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    server_cpu = sum(cpu_seconds(p) - before[p] for p in pids)
    total = streams * messages
    for c in channels:
        c.close()
    lat = sorted(x for r in results for x in r[0])
    return {
        "messages": total,
        "seconds": wall,
        "messages_per_s": total / wall,
        "server_cpu_ms_per_message": server_cpu / total * 1e3,
        "client_cpu_ms_per_message": (time.process_time() - client_before) / total * 1e3,
        "database_cpu_ms_per_message": (cpu_seconds(db_pid) - db_before) / total * 1e3
        if db_pid
        else None,
        "ack_p50_ms": statistics.median(lat) / 1e6,
        "ack_p99_ms": lat[int(len(lat) * 0.99) - 1] / 1e6,
    }


def run(backend: str, streams: int, messages: int, rounds: int, workdir: Path) -> dict[str, Any]:
    db_pid = pid_of("mariadbd") if backend == "mysql" else None
    runs: dict[int, list[dict[str, Any]]] = {1: [], 2: []}
    with backend_database(backend, workdir) as (url, info):
        for r in range(rounds):
            for workers in (1, 2) if r % 2 == 0 else (2, 1):
                log(f"{backend}: round {r + 1}/{rounds}, {workers} worker(s)")
                server = ServerProcess(url, workdir, ["--workers", str(workers)])
                server.start(port=0)
                try:
                    _drive(server, 2, 50, None)  # warm up every worker's caches and pool
                    runs[workers].append(_drive(server, streams, messages, db_pid))
                finally:
                    server.stop()
    best = {w: max(rs, key=lambda x: x["messages_per_s"]) for w, rs in runs.items()}
    return {"backend": backend, "database": info, "runs": runs, "best": best}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", choices=("mysql", "postgres"), default="mysql")
    parser.add_argument("--streams", type=int, default=8)
    parser.add_argument("--messages", type=int, default=400, help="per stream")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--json", type=Path, help="also write the result here")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="ctxw-workers-") as tmp:
        result = run(args.backend, args.streams, args.messages, args.rounds, Path(tmp))
    for workers, runs in result["runs"].items():
        for x in runs:
            db = x["database_cpu_ms_per_message"]
            print(
                f"{args.backend} workers={workers}: {x['messages_per_s']:7.0f} msg/s; CPU per "
                f"message: server {x['server_cpu_ms_per_message']:.3f} ms, client "
                f"{x['client_cpu_ms_per_message']:.3f} ms"
                + (f", database {db:.3f} ms" if db is not None else "")
                + f"; ack p50 {x['ack_p50_ms']:.1f} ms p99 {x['ack_p99_ms']:.1f} ms"
            )
    gain = result["best"][2]["messages_per_s"] / result["best"][1]["messages_per_s"]
    print(f"best of each: 2 workers / 1 worker throughput = {gain:.2f}x")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
