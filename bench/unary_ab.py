"""Two versions of the server side by side: unary appends, alternated block by block.

    git worktree add /tmp/ctxw-base <commit>
    .venv/bin/python -m bench.unary_ab --base /tmp/ctxw-base [--backend mysql] [--blocks 16]

A change meant to make the append cheaper is judged against the code before it,
on the same machine at the same time: A is the server from the checkout at
``--base`` (its ``server`` directory first on ``PYTHONPATH``), B this checkout's.
Both run on one fresh database, each appends to a session of its own, and their
blocks alternate (A B, then B A), so a drift in the machine's speed hits both
alike. It prints each side's median latency and server CPU per call (``/proc``)
and the ratios B/A. Serving every call from one server then the other (blocks of
one) is not representative: each switch leaves a server's caches cold, which
doubled both servers' CPU per call here.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
from tests.support.server import ServerProcess

from bench.common import CHANNEL_OPTIONS, TIMEOUT, backend_database, create_session, log
from bench.host_load import HostLoad, cpu_seconds
from bench.unary_floor import pid_of
from bench.workload import Conversation
from ctxwarden.v1 import context_service_pb2 as pb
from ctxwarden.v1 import context_service_pb2_grpc as pb_grpc

WARM_CALLS = 100


def start_server(url: str, workdir: Path, server_path: Path | None) -> ServerProcess:
    """A server on ``url``; from ``server_path`` (a checkout's ``server``) when given."""
    before = os.environ.get("PYTHONPATH")
    if server_path is not None:
        os.environ["PYTHONPATH"] = str(server_path)
    else:
        os.environ.pop("PYTHONPATH", None)
    try:
        server = ServerProcess(url, workdir)
        server.start()
        return server
    finally:
        if before is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = before


def _requests(stub: pb_grpc.ContextServiceStub, name: str, n: int) -> Iterator[Any]:
    sid = create_session(stub, f"ab-{name}")
    messages = Conversation(11).alternating(n + WARM_CALLS)
    return (pb.AppendMessagesRequest(session_id=sid, messages=[m]) for m in messages)


def run(base: Path, backend: str, blocks: int, block: int, workdir: Path) -> dict[str, Any]:
    lat: dict[str, list[int]] = {"A": [], "B": []}
    cpu = {"A": 0.0, "B": 0.0}
    with backend_database(backend, workdir) as (url, _info):
        servers = {
            "A": start_server(url, workdir, base / "server"),
            "B": start_server(url, workdir, None),
        }
        try:
            calls = {}
            for name, server in servers.items():
                channel = grpc.insecure_channel(server.target, options=CHANNEL_OPTIONS)
                stub = pb_grpc.ContextServiceStub(channel)
                requests = _requests(stub, name, blocks * block)
                for _ in range(WARM_CALLS):
                    stub.AppendMessages(next(requests), timeout=TIMEOUT)
                calls[name] = (stub, requests)
            database = pid_of("mariadbd") if backend == "mysql" else None
            load = HostLoad([database, *(s.proc.pid for s in servers.values() if s.proc)])
            for b in range(blocks):
                log(f"{backend}: block {b + 1}/{blocks}")
                for name in ("A", "B") if b % 2 == 0 else ("B", "A"):
                    stub, requests = calls[name]
                    proc = servers[name].proc
                    assert proc is not None
                    before = cpu_seconds(proc.pid)
                    with load:
                        for _ in range(block):
                            start = time.perf_counter_ns()
                            stub.AppendMessages(next(requests), timeout=TIMEOUT)
                            lat[name].append(time.perf_counter_ns() - start)
                    cpu[name] += cpu_seconds(proc.pid) - before
        finally:
            for server in servers.values():
                server.stop()
    n = blocks * block
    median = {k: statistics.median(v) / 1e6 for k, v in lat.items()}
    cpu_ms = {k: v / n * 1e3 for k, v in cpu.items()}
    return {
        "backend": backend,
        "base": str(base),
        "calls_each": n,
        "median_ms": median,
        "server_cpu_ms_per_call": cpu_ms,
        "latency_b_over_a": median["B"] / median["A"],
        "cpu_b_over_a": cpu_ms["B"] / cpu_ms["A"] if cpu_ms["A"] else 0.0,
        "other_load": load.describe(),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", type=Path, required=True, help="a checkout of version A")
    parser.add_argument("--backend", choices=("sqlite", "mysql"), default="mysql")
    parser.add_argument("--blocks", type=int, default=16)
    parser.add_argument("--block", type=int, default=250, help="calls of each side per block")
    parser.add_argument("--json", type=Path, help="also write the result here")
    args = parser.parse_args(argv)
    if not (args.base / "server" / "ctxwarden").is_dir():
        parser.error(f"--base {args.base}: not a ctxwarden checkout (no server/ctxwarden)")
    with tempfile.TemporaryDirectory(prefix="ctxw-ab-") as tmp:
        result = run(args.base.resolve(), args.backend, args.blocks, args.block, Path(tmp))
    med, cpu = result["median_ms"], result["server_cpu_ms_per_call"]
    print(
        f"{args.backend}: A {med['A']:.3f} ms, server CPU {cpu['A']:.3f} ms/call; "
        f"B {med['B']:.3f} ms, {cpu['B']:.3f} ms/call; B/A latency "
        f"{result['latency_b_over_a']:.3f}, CPU {result['cpu_b_over_a']:.3f}; "
        f"{result['other_load']}"
    )
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
