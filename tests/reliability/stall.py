"""One big session must not stall every other tenant: the driver of the stall
test (tests/reliability/test_stall.py) and of bench/stall.py.

A real server (``ctxwarden serve`` with its console) holds one session of
``messages`` messages of agent history (text, tool calls, tool results) and a
few small ones. While a pinger thread times a 1-message ``GetSession`` every
``PING_EVERY`` s on its own connection, another thread makes the server do the
work that grows with the session, one call after the other:

- the full native input (first encoding), then each provider format (first
  rendering), then each once more (cached);
- a restore: the big session is evicted (``--max-hot-sessions``) by touching
  small ones, then built again from the database;
- replays near the end, native and rendered;
- the console's session page, plain, rendered (pretty-printed JSON cut at
  512 KiB) and replayed;
- compaction plans of the whole history (PrepareCompaction, chunked for the
  summariser's window and in one prompt: every message serialised, counted and
  searched for anchors), a fork at the end, and a Compact of that fork by the
  server's extractive summariser (chunk after chunk, then the checkpoint's loss
  report over the whole history).

Responses are taken as raw bytes (no parsing), so the client never competes
with the pinger for its own CPU. The pings' latencies while the work ran are
the figure: every call that is not this work waits for whatever holds the
server's event loop.
"""

from __future__ import annotations

import contextlib
import json
import re
import statistics
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import httpx

from ctxwarden.v1 import context_service_pb2 as pb
from ctxwarden.v1 import message_pb2 as m
from ctxwarden.v1 import session_pb2 as ses
from tests.support.server import ServerProcess

PING_EVERY = 0.02
HEAVY_TIMEOUT = 600.0
PING_TIMEOUT = 30.0
FORMATS = (
    ("native", pb.MODEL_INPUT_FORMAT_NATIVE),
    ("openai-chat", pb.MODEL_INPUT_FORMAT_OPENAI_CHAT),
    ("openai-responses", pb.MODEL_INPUT_FORMAT_OPENAI_RESPONSES),
    ("anthropic", pb.MODEL_INPUT_FORMAT_ANTHROPIC_MESSAGES),
    ("gemini", pb.MODEL_INPUT_FORMAT_GEMINI),
)
FILLERS = 3
SUMMARIZER_WINDOW = 32_768
CHANNEL = [
    ("grpc.max_receive_message_length", 1 << 30),
    ("grpc.max_send_message_length", 1 << 30),
    ("grpc.use_local_subchannel_pool", 1),  # a connection of its own
]


class StallServer(ServerProcess):
    """``ctxwarden serve`` with the console on a free port (``console``: its base URL)."""

    def __init__(self, url: str, log_dir: Path, env: dict[str, str] | None = None) -> None:
        args = [
            "--console-listen",
            "127.0.0.1:0",
            "--max-hot-sessions",
            str(FILLERS),
            "--summarizer",
            "extractive",
            "--summarizer-context-window",
            str(SUMMARIZER_WINDOW),
        ]
        super().__init__(url, log_dir, args)
        self.console = ""
        self.env = env or {}

    def start(self, port: int | None = None) -> None:
        import os

        saved = {k: os.environ.get(k) for k in self.env}
        os.environ.update(self.env)
        try:
            super().start(port)
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
        assert self.proc is not None and self.proc.stdout is not None
        stdout = self.proc.stdout
        lines: list[str] = []
        reader = threading.Thread(target=lambda: lines.append(stdout.readline()), daemon=True)
        reader.start()
        reader.join(timeout=10)
        if not lines or not lines[0].startswith("ctxwarden console on "):
            raise RuntimeError(f"no console address printed: {lines!r}")
        self.console = lines[0].split()[-1]


_HELD = re.compile(r"event loop held for ([0-9.]+) s")
_CPU = re.compile(r", ([0-9.]+) s of CPU in that time")
_BY = re.compile(r" by (.*?) \(")


def holds(server_log: str) -> list[tuple[float, float, str]]:
    """The server's "event loop held" lines: (seconds, CPU seconds of the loop
    thread in that time, the call). Little CPU in a long hold means the host
    gave the process no core; CPU close to the hold means a callback held it."""
    out = []
    for line in server_log.splitlines():
        if "event loop held" not in line:
            continue
        with contextlib.suppress(ValueError):
            line = json.loads(line).get("msg", line)
        held, cpu, by = _HELD.search(line), _CPU.search(line), _BY.search(line)
        if held is not None:
            seconds = float(held.group(1))
            on_cpu = float(cpu.group(1)) if cpu is not None else seconds
            out.append((seconds, on_cpu, by.group(1) if by is not None else ""))
    return out


def text(s: str) -> m.ContentBlock:
    return m.ContentBlock(text=m.TextContent(text=s))


