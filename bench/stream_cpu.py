"""Server CPU per streamed message: ctxwarden's StreamMessages against a bare
``grpc.aio`` streaming server, same client, same request bytes, same run.

    .venv/bin/python -m bench.stream_cpu [--backend mysql] [--blocks 6] [--block 1000]
                                         [--window 16] [--streams 1] [--json PATH]
                                         [--profile PATH]

Each request carries one message (the workload's ~830-byte turns, serialized
once); the client writes the very same bytes to both servers through a raw
bytes stream-stream call, at most ``--window`` unanswered. The bare server
(``python -m bench.stream_cpu serve PORT_FILE``) answers each request with a
fixed 64-byte reply and does nothing else. Blocks alternate (ctxwarden, bare,
then bare, ctxwarden), so drift hits both alike. CPU is each server process's
user + system time (/proc) over its blocks, divided by the messages; the issue's
target is ctxwarden / bare <= 2.5x. ``--streams N`` runs N streams at once, each
on its own session (the group commit then shares transactions between them).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
from tests.support.server import ServerProcess

from bench.common import CHANNEL_OPTIONS, backend_database, create_session, log
from bench.host_load import HostLoad, cpu_seconds
from bench.profile import recording, summary
from bench.unary_floor import pid_of
from bench.workload import Conversation
from ctxwarden.v1 import context_service_pb2 as pb
from ctxwarden.v1 import context_service_pb2_grpc as pb_grpc

BARE_METHOD = "/bench.BareStream/Echo"
CTXWARDEN_METHOD = "/ctxwarden.v1.ContextService/StreamMessages"
REPLY = b"\x08\x01" * 32


async def _serve(port_file: Path) -> None:
    async def echo(requests: Any, context: Any) -> Any:
        async for _ in requests:
            yield REPLY

    handler = grpc.method_handlers_generic_handler(
        "bench.BareStream", {"Echo": grpc.stream_stream_rpc_method_handler(echo)}
    )
    server = grpc.aio.server(options=CHANNEL_OPTIONS)
    server.add_generic_rpc_handlers((handler,))
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    port_file.with_suffix(".tmp").write_text(str(port))
    port_file.with_suffix(".tmp").replace(port_file)
    await server.wait_for_termination()


@contextlib.contextmanager
def bare_stream_server() -> Iterator[tuple[str, int]]:
    """The bare streaming server in a child process: (target, pid)."""
    with tempfile.TemporaryDirectory(prefix="ctxw-bare-stream-") as tmp:
        port_file = Path(tmp) / "port"
        proc = subprocess.Popen(
            [sys.executable, "-m", "bench.stream_cpu", "serve", str(port_file)],
            stdout=subprocess.DEVNULL,
        )
        try:
            deadline = time.monotonic() + 30
            while not port_file.exists():
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("the bare streaming server did not start")
                time.sleep(0.01)  # polling a child's port file
            yield f"127.0.0.1:{port_file.read_text()}", proc.pid
        finally:
            proc.terminate()
            proc.wait(timeout=10)


def stream_bytes(channel: grpc.Channel, method: str, requests: list[bytes], window: int) -> None:
    """Write ``requests`` (serialized) over one stream, ``window`` unanswered at most."""
    credit = threading.Semaphore(window)

    def feed() -> Iterator[bytes]:
        for request in requests:
            credit.acquire()
            yield request

    call: grpc.StreamStreamMultiCallable[bytes, bytes] = channel.stream_stream(method)
    answered = 0
    for _ in call(feed(), timeout=600):
        credit.release()
        answered += 1
    if answered != len(requests):
        raise RuntimeError(f"{method}: {answered} of {len(requests)} answered")


def stream_all(
    channel: grpc.Channel, method: str, per_stream: list[list[bytes]], window: int
) -> None:
    """One stream per list, all at once (each ctxwarden stream appends to its own session)."""
    threads = [
        threading.Thread(target=stream_bytes, args=(channel, method, requests, window))
        for requests in per_stream
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def run(
    backend: str,
    blocks: int,
    block: int,
    window: int,
    streams: int,
    workdir: Path,
    profile: Path | None = None,
) -> dict[str, Any]:
    cpu = {"ctxwarden": 0.0, "bare": 0.0}
    wall = {"ctxwarden": 0.0, "bare": 0.0}
    db_pid = pid_of("mariadbd") if backend == "mysql" else None
    pids: list[int | None] = [db_pid]
    load = HostLoad(pids)
    with backend_database(backend, workdir) as (url, _info):
        server = ServerProcess(url, workdir)
        server.start()
        try:
            assert server.proc is not None
            ctxw_pid = server.proc.pid
            pids.append(ctxw_pid)
            with (
                bare_stream_server() as (bare_target, bare_pid),
                grpc.insecure_channel(server.target, options=CHANNEL_OPTIONS) as ctxw,
                grpc.insecure_channel(bare_target, options=CHANNEL_OPTIONS) as bare,
            ):
                pids.append(bare_pid)
                stub = pb_grpc.ContextServiceStub(ctxw)
                messages = list(Conversation(21).alternating(block))

                def requests() -> list[list[bytes]]:
                    out = []
                    for _ in range(streams):
                        sid = create_session(stub, "stream-cpu")
                        out.append(
                            [
                                pb.AppendMessagesRequest(
                                    session_id=sid, messages=[m]
                                ).SerializeToString()
                                for m in messages[: block // streams]
                            ]
                        )
                    return out

                warm = [r[:50] for r in requests()]
                stream_all(ctxw, CTXWARDEN_METHOD, warm, window)
                stream_all(bare, BARE_METHOD, warm, window)
                sides = [
                    ("ctxwarden", ctxw, CTXWARDEN_METHOD, ctxw_pid),
                    ("bare", bare, BARE_METHOD, bare_pid),
                ]
                for b in range(blocks):
                    log(f"{backend}: block {b + 1}/{blocks}")
                    batch = requests()
                    for name, channel, method, pid in sides if b % 2 == 0 else sides[::-1]:
                        sampled = profile is not None and name == "ctxwarden"
                        with (
                            _sampled(pid, workdir / f"profile-{b}.txt" if sampled else None),
                            load,
                        ):
                            before, t0 = cpu_seconds(pid), time.perf_counter()
                            stream_all(channel, method, batch, window)
                            wall[name] += time.perf_counter() - t0
                            cpu[name] += cpu_seconds(pid) - before
        finally:
            server.stop()
    if profile is not None:
        profile.write_text("".join(p.read_text() for p in sorted(workdir.glob("profile-*.txt"))))
    n = blocks * (block // streams) * streams
    per = {k: v / n * 1e3 for k, v in cpu.items()}
    return {
        "backend": backend,
        "messages_each": n,
        "streams": streams,
        "request_bytes": len(batch[0][0]),
        "server_cpu_ms_per_message": per,
        "messages_per_s": {k: n / v for k, v in wall.items()},
        "ratio": per["ctxwarden"] / per["bare"],
        "database_pid": db_pid,
        "other_load_cores": load.cores,
        "other_load": load.describe(),
    }


def _sampled(pid: int, path: Path | None) -> contextlib.AbstractContextManager[None]:
    """py-spy on ``pid`` into ``path`` for the block (nothing when ``path`` is None).

    The profiler's own sampling costs the server a little CPU: a profiled run's
    ratio is not the figure, the unprofiled one is."""
    return contextlib.nullcontext() if path is None else recording(pid, path)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["serve"]:
        asyncio.run(_serve(Path(argv[1])))
        return 0
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", choices=("sqlite", "mysql", "postgres"), default="mysql")
    parser.add_argument("--blocks", type=int, default=6)
    parser.add_argument("--block", type=int, default=1000, help="messages per block and side")
    parser.add_argument("--window", type=int, default=16)
    parser.add_argument("--streams", type=int, default=1, help="concurrent streams (sessions)")
    parser.add_argument("--json", type=Path)
    parser.add_argument(
        "--profile",
        type=Path,
        help="sample ctxwarden's blocks with py-spy into this raw file and print where "
        "the server's loop thread spends its CPU, by part (the profile extra)",
    )
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="ctxw-stream-cpu-") as tmp:
        result = run(
            args.backend,
            args.blocks,
            args.block,
            args.window,
            args.streams,
            Path(tmp),
            args.profile,
        )
    per, rate = result["server_cpu_ms_per_message"], result["messages_per_s"]
    print(
        f"{args.backend}: server CPU per streamed message: ctxwarden {per['ctxwarden']:.3f} ms, "
        f"bare grpc.aio {per['bare']:.3f} ms: ratio {result['ratio']:.2f}x (target <= 2.5x); "
        f"throughput {rate['ctxwarden']:.0f} vs {rate['bare']:.0f} msg/s "
        f"({result['messages_each']} messages each over {result['streams']} streams, "
        f"{result['request_bytes']} B requests); {result['other_load']}"
    )
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    if args.profile:
        print(summary([args.profile]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
