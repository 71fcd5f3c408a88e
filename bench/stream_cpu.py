"""Server CPU per streamed message: ctxwarden's StreamMessages against a bare
``grpc.aio`` streaming server, same client, same request bytes, same run.

    .venv/bin/python -m bench.stream_cpu [--backend mysql] [--blocks 6] [--block 1000]
                                         [--window 16] [--streams 1] [--json PATH]
                                         [--profile PATH] [--base CHECKOUT]

Each request carries one message (the workload's ~830-byte turns, serialized
once); the client writes the very same bytes to both servers through a raw
bytes stream-stream call, at most ``--window`` unanswered. The bare server
(``python -m bench.stream_cpu serve PORT_FILE``) answers each request with a
fixed 64-byte reply and does nothing else. Blocks alternate (ctxwarden, bare,
then bare, ctxwarden), so drift hits both alike. CPU is each server process's
user + system time (/proc) over its blocks, divided by the messages; the issue's
target is ctxwarden / bare <= 2.5x. ``--streams N`` runs N streams at once, each
on its own session (the group commit then shares transactions between them).
``--base CHECKOUT`` adds a third side in the same rotation: the server of another
checkout (``git worktree add /tmp/ctxw-base <commit>``), on the same database with
sessions of its own, so a change is judged against the code before it at the same
time (the ratio this checkout / base).
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
from bench.unary_ab import start_server
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
    base: Path | None = None,
) -> dict[str, Any]:
    names = ["ctxwarden", "bare"] + (["base"] if base is not None else [])
    cpu = dict.fromkeys(names, 0.0)
    wall = dict.fromkeys(names, 0.0)
    db_pid = pid_of("mariadbd") if backend == "mysql" else None
    pids: list[int | None] = [db_pid]
    load = HostLoad(pids)
    messages = list(Conversation(21).alternating(block))

    def requests(stub: pb_grpc.ContextServiceStub) -> list[list[bytes]]:
        """A block's requests, one list per stream, each on a new session of ``stub``'s."""
        out = []
        for _ in range(streams):
            sid = create_session(stub, "stream-cpu")
            out.append(
                [
                    pb.AppendMessagesRequest(session_id=sid, messages=[m]).SerializeToString()
                    for m in messages[: block // streams]
                ]
            )
        return out

    with backend_database(backend, workdir) as (url, _info), contextlib.ExitStack() as stack:
        servers = {"ctxwarden": _server(stack, url, workdir, None)}
        if base is not None:
            servers["base"] = _server(stack, url, workdir, base / "server")
        bare_target, bare_pid = stack.enter_context(bare_stream_server())
        targets = {name: s.target for name, s in servers.items()} | {"bare": bare_target}
        channels = {
            name: stack.enter_context(grpc.insecure_channel(t, options=CHANNEL_OPTIONS))
            for name, t in targets.items()
        }
        stubs = {name: pb_grpc.ContextServiceStub(channels[name]) for name in servers}
        pid = {name: s.proc.pid for name, s in servers.items() if s.proc} | {"bare": bare_pid}
        pids.extend(pid.values())
        method = dict.fromkeys(servers, CTXWARDEN_METHOD) | {"bare": BARE_METHOD}
        for name in names:
            warm = requests(stubs.get(name, stubs["ctxwarden"]))
            stream_all(channels[name], method[name], [r[:50] for r in warm], window)
        for b in range(blocks):
            log(f"{backend}: block {b + 1}/{blocks}")
            batches = {name: requests(stubs[name]) for name in servers}
            batches["bare"] = batches["ctxwarden"]  # the same bytes; the bare server reads none
            for name in names if b % 2 == 0 else names[::-1]:
                sampled = profile is not None and name == "ctxwarden"
                with (
                    _sampled(pid[name], workdir / f"profile-{b}.txt" if sampled else None),
                    load,
                ):
                    before, t0 = cpu_seconds(pid[name]), time.perf_counter()
                    stream_all(channels[name], method[name], batches[name], window)
                    wall[name] += time.perf_counter() - t0
                    cpu[name] += cpu_seconds(pid[name]) - before
    if profile is not None:
        profile.write_text("".join(p.read_text() for p in sorted(workdir.glob("profile-*.txt"))))
    n = blocks * (block // streams) * streams
    per = {k: v / n * 1e3 for k, v in cpu.items()}
    return {
        "backend": backend,
        "messages_each": n,
        "streams": streams,
        "request_bytes": len(batches["bare"][0][0]),
        "server_cpu_ms_per_message": per,
        "messages_per_s": {k: n / v for k, v in wall.items()},
        "ratio": _ratio(per["ctxwarden"], per["bare"]),
        "ratio_to_base": _ratio(per["ctxwarden"], per["base"]) if base is not None else None,
        "base": str(base) if base is not None else None,
        "database_pid": db_pid,
        "other_load_cores": load.cores,
        "other_load": load.describe(),
    }


def _ratio(a: float, b: float) -> float | None:
    """a / b; None when b is 0 (a short run can see no clock tick of a process's CPU)."""
    return a / b if b else None


def _shown(ratio: float | None, digits: int = 2) -> str:
    return "n/a" if ratio is None else f"{ratio:.{digits}f}"


def _server(
    stack: contextlib.ExitStack, url: str, workdir: Path, server_path: Path | None
) -> ServerProcess:
    """A ctxwarden server on ``url`` (from another checkout's ``server_path``), stopped
    when ``stack`` closes."""
    server = start_server(url, workdir, server_path)
    stack.callback(server.stop)
    assert server.proc is not None
    return server


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
    parser.add_argument("--base", type=Path, help="a checkout of the code to compare with")
    args = parser.parse_args(argv)
    if args.base and not (args.base / "server" / "ctxwarden").is_dir():
        parser.error(f"--base {args.base}: not a ctxwarden checkout (no server/ctxwarden)")
    with tempfile.TemporaryDirectory(prefix="ctxw-stream-cpu-") as tmp:
        result = run(
            args.backend,
            args.blocks,
            args.block,
            args.window,
            args.streams,
            Path(tmp),
            args.profile,
            args.base.resolve() if args.base else None,
        )
    per, rate = result["server_cpu_ms_per_message"], result["messages_per_s"]
    print(
        f"{args.backend}: server CPU per streamed message: ctxwarden {per['ctxwarden']:.3f} ms, "
        f"bare grpc.aio {per['bare']:.3f} ms: ratio {_shown(result['ratio'])}x (target <= 2.5x); "
        f"throughput {rate['ctxwarden']:.0f} vs {rate['bare']:.0f} msg/s "
        f"({result['messages_each']} messages each over {result['streams']} streams, "
        f"{result['request_bytes']} B requests); {result['other_load']}"
    )
    if args.base:
        print(
            f"{args.backend}: this checkout against {args.base}: base {per['base']:.3f} ms "
            f"per message, ratio {_shown(result['ratio_to_base'], 3)} (this / base)"
        )
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    if args.profile:
        print(summary([args.profile]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
