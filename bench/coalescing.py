"""Client coalescing: the Python streaming helper with and without it, same run.

    .venv/bin/python -m bench.coalescing [--backend mysql] [--senders 16] [--messages 1600]
                                         [--rounds 2] [--json PATH]

``--senders`` tasks share one ``AsyncClient.stream_messages()`` stream and one
session, each sending one message per ``send`` and awaiting its answer, as
concurrent tool-call handlers of one agent would. With coalescing on (the
default) the messages that queue up while earlier requests are unanswered go out
as one request; with ``coalesce=False`` each send is its own request. Rounds
alternate the order. Reported: messages/s, server CPU per message (/proc) and
requests written per message.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from tests.support.server import ServerProcess

from bench.common import backend_database, log
from bench.host_load import cpu_seconds
from bench.workload import Conversation
from ctxwarden_client import AsyncClient


async def _drive(target: str, senders: int, messages: int, coalesce: bool) -> dict[str, float]:
    turns = list(Conversation(31).alternating(messages))
    async with AsyncClient(target, timeout=120) as client:
        sid = (await client.create_session(title="coalescing")).session_id
        queue: asyncio.Queue[Any] = asyncio.Queue()
        for m in turns:
            queue.put_nowait(m)
        async with client.stream_messages(max_in_flight=senders, coalesce=coalesce) as stream:

            async def sender() -> None:
                while not queue.empty():
                    await stream.send(sid, [queue.get_nowait()])

            t0 = time.perf_counter()
            await asyncio.gather(*(sender() for _ in range(senders)))
            wall = time.perf_counter() - t0
            sent = stream.requests_sent
        last = (await client.get_session(sid)).last_seq
    if last != messages:
        raise RuntimeError(f"stored {last} of {messages}")
    return {"seconds": wall, "requests": sent}


def run(backend: str, senders: int, messages: int, rounds: int, workdir: Path) -> dict[str, Any]:
    out: dict[str, list[dict[str, float]]] = {"coalesced": [], "one_per_send": []}
    with backend_database(backend, workdir) as (url, _info):
        server = ServerProcess(url, workdir)
        server.start()
        try:
            assert server.proc is not None
            asyncio.run(_drive(server.target, senders, 200, True))  # warm up
            for r in range(rounds):
                order = [True, False] if r % 2 == 0 else [False, True]
                for coalesce in order:
                    name = "coalesced" if coalesce else "one_per_send"
                    log(f"{backend}: round {r + 1}/{rounds}, {name}")
                    before = cpu_seconds(server.proc.pid)
                    got = asyncio.run(_drive(server.target, senders, messages, coalesce))
                    cpu = cpu_seconds(server.proc.pid) - before
                    out[name].append(
                        {
                            "messages_per_s": messages / got["seconds"],
                            "server_cpu_ms_per_message": cpu / messages * 1e3,
                            "requests_per_message": got["requests"] / messages,
                        }
                    )
        finally:
            server.stop()
    return {"backend": backend, "senders": senders, "messages": messages, "runs": out}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", choices=("sqlite", "mysql", "postgres"), default="mysql")
    parser.add_argument("--senders", type=int, default=16)
    parser.add_argument("--messages", type=int, default=1600)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="ctxw-coalescing-") as tmp:
        result = run(args.backend, args.senders, args.messages, args.rounds, Path(tmp))
    for name, runs in result["runs"].items():
        for x in runs:
            print(
                f"{args.backend} {name:12}: {x['messages_per_s']:6.0f} msg/s; server CPU "
                f"{x['server_cpu_ms_per_message']:.3f} ms/message; "
                f"{x['requests_per_message']:.3f} requests/message"
            )
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
