"""A unary append against its floor, alternated block by block, with CPU per call.

    .venv/bin/python -m bench.unary_floor [--backend mysql] [--blocks 10] [--block 200]

The floor under a unary ``AppendMessages`` (see bench/baselines.py) is a bare
gRPC round trip on the same stack plus one durable single-row commit. bench.run
measures the three one after the other; on a machine whose speed drifts
(shared or throttled CPUs) that skews the ratio. Here they alternate in blocks
(append, round trip, commit, then the next block in the other order), so a drift
hits all three alike, and the issue's figure is the ratio of medians:
append / (round trip + commit), target <= 1.5x.

Beside the latencies it reads the CPU time (``/proc``) each side spent per call:
the ctxwarden server against the bare server, the client, and the database
server when it runs on this machine. The difference between the two servers'
CPU is what ctxwarden's own work costs per append.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
from tests.support.server import ServerProcess

from bench.baselines import METHOD, _mysql_commits, _sqlite_commits, bare_server
from bench.common import CHANNEL_OPTIONS, TIMEOUT, backend_database, create_session, log
from bench.host_load import HostLoad, cpu_seconds
from bench.profile import recording, summary
from bench.workload import Conversation
from ctxwarden.v1 import context_service_pb2 as pb
from ctxwarden.v1 import context_service_pb2_grpc as pb_grpc


def pid_of(pattern: str) -> int | None:
    out = subprocess.run(["pgrep", "-f", pattern], capture_output=True, text=True, check=False)
    pids = [int(p) for p in out.stdout.split()]
    return pids[0] if pids else None


@contextlib.contextmanager
def _cpu(pids: dict[str, int | None], into: dict[str, float]) -> Iterator[None]:
    """Adds the CPU seconds each process (and this one, "client") spent inside."""
    before = {k: cpu_seconds(p) for k, p in pids.items() if p}
    client = time.process_time()
    yield
    for k, p in pids.items():
        if p:
            into[k] = into.get(k, 0.0) + cpu_seconds(p) - before[k]
    into["client"] = into.get("client", 0.0) + time.process_time() - client


def _timed_calls(fn: Callable[[], Any], n: int) -> list[int]:
    lat = []
    for _ in range(n):
        s = time.perf_counter_ns()
        fn()
        lat.append(time.perf_counter_ns() - s)
    return lat


def run(
    backend: str, blocks: int, block: int, workdir: Path, profile: Path | None = None
) -> dict[str, Any]:
    db_pid = pid_of("mariadbd") if backend == "mysql" else None
    lat: dict[str, list[int]] = {"append": [], "round_trip": [], "commit": []}
    cpu: dict[str, dict[str, float]] = {k: {} for k in lat}
    measured: list[int | None] = [db_pid]
    load = HostLoad(measured)
    with backend_database(backend, workdir) as (url, _info):
        server = ServerProcess(url, workdir)
        server.start()
        try:
            assert server.proc is not None
            channel = grpc.insecure_channel(server.target, options=CHANNEL_OPTIONS)
            stub = pb_grpc.ContextServiceStub(channel)
            sid = create_session(stub, "unary")
            messages = iter(Conversation(11).alternating(blocks * block + 50))
            requests = (pb.AppendMessagesRequest(session_id=sid, messages=[m]) for m in messages)
            payload_bytes = 830
            with (
                bare_server() as target,
                grpc.insecure_channel(target, options=CHANNEL_OPTIONS) as bare,
            ):
                bare_pid = pid_of("bench.baselines serve")
                measured.extend((server.proc.pid, bare_pid))
                echo: grpc.UnaryUnaryMultiCallable[bytes, bytes] = bare.unary_unary(METHOD)
                payload = os.urandom(payload_bytes)
                for _ in range(50):  # warm both servers
                    stub.AppendMessages(next(requests), timeout=TIMEOUT)
                    echo(payload, timeout=TIMEOUT)

                def appends() -> list[int]:
                    return _timed_calls(
                        lambda: stub.AppendMessages(next(requests), timeout=TIMEOUT), block
                    )

                def round_trips() -> list[int]:
                    return _timed_calls(lambda: echo(payload, timeout=TIMEOUT), block)

                def commits() -> list[int]:
                    if backend == "mysql":
                        return _mysql_commits(url, block, payload)
                    return _sqlite_commits(workdir / f"commit-{time.time_ns()}.db", block, payload)

                kinds: list[tuple[str, Callable[[], list[int]], dict[str, int | None]]] = [
                    ("append", appends, {"server": server.proc.pid, "database": db_pid}),
                    ("round_trip", round_trips, {"server": bare_pid}),
                    ("commit", commits, {"database": db_pid}),
                ]
                for b in range(blocks):
                    log(f"{backend}: block {b + 1}/{blocks}")
                    for kind, fn, pids in kinds if b % 2 == 0 else kinds[::-1]:
                        sampled = profile is not None and kind == "append"
                        pid, raw = server.proc.pid, workdir / f"profile-{b}.txt"
                        with (
                            recording(pid, raw) if sampled else contextlib.nullcontext(),
                            _cpu(pids, cpu[kind]),
                            load,
                        ):
                            lat[kind] += fn()
        finally:
            server.stop()
    if profile is not None:
        profile.write_text("".join(p.read_text() for p in sorted(workdir.glob("profile-*.txt"))))
    n = blocks * block
    med = {k: statistics.median(v) / 1e6 for k, v in lat.items()}
    floor = med["round_trip"] + med["commit"]
    return {
        "backend": backend,
        "calls_each": n,
        "median_ms": med,
        "floor_ms": floor,
        "ratio": med["append"] / floor,
        "cpu_ms_per_call": {k: {who: s / n * 1e3 for who, s in v.items()} for k, v in cpu.items()},
        "other_load_cores": load.cores,
        "other_load": load.describe(),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", choices=("sqlite", "mysql"), default="mysql")
    parser.add_argument("--blocks", type=int, default=10)
    parser.add_argument("--block", type=int, default=200, help="calls of each kind per block")
    parser.add_argument("--json", type=Path, help="also write the result here")
    parser.add_argument(
        "--profile",
        type=Path,
        help="sample the server during the appends with py-spy into this raw file and print "
        "where its loop thread spends its CPU, by part (the profile extra; costs a little "
        "CPU: the unprofiled run's ratio is the figure)",
    )
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="ctxw-unary-") as tmp:
        result = run(args.backend, args.blocks, args.block, Path(tmp), args.profile)
    med, cpu = result["median_ms"], result["cpu_ms_per_call"]
    print(
        f"{args.backend}: unary append {med['append']:.3f} ms; floor {result['floor_ms']:.3f} ms "
        f"(bare round trip {med['round_trip']:.3f} + commit {med['commit']:.3f}); "
        f"ratio {result['ratio']:.2f}x (target <= 1.5x); {result['other_load']}"
    )
    print(
        "CPU per call (ms): "
        + "; ".join(
            f"{kind}: " + ", ".join(f"{who} {ms:.3f}" for who, ms in sorted(per.items()))
            for kind, per in cpu.items()
        )
    )
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    if args.profile:
        print(summary([args.profile]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