def history(n: int) -> list[m.Message]:
    """``n`` messages of agent turns: ask, tool call, tool result, answer."""
    out: list[m.Message] = []
    for i in range(n):
        turn, step = divmod(i, 4)
        if step == 0:
            msg = m.Message(role=m.ROLE_USER, content=[text(f"turn {turn}: fix src/app_{turn}.py")])
        elif step == 1:
            call = m.ToolCall(id=f"c{turn}", name="read", arguments_json='{"path": "src/a.py"}')
            msg = m.Message(role=m.ROLE_ASSISTANT, content=[m.ContentBlock(tool_call=call)])
        elif step == 2:
            body = f"def f_{turn}(x):\n    return x * {turn}  # " + "ok " * 20
            msg = m.Message(role=m.ROLE_TOOL_RESULT, tool_call_id=f"c{turn}", content=[text(body)])
        else:
            msg = m.Message(role=m.ROLE_ASSISTANT, content=[text(f"Done with turn {turn}.")])
        out.append(msg)
    return out


@dataclass
class Outcome:
    """What a stall run measured."""

    messages: int
    idle_ms: list[float] = field(default_factory=list)
    """Pings before the work started (the host's own noise)."""
    pings_ms: list[float] = field(default_factory=list)
    ping_errors: list[str] = field(default_factory=list)
    ping_starts: list[float] = field(default_factory=list)
    """perf_counter() at each ping of ``pings_ms``."""
    ops_ms: dict[str, float] = field(default_factory=dict)
    op_spans: list[tuple[str, float, float]] = field(default_factory=list)
    op_errors: list[str] = field(default_factory=list)

    def p(self, q: float, idle: bool = False) -> float:
        s = sorted(self.idle_ms if idle else self.pings_ms)
        return s[min(len(s) - 1, int(q * len(s)))] if s else 0.0

    @property
    def median(self) -> float:
        return statistics.median(self.pings_ms) if self.pings_ms else 0.0

    def describe(self) -> str:
        lines = [
            f"{self.messages:,} messages; {len(self.pings_ms)} pings during the work: "
            f"median {self.median:.1f} ms, p99 {self.p(0.99):.1f} ms, max "
            f"{max(self.pings_ms, default=0):.1f} ms, {len(self.ping_errors)} failed "
            f"(idle before: p99 {self.p(0.99, idle=True):.1f} ms of {len(self.idle_ms)})"
        ]
        lines += [f"  {name:32} {ms:9.0f} ms" for name, ms in self.ops_ms.items()]
        slowest = sorted(zip(self.pings_ms, self.ping_starts, strict=False), reverse=True)[:3]
        for ms, at in slowest:
            during = [n for n, a, b in self.op_spans if a <= at + ms / 1000 and at <= b]
            lines.append(f"  slow ping {ms:7.1f} ms during: {', '.join(during) or '-'}")
        return "\n".join(lines)


def _session(stub: grpc.UnaryUnaryMultiCallable[pb.CreateSessionRequest, bytes], sid: str) -> None:
    stub(
        pb.CreateSessionRequest(
            session_id=sid,
            session=ses.Session(model="claude-sonnet-4-5", system_prompt="You fix code."),
        ),
        timeout=60,
    )


def build(server: StallServer, messages: int, batch: int = 1000) -> None:
    """The big session, the pinged one and the fillers."""
    with grpc.insecure_channel(server.target, options=CHANNEL) as ch:
        create: grpc.UnaryUnaryMultiCallable[pb.CreateSessionRequest, bytes] = ch.unary_unary(
            "/ctxwarden.v1.ContextService/CreateSession",
            request_serializer=pb.CreateSessionRequest.SerializeToString,
        )
        append: grpc.UnaryUnaryMultiCallable[pb.AppendMessagesRequest, bytes] = ch.unary_unary(
            "/ctxwarden.v1.ContextService/AppendMessages",
            request_serializer=pb.AppendMessagesRequest.SerializeToString,
        )
        for sid in ("big", "ping", *(f"filler-{i}" for i in range(FILLERS))):
            _session(create, sid)
        rows = history(messages)
        for start in range(0, messages, batch):
            req = pb.AppendMessagesRequest(session_id="big", messages=rows[start : start + batch])
            append(req, timeout=HEAVY_TIMEOUT)
        append(pb.AppendMessagesRequest(session_id="ping", messages=rows[:1]), timeout=60)


def _pinger(target: str, stop: threading.Event, out: Outcome) -> None:
    with grpc.insecure_channel(target, options=CHANNEL) as ch:
        get: grpc.UnaryUnaryMultiCallable[pb.GetSessionRequest, bytes] = ch.unary_unary(
            "/ctxwarden.v1.ContextService/GetSession",
            request_serializer=pb.GetSessionRequest.SerializeToString,
        )
        req = pb.GetSessionRequest(session_id="ping")
        get(req, timeout=PING_TIMEOUT)  # connected before the work starts
        nxt = time.perf_counter()
        while not stop.is_set():
            t0 = time.perf_counter()
            try:
                get(req, timeout=PING_TIMEOUT)
                out.pings_ms.append((time.perf_counter() - t0) * 1000)
                out.ping_starts.append(t0)
            except grpc.RpcError as exc:
                out.ping_errors.append(f"{exc.code().name}: {exc.details()}")
            nxt = max(nxt + PING_EVERY, time.perf_counter())
            stop.wait(max(0.0, nxt - time.perf_counter()))  # pacing, not synchronisation


