"""The encoding cache stays within --encoding-cache-mb and lets evicted sessions go.

Two servers with the same --max-hot-sessions, one with the cache and one
without, receive the same sessions (append, then BuildModelInput, as an agent
does), many more than stay hot. The sessions are small, so the budget could
hold the encodings of far more sessions than are hot: a cache that kept
evicted sessions' encodings (and the messages they point to) would cost a
multiple of its budget. The RSS plateaus of the two servers may differ by at
most the budget plus TOLERANCE (allocator slack and the servers' own noise).
bench/cache_memory.py measures the same at production scale.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import grpc
import pytest

from ctxwarden.v1 import context_service_pb2 as pb
from ctxwarden.v1 import context_service_pb2_grpc as pb_grpc
from ctxwarden.v1 import session_pb2 as ses
from tests.support.builders import assistant, user
from tests.support.server import ServerProcess

MiB = 1024 * 1024
HOT = 50
"""--max-hot-sessions of both servers."""
BUDGET_MB = 16
"""--encoding-cache-mb of the server with the cache: room for ~700 of these sessions."""
TOLERANCE = 6 * MiB
"""Documented slack on top of the budget: glibc arenas and fragmentation."""
SESSIONS = 1200
STEP = 300
MESSAGES = 10
CONCURRENCY = 16


def rss(server: ServerProcess) -> int:
    assert server.proc is not None
    for line in Path(f"/proc/{server.proc.pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS in /proc")


async def _fill(target: str, prefix: str, first: int, count: int) -> None:
    async with grpc.aio.insecure_channel(target) as channel:
        stub = pb_grpc.ContextServiceStub(channel)
        todo = list(range(first, first + count))

        async def worker() -> None:
            while todo:
                i = todo.pop()
                sid = f"{prefix}-{i:05d}"
                await stub.CreateSession(
                    pb.CreateSessionRequest(
                        session_id=sid,
                        session=ses.Session(policy=ses.ContextPolicy(tokenizer="heuristic")),
                    ),
                    timeout=60,
                )
                text = f"session {i} " + "lorem ipsum dolor sit amet " * 75  # ~2 KB
                messages = [
                    user(f"{k} {text}") if k % 2 == 0 else assistant(f"{k} {text}")
                    for k in range(MESSAGES)
                ]
                await stub.AppendMessages(
                    pb.AppendMessagesRequest(
                        session_id=sid, messages=messages, view=pb.MESSAGE_VIEW_BASIC
                    ),
                    timeout=60,
                )
                built = await stub.BuildModelInput(
                    pb.BuildModelInputRequest(session_id=sid), timeout=60
                )
                assert len(built.messages) == MESSAGES

        await asyncio.gather(*(worker() for _ in range(CONCURRENCY)))


def _plateau(url: str, log_dir: Path, cache_mb: int) -> list[int]:
    """RSS after each STEP of sessions, on a server with ``cache_mb``."""
    args = ["--max-hot-sessions", str(HOT), "--encoding-cache-mb", str(cache_mb)]
    server = ServerProcess(url, log_dir, args)
    server.start()
    samples = []
    try:
        for first in range(0, SESSIONS, STEP):
            asyncio.run(_fill(server.target, f"cache{cache_mb}", first, STEP))
            samples.append(rss(server))
    finally:
        server.stop()
    return samples


def test_cache_memory_stays_within_its_budget(
    backend_url: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    log_dir = tmp_path_factory.mktemp("cache-memory")
    on = _plateau(backend_url, log_dir, BUDGET_MB)
    off = _plateau(backend_url, log_dir, 0)
    cost = max(on) - max(off)
    shown = [f"{x / MiB:.0f}" for x in on], [f"{x / MiB:.0f}" for x in off]
    assert cost <= BUDGET_MB * MiB + TOLERANCE, f"cache on/off RSS MiB per step: {shown}"
    # Evicted sessions do not pile up: with the cache on, RSS grows no more than
    # without it once the hot set is full (the budget could hold ~700 sessions, 24
    # times the hot set: kept, their encodings would add ~18 MiB over the steps). The
    # growth both servers share (the allocator, the database driver) is left out: it
    # once took the cache's server alone 6.06 MiB over the steps, the other 2.
    growth = (on[-1] - on[0]) - (off[-1] - off[0])
    assert growth <= TOLERANCE, f"cache on/off RSS MiB per step: {shown}"
