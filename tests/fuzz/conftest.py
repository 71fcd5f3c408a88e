"""One fuzzed ``ctxwarden serve`` per backend and a pool of real sessions.

The fuzz tests' hypothesis settings are ``harness.fuzz_settings``: a fixed,
derandomized budget in CI, or ``CTXWARDEN_FUZZ_EXAMPLES=N`` random examples per
test for a longer local hunt (see tests/fuzz/README.md).
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from ctxwarden.v1 import context_service_pb2 as pb
from ctxwarden.v1 import context_service_pb2_grpc as pb_grpc
from ctxwarden.v1 import memory_pb2
from ctxwarden.v1 import message_pb2 as m
from ctxwarden.v1 import session_pb2 as ses
from tests.fuzz.harness import FuzzTarget, Pool
from tests.support.builders import assistant, failed, result, user
from tests.support.server import ServerProcess

SERVER_ARGS = [
    "--summarizer",
    "extractive",
    # A tiny hot set: most calls restore their session from the database, so
    # fuzzed content goes through the storage round trip, not just memory.
    "--max-hot-sessions",
    "3",
]


def now_us() -> int:
    return time.time_ns() // 1000


def _channel(target: str) -> grpc.Channel:
    return grpc.insecure_channel(
        target,
        options=[
            ("grpc.max_receive_message_length", -1),
            ("grpc.max_send_message_length", -1),
        ],
    )


POOL_SHAPES: dict[str, dict[str, object]] = {
    "plain": {},
    "gpt": {"model": "gpt-4o", "system_prompt": "You are terse."},
    "claude": {"model": "claude-sonnet-4-5", "policy": ses.ContextPolicy(keep_recent_tokens=40)},
    "gemini": {"model": "gemini-2.5-pro", "policy": ses.ContextPolicy(keep_tool_results=1)},
    "tiny": {
        "policy": ses.ContextPolicy(
            context_window=1200,
            reserve_tokens=200,
            keep_recent_tokens=60,
            tool_output_max_bytes=64,
            tool_output_max_lines=3,
        ),
        "tools": [
            ses.ToolDefinition(name="read", description="Read a file", parameters_json="{}"),
            ses.ToolDefinition(name="bash"),
        ],
        "pinned_state": "task: fuzz",
    },
}


COMPACTABLE_SHAPES: dict[str, dict[str, object]] = {
    "gpt": {"model": "gpt-4o", "policy": ses.ContextPolicy(keep_recent_tokens=200)},
    "gemini": {
        "model": "gemini-2.5-pro",
        "pinned_state": "</pinned-state>\u202e",
        "policy": ses.ContextPolicy(keep_tool_results=1, tool_output_max_bytes=100),
    },
}


def _history(i: int) -> list[m.Message]:
    """A small realistic transcript; call ids repeat across sessions on purpose."""
    return [
        user(f"question {i}: what is in a.txt? " * 4, message_id=f"seed-{i}-1"),
        assistant("Let me look.", [("call-1", "read", {"path": "a.txt"})]),
        result("call-1", "line\n" * 40, name="read"),
        assistant(f"It has forty lines ({i}).", [("call-2", "edit", {"path": "b.txt"})]),
        result("call-2", "ok", name="edit"),
        user("and now? " * 10),
        assistant("Done.", stop=m.STOP_REASON_STOP),
        failed("429 Too Many Requests"),
    ]


def _make_pool(channel: grpc.Channel) -> Pool:
    stub = pb_grpc.ContextServiceStub(channel)
    sessions: list[str] = []
    for i, (name, shape) in enumerate(POOL_SHAPES.items()):
        sid = f"fuzz-{name}"
        stub.CreateSession(
            pb.CreateSessionRequest(session=ses.Session(**shape), session_id=sid),  # type: ignore[arg-type]
            timeout=30,
        )
        stub.AppendMessages(
            pb.AppendMessagesRequest(session_id=sid, messages=_history(i)), timeout=30
        )
        sessions.append(sid)
    # One session with a checkpoint from the start (agent-side compaction).
    plan = stub.PrepareCompaction(
        pb.PrepareCompactionRequest(session_id="fuzz-claude", keep_recent_tokens=40), timeout=30
    )
    stub.CommitCompaction(
        pb.CommitCompactionRequest(
            session_id="fuzz-claude",
            plan_id=plan.plan_id,
            summary="## Goal\nFuzz the server.",
            turn_prefix_summary="prefix" if plan.split_turn else "",
        ),
        timeout=30,
    )
    compactable = []
    for name, shape in COMPACTABLE_SHAPES.items():
        sid = f"fuzz-compact-{name}"
        stub.CreateSession(
            pb.CreateSessionRequest(session=ses.Session(**shape), session_id=sid),  # type: ignore[arg-type]
            timeout=30,
        )
        compactable.append(sid)
    victims = []
    for i in range(4):
        sid = f"fuzz-victim-{i}"
        stub.CreateSession(pb.CreateSessionRequest(session_id=sid), timeout=30)
        victims.append(sid)
    tokens = {
        "ListSessions": stub.ListSessions(
            pb.ListSessionsRequest(page_size=1), timeout=30
        ).next_page_token,
        "ListMessages": stub.ListMessages(
            pb.ListMessagesRequest(session_id="fuzz-plain", page_size=1), timeout=30
        ).next_page_token,
    }
    memories = [
        stub.CreateMemory(
            memory_pb2.CreateMemoryRequest(
                memory=memory_pb2.Memory(user_id=user, text=fact, key=key)
            ),
            timeout=30,
        ).memory_id
        for user, fact, key in [("alice", "Prefers tabs.", "editor"), ("bob", "Writes Go.", "")]
    ]
    return Pool(sessions, victims, tokens, compactable, memories)


def _report(target: FuzzTarget) -> None:
    """Status codes seen (shown with ``-s``); tolerated known bugs become a warning."""
    counts = target.verdicts.codes
    print(f"\nfuzzed {sum(counts.values())} calls on {target.url.split(':')[0]}:")
    for key, n in sorted(counts.items()):
        print(f"  {key}: {n}")
    if target.verdicts.tolerated:
        warnings.warn(
            f"fuzzing hit known server bugs (see tests/fuzz/harness.KNOWN_BUGS): "
            f"{dict(target.verdicts.tolerated)}",
            stacklevel=1,
        )


@pytest.fixture(scope="session")
def fuzz(backend_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[FuzzTarget]:
    """The fuzzed server of this backend, with its session pool."""
    since = now_us()
    server = ServerProcess(
        backend_url, log_dir=Path(tmp_path_factory.mktemp("fuzz-logs")), extra_args=SERVER_ARGS
    )
    server.start()
    channel = _channel(server.target)
    try:
        target = FuzzTarget(server, channel, backend_url, since, _make_pool(channel))
        target.assert_healthy()
        yield target
        _report(target)
    finally:
        channel.close()
        server.stop()
