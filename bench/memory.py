"""Memory per hot session: server RSS with N sessions of M messages in memory.

A dedicated server (hot-session capacity above N) receives N sessions of M
plain 0.8 KB messages, appended in one request each; every session is then
built once with BuildModelInput, as an agent does before each model call, so
the per-message encodings it caches are counted too. RSS is read from
/proc/<pid>/status before and after. The sessions count tokens with the
heuristic tokenizer so that filling 10,000 sessions takes seconds, not
minutes; the objects kept per message are the same with any tokenizer.

    .venv/bin/python -m bench.memory --sessions 10000 --messages 50 [--backend sqlite]
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import grpc
from tests.support.server import ServerProcess

from bench.common import ALL_BACKENDS, CHANNEL_OPTIONS, TIMEOUT, Result, backend_database, log
from bench.targets import HOT_RSS_BUDGET
from bench.workload import MODEL, SYSTEM_PROMPT, TOOLS, Conversation
from ctxwarden.v1 import context_service_pb2 as pb
from ctxwarden.v1 import context_service_pb2_grpc as pb_grpc
from ctxwarden.v1 import session_pb2 as ses

CONCURRENCY = 32


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS")


async def _fill(target: str, prefix: str, sessions: int, messages: int, seed: int) -> None:
    conv = Conversation(seed)
    template = conv.alternating(messages)
    async with grpc.aio.insecure_channel(target, options=CHANNEL_OPTIONS) as channel:
        stub = pb_grpc.ContextServiceStub(channel)
        queue: asyncio.Queue[int] = asyncio.Queue()
        for i in range(sessions):
            queue.put_nowait(i)

        async def worker() -> None:
            while not queue.empty():
                i = queue.get_nowait()
                created = await stub.CreateSession(
                    pb.CreateSessionRequest(
                        session_id=f"{prefix}-{i:06d}",
                        session=ses.Session(
                            system_prompt=SYSTEM_PROMPT,
                            tools=TOOLS,
                            model=MODEL,
                            policy=ses.ContextPolicy(tokenizer="heuristic"),
                        ),
                    ),
                    timeout=TIMEOUT,
                )
                await stub.AppendMessages(
                    pb.AppendMessagesRequest(session_id=created.session_id, messages=template),
                    timeout=TIMEOUT,
                )
                await stub.BuildModelInput(
                    pb.BuildModelInputRequest(session_id=created.session_id), timeout=TIMEOUT
                )

        await asyncio.gather(*(worker() for _ in range(CONCURRENCY)))


def measure_memory(
    backend: str, url: str, log_dir: Path, sessions: int, messages: int, seed: int
) -> Result:
    server = ServerProcess(url, log_dir, ["--max-hot-sessions", str(sessions + 100)])
    server.start()
    try:
        assert server.proc is not None
        pid = server.proc.pid
        asyncio.run(_fill(server.target, "warm", 20, messages, seed))  # warm-up: imports, pool
        before = rss_bytes(pid)
        log(f"{backend}: memory: filling {sessions} sessions x {messages} msgs")
        t0 = time.perf_counter()
        asyncio.run(_fill(server.target, "mem", sessions, messages, seed))
        fill_s = time.perf_counter() - t0
        time.sleep(1)
        after = rss_bytes(pid)
    finally:
        server.stop()
    per_session = (after - before) / sessions
    content = len(Conversation(seed).alternating(1)[0].content[0].text.text)
    note = (
        f"{sessions:,} hot sessions x {messages} msgs (~{content} B each): RSS "
        f"{after / 2**20:,.0f} MiB, {before / 2**20:,.0f} MiB before "
        f"({per_session / 1024:,.1f} KiB/session, "
        f"{per_session / messages:,.0f} B/msg)"
    )
    log(f"{backend}: memory: {note}")
    return Result(
        backend=backend,
        metric=f"memory_{sessions}_sessions",
        n=sessions,
        note=note,
        extra={
            "sessions": sessions,
            "messages_per_session": messages,
            "rss_before_bytes": before,
            "rss_after_bytes": after,
            "bytes_per_session": per_session,
            "bytes_per_message": per_session / messages,
            "fill_seconds": fill_s,
            "within_target": after <= HOT_RSS_BUDGET,
        },
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.memory", description=__doc__)
    parser.add_argument("--backend", choices=ALL_BACKENDS, default="sqlite")
    parser.add_argument("--sessions", type=int, default=10_000, help="hot sessions")
    parser.add_argument("--messages", type=int, default=50, help="0.8 KB messages per session")
    parser.add_argument("--seed", type=int, default=1, help="workload seed")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="ctxw-bench-memory-") as tmp:
        workdir = Path(tmp)
        with backend_database(args.backend, workdir) as (url, _info):
            r = measure_memory(args.backend, url, workdir, args.sessions, args.messages, args.seed)
    budget = HOT_RSS_BUDGET >> 20
    verdict = "within" if r.extra["within_target"] else "OVER"
    print(f"{r.note}; {verdict} the {budget} MiB budget")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
