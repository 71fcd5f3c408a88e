"""Shared pieces of the benchmarks: result records, statistics, databases, sessions."""

from __future__ import annotations

import contextlib
import os
import secrets
import statistics
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy.engine import make_url
from tests.support.agents import percentile
from tests.support.server import (
    drop_mysql_database,
    drop_postgres_database,
    make_mysql_database,
    make_postgres_database,
    migrate_database,
)

from bench.workload import MODEL, SYSTEM_PROMPT, TOOLS
from ctxwarden.v1 import context_service_pb2 as pb
from ctxwarden.v1 import context_service_pb2_grpc as pb_grpc
from ctxwarden.v1 import message_pb2 as m
from ctxwarden.v1 import session_pb2 as ses

MYSQL_ENV = "CTXWARDEN_BENCH_MYSQL_URL"
DEFAULT_MYSQL_URL = "mysql+aiomysql://root@127.0.0.1:3306/test"
POSTGRES_ENV = "CTXWARDEN_BENCH_POSTGRES_URL"
DEFAULT_POSTGRES_URL = "postgresql+asyncpg://postgres@127.0.0.1:5432/test"
BACKENDS = ("sqlite", "mysql")
"""The default backends (and the ones the peers run on)."""
ALL_BACKENDS = (*BACKENDS, "postgres")

MAX_MESSAGE_BYTES = 64 * 1024 * 1024
CHANNEL_OPTIONS = [
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
    # Large inputs in few large HTTP/2 frames, without waiting on flow control
    # (the settings the Python client uses by default).
    ("grpc.http2.max_frame_size", 16 * 1024 * 1024 - 1),
    ("grpc.http2.lookahead_bytes", 8 * 1024 * 1024),
]
TIMEOUT = 120.0


@dataclass
class Result:
    backend: str
    metric: str
    n: int
    median_ms: float | None = None
    p99_ms: float | None = None
    min_ms: float | None = None
    max_ms: float | None = None
    throughput: float | None = None
    throughput_unit: str = ""
    note: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


def summarize(
    backend: str,
    metric: str,
    samples_ns: Sequence[int],
    *,
    count: int | None = None,
    wall_ns: int | None = None,
    unit: str = "",
    note: str = "",
    extra: dict[str, Any] | None = None,
) -> Result:
    """Latency stats of ``samples_ns``; throughput is ``count`` items over ``wall_ns``."""
    ms = sorted(s / 1e6 for s in samples_ns)
    throughput = None
    if wall_ns is not None and count is not None and wall_ns > 0:
        throughput = count / (wall_ns / 1e9)
    return Result(
        backend=backend,
        metric=metric,
        n=len(ms),
        median_ms=statistics.median(ms),
        p99_ms=percentile(ms, 99),
        min_ms=ms[0],
        max_ms=ms[-1],
        throughput=throughput,
        throughput_unit=unit,
        note=note,
        extra=extra or {},
    )


