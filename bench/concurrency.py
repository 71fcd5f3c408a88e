"""Many agents at once: appends from 100 concurrent sessions, one asyncio client.

Each simulated agent owns one session. ``streams`` keeps one StreamMessages
call per session and sends one request at a time (or ``window`` in flight),
``unary`` makes one AppendMessages call per request. Every acknowledgement
arrives only after the append committed, so the throughput is of durable
messages. The client is a single asyncio loop (grpc.aio) with one connection per 25
agents, so it costs one core at most on the machine it shares with the server.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass

import grpc

from bench.common import CHANNEL_OPTIONS, TIMEOUT
from ctxwarden.v1 import context_service_pb2 as pb
from ctxwarden.v1 import context_service_pb2_grpc as pb_grpc


@dataclass
class Outcome:
    latencies_ns: list[int]
    wall_ns: int
    messages: int


async def _stream_agent(
    stub: pb_grpc.ContextServiceAsyncStub,
    requests: Sequence[pb.AppendMessagesRequest],
    window: int,
    start: asyncio.Event,
    latencies: list[int],
) -> int:
    await start.wait()
    call = stub.StreamMessages(timeout=TIMEOUT * 5)
    sent: list[int] = []
    credit = asyncio.Semaphore(window)

    async def writer() -> None:
        for req in requests:
            await credit.acquire()
            sent.append(time.perf_counter_ns())
            await call.write(req)
        await call.done_writing()

    task = asyncio.create_task(writer())
    last = 0
    for i in range(len(requests)):
        resp = await call.read()
        if not isinstance(resp, pb.AppendMessagesResponse):  # grpc.aio.EOF
            raise RuntimeError(f"stream ended after {i} of {len(requests)} acks")
        latencies.append(time.perf_counter_ns() - sent[i])
        credit.release()
        if last and resp.last_seq != last + len(requests[i].messages):
            raise RuntimeError(f"acks out of order: {last} -> {resp.last_seq}")
        last = resp.last_seq
    await task
    return sum(len(r.messages) for r in requests)


async def _unary_agent(
    stub: pb_grpc.ContextServiceAsyncStub,
    requests: Sequence[pb.AppendMessagesRequest],
    start: asyncio.Event,
    latencies: list[int],
) -> int:
    await start.wait()
    n = 0
    for req in requests:
        t0 = time.perf_counter_ns()
        await stub.AppendMessages(req, timeout=TIMEOUT)
        latencies.append(time.perf_counter_ns() - t0)
        n += len(req.messages)
    return n


AGENTS_PER_CHANNEL = 25
"""Agents sharing one connection (the server limits concurrent streams per connection)."""


async def _run(
    target: str, work: Sequence[Sequence[pb.AppendMessagesRequest]], mode: str, window: int
) -> Outcome:
    # A local subchannel pool gives every channel its own connection.
    options = [*CHANNEL_OPTIONS, ("grpc.use_local_subchannel_pool", 1)]
    channels = [
        grpc.aio.insecure_channel(target, options=options)
        for _ in range(0, len(work), AGENTS_PER_CHANNEL)
    ]
    try:
        for channel in channels:
            await channel.channel_ready()
        stubs = [pb_grpc.ContextServiceStub(c) for c in channels]
        start = asyncio.Event()
        latencies: list[int] = []
        agents = []
        for i, reqs in enumerate(work):
            stub = stubs[i // AGENTS_PER_CHANNEL]
            if mode == "stream":
                agents.append(_stream_agent(stub, reqs, window, start, latencies))
            else:
                agents.append(_unary_agent(stub, reqs, start, latencies))
        tasks = [asyncio.create_task(a) for a in agents]
        await asyncio.sleep(0.05)
        t0 = time.perf_counter_ns()
        start.set()
        counts = await asyncio.gather(*tasks)
        wall = time.perf_counter_ns() - t0
    finally:
        for channel in channels:
            await channel.close()
    return Outcome(latencies, wall, sum(counts))


def run_agents(
    target: str,
    work: Sequence[Sequence[pb.AppendMessagesRequest]],
    mode: str,
    window: int = 1,
) -> Outcome:
    """Send every session's requests concurrently; ``mode`` is "stream" or "unary"."""
    if mode not in ("stream", "unary"):
        raise ValueError(mode)
    return asyncio.run(_run(target, work, mode, window))
