"""The floor under a unary append: a bare gRPC round trip and one durable commit.

A unary ``AppendMessages`` cannot be faster than a gRPC round trip on the same
stack (Python ``grpc.aio`` server in its own process, loopback) plus one
durable single-row commit on the same database with the same durability
settings. Both are measured here, in the same run as the append itself, so
the README's ratio compares like with like on whatever the machine is doing.

``python -m bench.baselines serve PORT_FILE`` is the bare server: one generic
unary method that answers every request with a fixed 64-byte reply (an append
response is about that size). Nothing else runs in it: no interceptors, no
protobuf decoding, no application code.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
from sqlalchemy.engine import make_url

from bench.common import CHANNEL_OPTIONS, Result, log, summarize

METHOD = "/bench.Bare/Echo"
REPLY = b"\x08\x01" * 32
START_TIMEOUT_S = 30.0


async def _serve(port_file: Path) -> None:
    def echo(request: bytes, context: grpc.aio.ServicerContext[bytes, bytes]) -> bytes:
        return REPLY

    handler = grpc.method_handlers_generic_handler(
        "bench.Bare", {"Echo": grpc.unary_unary_rpc_method_handler(echo)}
    )
    server = grpc.aio.server(options=CHANNEL_OPTIONS)
    server.add_generic_rpc_handlers((handler,))
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    tmp = port_file.with_suffix(".tmp")
    tmp.write_text(str(port))
    tmp.replace(port_file)
    await server.wait_for_termination()


@contextlib.contextmanager
def bare_server() -> Iterator[str]:
    """A bare gRPC server in a child process; yields its target."""
    with tempfile.TemporaryDirectory(prefix="ctxw-bare-") as tmp:
        port_file = Path(tmp) / "port"
        proc = subprocess.Popen(
            [sys.executable, "-m", "bench.baselines", "serve", str(port_file)],
            stdout=subprocess.DEVNULL,
        )
        try:
            deadline = time.monotonic() + START_TIMEOUT_S
            while not port_file.exists():
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("the bare gRPC server did not start")
                time.sleep(0.01)  # polling a child process's port file, not synchronising tests
            yield f"127.0.0.1:{port_file.read_text()}"
        finally:
            proc.terminate()
            proc.wait(timeout=10)


def grpc_round_trip(backend: str, n: int, payload_bytes: int) -> Result:
    """Median of ``n`` unary calls carrying ``payload_bytes`` to the bare server."""
    payload = os.urandom(payload_bytes)
    with bare_server() as target, grpc.insecure_channel(target, options=CHANNEL_OPTIONS) as ch:
        call: grpc.UnaryUnaryMultiCallable[bytes, bytes] = ch.unary_unary(METHOD)
        for _ in range(50):
            call(payload, timeout=10)
        lat = []
        for _ in range(n):
            s = time.perf_counter_ns()
            call(payload, timeout=10)
            lat.append(time.perf_counter_ns() - s)
    return summarize(
        backend,
        "baseline_grpc_unary",
        lat,
        note=f"bare grpc.aio server, {payload_bytes:,} B request",
        extra={"payload_bytes": payload_bytes},
    )


def _sqlite_commits(path: Path, n: int, payload: bytes) -> list[int]:
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        # The server's own durability settings (store/engine.py).
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=FULL")
        conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, body BLOB)")
        lat = []
        for _ in range(n):
            s = time.perf_counter_ns()
            conn.execute("BEGIN")
            conn.execute("INSERT INTO t (body) VALUES (?)", (payload,))
            conn.execute("COMMIT")
            lat.append(time.perf_counter_ns() - s)
        return lat
    finally:
        conn.close()


def _mysql_commits(url: str, n: int, payload: bytes) -> list[int]:
    import pymysql

    u = make_url(url)
    conn = pymysql.connect(
        host=u.host or "127.0.0.1",
        port=u.port or 3306,
        user=u.username or "root",
        password=u.password or "",
        database=u.database,
        autocommit=False,
    )
    table = f"ctxw_bench_commit_{os.getpid()}"
    try:
        with conn.cursor() as cur:
            cur.execute(
                f"CREATE TABLE {table} (id BIGINT AUTO_INCREMENT PRIMARY KEY, body BLOB) "
                "ENGINE=InnoDB"
            )
            conn.commit()
            lat = []
            for _ in range(n):
                s = time.perf_counter_ns()
                cur.execute(f"INSERT INTO {table} (body) VALUES (%s)", (payload,))
                conn.commit()
                lat.append(time.perf_counter_ns() - s)
            cur.execute(f"DROP TABLE {table}")
            conn.commit()
        return lat
    finally:
        conn.close()


def durable_commit(backend: str, url: str, workdir: Path, n: int, payload_bytes: int) -> Result:
    """Median of ``n`` single-row INSERT + COMMIT on ``backend``'s database."""
    payload = os.urandom(payload_bytes)
    if backend == "sqlite":
        lat = _sqlite_commits(workdir / "baseline.db", n, payload)
    else:
        lat = _mysql_commits(url, n, payload)
    return summarize(
        backend,
        "baseline_durable_commit",
        lat,
        note=f"1-row INSERT + COMMIT, {payload_bytes:,} B, the server's durability settings",
        extra={"payload_bytes": payload_bytes},
    )


def measure(backend: str, url: str, workdir: Path, n: int, payload_bytes: int) -> list[Result]:
    log(f"{backend}: baselines: bare gRPC round trip and one durable commit x{n}")
    return [
        grpc_round_trip(backend, n, payload_bytes),
        durable_commit(backend, url, workdir, n, payload_bytes),
    ]


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] != "serve":
        sys.exit("usage: python -m bench.baselines serve PORT_FILE")
    asyncio.run(_serve(Path(sys.argv[2])))