def _work(server: StallServer, messages: int) -> list[tuple[str, Callable[[], object]]]:
    ch = grpc.insecure_channel(server.target, options=CHANNEL)
    build_input: grpc.UnaryUnaryMultiCallable[pb.BuildModelInputRequest, bytes] = ch.unary_unary(
        "/ctxwarden.v1.ContextService/BuildModelInput",
        request_serializer=pb.BuildModelInputRequest.SerializeToString,
    )
    http = httpx.Client(base_url=server.console, timeout=HEAVY_TIMEOUT)

    def call(fmt: int, as_of: int | None = None, sid: str = "big") -> Callable[[], object]:
        req = pb.BuildModelInputRequest(session_id=sid, format=fmt)  # type: ignore[arg-type]
        if as_of is not None:
            req.as_of_seq = as_of
        return lambda: build_input(req, timeout=HEAVY_TIMEOUT)

    def page(path: str) -> Callable[[], object]:
        return lambda: http.get(path).raise_for_status()

    def evict() -> None:
        for i in range(FILLERS):
            call(pb.MODEL_INPUT_FORMAT_NATIVE, sid=f"filler-{i}")()

    as_of = messages - 10
    ops: list[tuple[str, Callable[[], object]]] = []
    for name, fmt in FORMATS:
        ops.append((f"build {name} (first)", call(fmt)))
    for name, fmt in FORMATS:
        ops.append((f"build {name} (again)", call(fmt)))
    ops.append(("evict the big session", evict))
    ops.append(("restore + build native", call(pb.MODEL_INPUT_FORMAT_NATIVE)))
    ops.append(("replay native", call(pb.MODEL_INPUT_FORMAT_NATIVE, as_of)))
    ops.append(("replay gemini", call(pb.MODEL_INPUT_FORMAT_GEMINI, as_of)))
    ops.append(("console page", page("/sessions/big")))
    ops.append(("console page anthropic", page("/sessions/big?format=anthropic")))
    ops.append(("console replay gemini", page(f"/sessions/big?as_of={as_of}&format=gemini")))
    return ops + _compaction_work(ch)


def _compaction_work(ch: grpc.Channel) -> list[tuple[str, Callable[[], object]]]:
    """Plans of the whole history, a fork at the end and a Compact of the fork (the
    big session itself keeps no checkpoint: a later round works on it again)."""

    def rpc(method: str, req: Any) -> Callable[[], object]:
        call: grpc.UnaryUnaryMultiCallable[Any, bytes] = ch.unary_unary(
            f"/ctxwarden.v1.ContextService/{method}",
            request_serializer=type(req).SerializeToString,
        )
        return lambda: call(req, timeout=HEAVY_TIMEOUT)

    fork = f"big-fork-{uuid.uuid4().hex[:8]}"
    return [
        (
            "prepare compaction, chunked",
            rpc(
                "PrepareCompaction",
                pb.PrepareCompactionRequest(
                    session_id="big", summarizer_context_window=SUMMARIZER_WINDOW
                ),
            ),
        ),
        (
            "prepare compaction, one prompt",
            rpc("PrepareCompaction", pb.PrepareCompactionRequest(session_id="big")),
        ),
        (
            "fork at the end",
            rpc("ForkSession", pb.ForkSessionRequest(session_id="big", new_session_id=fork)),
        ),
        ("compact the fork", rpc("Compact", pb.CompactRequest(session_id=fork))),
    ]


def run(
    server: StallServer, messages: int, only: Sequence[str] = (), idle_seconds: float = 2.0
) -> Outcome:
    """The work, with the pinger timing other calls meanwhile (server built already);
    first ``idle_seconds`` of pings with no work (the host's own noise)."""
    out = Outcome(messages)
    stop = threading.Event()
    pinger = threading.Thread(target=_pinger, args=(server.target, stop, out), daemon=True)
    pinger.start()
    try:
        stop.wait(idle_seconds)  # the baseline window, not synchronisation
        out.idle_ms, out.pings_ms, out.ping_starts = out.pings_ms, [], []
        for name, op in _work(server, messages):
            if only and not any(o in name for o in only):
                continue
            t0 = time.perf_counter()
            try:
                op()
            except Exception as exc:  # recorded; the test asserts there is none
                out.op_errors.append(f"{name}: {exc!r}"[:300])
            out.ops_ms[name] = (time.perf_counter() - t0) * 1000
            out.op_spans.append((name, t0, time.perf_counter()))
    finally:
        stop.set()
        pinger.join(PING_TIMEOUT + 5)
    return out
