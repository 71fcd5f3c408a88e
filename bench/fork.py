"""ForkSession cost against history length, measured side by side.

    .venv/bin/python -m bench.fork [--backends sqlite mysql] [--large 100000] [--reps 21]
        [--history 20000] [--sections compacted uncompacted]

``compacted``: one ``ctxwarden serve`` per backend holds two compacted agent
sessions, one of 100 messages and one of ``--large`` messages (built first, so
neither is timed while the other is being written). Then the forks alternate
between the two sessions, call by call, so a drift in the machine's load hits
both alike: at the end of the session (hot) and in the middle of the messages
appended after its checkpoint (a replay with that checkpoint in force), and once
more after the source was evicted from memory (the fork then restores it:
O(kept)). The figure of the issue is the ratio of medians, large / small, per
position (target: <= 2x).

``uncompacted``: two sessions without a checkpoint, of 100 and ``--history``
short agent messages (every one of them kept, so in the fork's input), hot. Call
by call, alternating: the source's BuildModelInput (hot: the floor of an input
that size), then twice ForkSession at the end and the fork's first
BuildModelInput, once in full and once with the source's resume_token (a client
that holds the source's input gets only what follows it); each fork is deleted
afterwards (so the sources stay hot). Each call's time includes the client's
decoding of the answer.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import grpc
from tests.support.server import ServerProcess

from bench.common import (
    CHANNEL_OPTIONS,
    TIMEOUT,
    append_batched,
    backend_database,
    create_session,
    log,
    timed,
)
from bench.workload import Conversation
from ctxwarden.v1 import context_service_pb2 as pb
from ctxwarden.v1 import context_service_pb2_grpc as pb_grpc
from ctxwarden.v1 import message_pb2 as m

SMALL = 100
SECTIONS = ("compacted", "uncompacted")


AFTER = 40
"""Messages appended after the compaction: the middle ones are a fork point with
that checkpoint in force (before it, the replay has no checkpoint: O(history))."""


def _build(stub: pb_grpc.ContextServiceStub, size: int, seed: int) -> tuple[str, int]:
    """A compacted agent session of ``size`` messages and AFTER more; returns (id, the
    seq the compaction was made at)."""
    sid = create_session(stub, f"fork{size}")
    append_batched(stub, sid, Conversation(seed * 7919 + size).agent_history(size))
    stub.Compact(pb.CompactRequest(session_id=sid), timeout=600)
    tail = Conversation(seed).agent_history(AFTER)
    stub.AppendMessages(pb.AppendMessagesRequest(session_id=sid, messages=tail), timeout=TIMEOUT)
    return sid, size + 1


def _evict(stub: pb_grpc.ContextServiceStub, fillers: list[str]) -> None:
    for sid in fillers:
        stub.BuildModelInput(pb.BuildModelInputRequest(session_id=sid), timeout=TIMEOUT)


def _fork_ms(stub: pb_grpc.ContextServiceStub, sid: str, at_seq: int) -> float:
    req = pb.ForkSessionRequest(session_id=sid, at_seq=at_seq)
    ns, _ = timed(lambda: stub.ForkSession(req, timeout=TIMEOUT))
    return ns / 1e6


def measure(backend: str, workdir: Path, large: int, reps: int, seed: int) -> dict[str, object]:
    with backend_database(backend, workdir) as (url, _info):
        server = ServerProcess(
            url, workdir, ["--max-hot-sessions", "4", "--summarizer", "extractive"]
        )
        server.start()
        try:
            with grpc.insecure_channel(server.target, options=CHANNEL_OPTIONS) as channel:
                return _measure(pb_grpc.ContextServiceStub(channel), backend, large, reps, seed)
        finally:
            server.stop()


def _measure(
    stub: pb_grpc.ContextServiceStub, backend: str, large: int, reps: int, seed: int
) -> dict[str, object]:
    log(f"{backend}: building {SMALL} and {large} message sessions")
    sources = {SMALL: _build(stub, SMALL, seed), large: _build(stub, large, seed)}
    fillers = [create_session(stub, f"filler{i}") for i in range(4)]
    last = {
        n: stub.GetSession(pb.GetSessionRequest(session_id=s)).last_seq
        for n, (s, _) in sources.items()
    }
    positions: dict[str, Callable[[int], int]] = {
        "end": lambda n: 0,
        "after_checkpoint": lambda n: (sources[n][1] + last[n]) // 2,
    }
    samples: dict[str, dict[int, list[float]]] = {
        p: {n: [] for n in sources} for p in [*positions, "end_after_eviction"]
    }
    for _ in range(reps):
        for n, (sid, _kept) in sources.items():
            for name, at in positions.items():
                stub.BuildModelInput(pb.BuildModelInputRequest(session_id=sid), timeout=TIMEOUT)
                samples[name][n].append(_fork_ms(stub, sid, at(n)))
            _evict(stub, fillers)
            samples["end_after_eviction"][n].append(_fork_ms(stub, sid, 0))
    out: dict[str, object] = {"backend": backend, "small": SMALL, "large": large, "reps": reps}
    for name, by_size in samples.items():
        small_ms = statistics.median(by_size[SMALL])
        large_ms = statistics.median(by_size[large])
        out[name] = {
            "small_median_ms": round(small_ms, 2),
            "large_median_ms": round(large_ms, 2),
            "ratio": round(large_ms / small_ms, 2),
        }
        log(f"{backend}: fork {name}: {small_ms:.2f} ms vs {large_ms:.2f} ms")
    return out


def _short_history(n: int) -> list[m.Message]:
    """``n`` short agent messages: an ask, a tool call, its result, an answer (each
    reply with the usage its provider reported)."""
    out: list[m.Message] = []
    i = 0
    while len(out) < n:
        call = m.ContentBlock(
            tool_call=m.ToolCall(id=f"c{i}", name="read_file", arguments_json='{"path": "a.py"}')
        )
        out += [
            m.Message(role=m.ROLE_USER, content=[_text(f"step {i}: read a.py and fix the bug")]),
            m.Message(
                role=m.ROLE_ASSISTANT,
                content=[call],
                stop_reason=m.STOP_REASON_TOOL_USE,
                usage=m.Usage(input_tokens=1000 + 30 * i, output_tokens=20),
            ),
            m.Message(
                role=m.ROLE_TOOL_RESULT,
                tool_call_id=f"c{i}",
                tool_name="read_file",
                content=[_text(f"def f{i}(x):\n    return x + {i}\n")],
            ),
            m.Message(
                role=m.ROLE_ASSISTANT,
                content=[_text(f"Fixed f{i}.")],
                usage=m.Usage(input_tokens=1020 + 30 * i, output_tokens=5),
            ),
        ]
        i += 1
    return out[:n]


def _text(text: str) -> m.ContentBlock:
    return m.ContentBlock(text=m.TextContent(text=text))


def _ms(call: Callable[[], object]) -> float:
    ns, _ = timed(call)
    return ns / 1e6


def measure_uncompacted(backend: str, workdir: Path, history: int, reps: int) -> dict[str, object]:
    with backend_database(backend, workdir) as (url, _info):
        server = ServerProcess(url, workdir, ["--max-hot-sessions", "16"])
        server.start()
        try:
            with grpc.insecure_channel(server.target, options=CHANNEL_OPTIONS) as channel:
                stub = pb_grpc.ContextServiceStub(channel)
                return _measure_uncompacted(stub, backend, history, reps)
        finally:
            server.stop()


def _measure_uncompacted(
    stub: pb_grpc.ContextServiceStub, backend: str, history: int, reps: int
) -> dict[str, object]:
    log(f"{backend}: building {SMALL} and {history} message sessions without a checkpoint")
    sources = {}
    for n in (SMALL, history):
        sources[n] = create_session(stub, f"nocp{n}")
        append_batched(stub, sources[n], _short_history(n))
    names = ("source_input", "fork", "fork_first_input", "fork_first_input_resumed")
    samples: dict[str, dict[int, list[float]]] = {k: {n: [] for n in sources} for k in names}
    for _ in range(reps):
        for n, sid in sources.items():
            inp = pb.BuildModelInputRequest(session_id=sid)
            ns, held = timed(lambda: stub.BuildModelInput(inp, timeout=TIMEOUT))  # noqa: B023
            samples["source_input"][n].append(ns / 1e6)
            for token, name in (
                ("", "fork_first_input"),
                (held.resume_token, "fork_first_input_resumed"),
            ):
                req = pb.ForkSessionRequest(session_id=sid)
                ns, fork = timed(lambda: stub.ForkSession(req, timeout=TIMEOUT))  # noqa: B023
                samples["fork"][n].append(ns / 1e6)
                first = pb.BuildModelInputRequest(session_id=fork.session_id, resume_token=token)
                ns, mi = timed(lambda: stub.BuildModelInput(first, timeout=TIMEOUT))  # noqa: B023
                samples[name][n].append(ns / 1e6)
                assert mi.messages_offset + len(mi.messages) >= n, (mi.messages_offset, n)
                assert bool(token) == (mi.messages_offset > 0), "the source's token resumes"
                stub.DeleteSession(pb.DeleteSessionRequest(session_id=fork.session_id))
    out: dict[str, object] = {"backend": backend, "small": SMALL, "large": history, "reps": reps}
    for name, by_size in samples.items():
        small_ms, large_ms = (statistics.median(by_size[k]) for k in (SMALL, history))
        out[f"uncompacted_{name}"] = {
            "small_median_ms": round(small_ms, 2),
            "large_median_ms": round(large_ms, 2),
            "ratio": round(large_ms / small_ms, 2),
        }
        log(f"{backend}: no checkpoint, {name}: {small_ms:.2f} ms vs {large_ms:.2f} ms")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--backends", nargs="+", default=["sqlite", "mysql"])
    parser.add_argument("--large", type=int, default=100_000)
    parser.add_argument("--reps", type=int, default=21)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--history", type=int, default=20_000)
    parser.add_argument(
        "--sections", nargs="+", default=["compacted", "uncompacted"], choices=SECTIONS
    )
    parser.add_argument("--json", default="")
    args = parser.parse_args(argv)
    results = []
    for backend in args.backends:
        if "compacted" in args.sections:
            with tempfile.TemporaryDirectory(prefix="ctxw-bench-fork-") as tmp:
                results.append(measure(backend, Path(tmp), args.large, args.reps, args.seed))
        if "uncompacted" in args.sections:
            with tempfile.TemporaryDirectory(prefix="ctxw-bench-fork-") as tmp:
                results.append(measure_uncompacted(backend, Path(tmp), args.history, args.reps))
    print(json.dumps(results, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