def log(msg: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# -- backends ------------------------------------------------------------------


@contextlib.contextmanager
def backend_database(name: str, workdir: Path) -> Iterator[tuple[str, dict[str, Any]]]:
    """A fresh, migrated database URL for ``name``, removed afterwards."""
    if name == "sqlite":
        url = f"sqlite:///{workdir / 'ctxwarden.db'}"
        migrate_database(url)
        yield url, {"sqlite_path": str(workdir / "ctxwarden.db")}
        return
    if name == "postgres":
        base = os.environ.get(POSTGRES_ENV, DEFAULT_POSTGRES_URL)
        db = f"ctxw_bench_{os.getpid()}_{secrets.token_hex(3)}"
        url = make_postgres_database(base, db)
        try:
            migrate_database(url)
            yield url, {"postgres_database": db, **postgres_info(base)}
        finally:
            drop_postgres_database(base, db)
        return
    base = os.environ.get(MYSQL_ENV, DEFAULT_MYSQL_URL)
    db = f"ctxw_bench_{os.getpid()}_{secrets.token_hex(3)}"
    url = make_mysql_database(base, db)
    try:
        migrate_database(url)
        yield url, {"mysql_database": db, **mysql_info(base)}
    finally:
        drop_mysql_database(base, db)


def postgres_info(base_url: str) -> dict[str, Any]:
    """Server version and the durability settings that dominate append latency."""
    import psycopg

    url = make_url(base_url)
    with psycopg.connect(
        host=url.host or "127.0.0.1",
        port=url.port or 5432,
        user=url.username or "postgres",
        password=url.password or None,
        dbname=url.database or "postgres",
    ) as conn:
        names = ("server_version", "fsync", "synchronous_commit", "wal_sync_method")
        return {f"postgres_{n}": conn.execute(f"SHOW {n}").fetchone()[0] for n in names}  # type: ignore[index]


def mysql_info(base_url: str) -> dict[str, Any]:
    """Server version and the durability settings that dominate append latency."""
    import pymysql

    url = make_url(base_url)
    conn = pymysql.connect(
        host=url.host or "127.0.0.1",
        port=url.port or 3306,
        user=url.username or "root",
        password=url.password or "",
    )
    try:
        with conn.cursor() as cur:
            cur.execute(
                "SELECT VERSION(), @@innodb_flush_log_at_trx_commit, @@sync_binlog, @@log_bin"
            )
            row = cur.fetchone()
    finally:
        conn.close()
    assert row is not None
    return {
        "mysql_version": row[0],
        "innodb_flush_log_at_trx_commit": row[1],
        "sync_binlog": row[2],
        "log_bin": row[3],
    }


# -- helpers -------------------------------------------------------------------


def create_session(stub: pb_grpc.ContextServiceStub, kind: str, tokenizer: str = "") -> str:
    """A benchmark session (the workload's system prompt, tools and model);
    ``tokenizer`` sets policy.tokenizer."""
    session_id = f"bench-{kind}-{secrets.token_hex(4)}"
    stub.CreateSession(
        pb.CreateSessionRequest(
            session_id=session_id,
            session=ses.Session(
                user_id="bench",
                project_id="ctxwarden-bench",
                title=f"benchmark {kind}",
                system_prompt=SYSTEM_PROMPT,
                tools=TOOLS,
                model=MODEL,
                policy=ses.ContextPolicy(tokenizer=tokenizer),
            ),
        ),
        timeout=TIMEOUT,
    )
    return session_id


def run_meta(started: float, quick: bool, seed: int, config: dict[str, Any]) -> dict[str, Any]:
    """What every benchmark's JSON records about the run and the machine."""
    import platform

    import grpc

    return {
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(started)),
        "elapsed_s": time.time() - started,
        "quick": quick,
        "seed": seed,
        "config": config,
        "model": MODEL,
        "python": sys.version.split()[0],
        "grpc": grpc.__version__,
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
    }


# -- driving a server ------------------------------------------------------------

BATCH = 500
"""Messages per AppendMessages when building big sessions."""


def append_batched(
    stub: pb_grpc.ContextServiceStub, session_id: str, messages: Sequence[m.Message]
) -> list[int]:
    """Append ``messages`` in requests of BATCH; returns each request's latency (ns)."""
    out = []
    for start in range(0, len(messages), BATCH):
        req = pb.AppendMessagesRequest(
            session_id=session_id, messages=messages[start : start + BATCH]
        )
        t0 = time.perf_counter_ns()
        resp = stub.AppendMessages(req, timeout=TIMEOUT)
        out.append(time.perf_counter_ns() - t0)
        assert resp.last_seq == min(start + BATCH, len(messages)), resp.last_seq
    return out


def stream_appends(
    stub: pb_grpc.ContextServiceStub,
    requests: Sequence[pb.AppendMessagesRequest],
    window: int,
    start: threading.Barrier | None = None,
) -> tuple[list[int], int, int]:
    """Send ``requests`` over one StreamMessages call with at most ``window`` unacknowledged.

    Returns (ack latencies ns, start ns, end ns). An ack latency runs from the
    moment gRPC pulls the request from the iterator to the moment its response
    is read.
    """
    credit = threading.Semaphore(window)
    done = threading.Event()
    sent = [0] * len(requests)

    def feed() -> Iterator[pb.AppendMessagesRequest]:
        for i, req in enumerate(requests):
            while not credit.acquire(timeout=0.2):
                if done.is_set():
                    return
            sent[i] = time.perf_counter_ns()
            yield req

    if start is not None:
        start.wait()
    latencies = []
    t0 = time.perf_counter_ns()
    try:
        responses = stub.StreamMessages(feed(), timeout=TIMEOUT * 5)
        first_seq = 0
        for i, resp in enumerate(responses):
            now = time.perf_counter_ns()
            latencies.append(now - sent[i])
            credit.release()
            if i == 0:
                first_seq = resp.last_seq
            assert resp.last_seq == first_seq + i, (resp.last_seq, first_seq, i)
    finally:
        done.set()
    t1 = time.perf_counter_ns()
    if len(latencies) != len(requests):
        raise RuntimeError(f"stream ended after {len(latencies)} of {len(requests)} acks")
    return latencies, t0, t1


def one_message_requests(
    session_id: str, messages: Sequence[m.Message]
) -> list[pb.AppendMessagesRequest]:
    return [pb.AppendMessagesRequest(session_id=session_id, messages=[msg]) for msg in messages]


def timed(fn: Callable[[], Any]) -> tuple[int, Any]:
    t0 = time.perf_counter_ns()
    value = fn()
    return time.perf_counter_ns() - t0, value
