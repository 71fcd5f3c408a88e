"""A session that exercises every console panel: a compaction, a rollback, a failed
turn, a big (truncated) tool output, pinned state and labels."""

from __future__ import annotations

from dataclasses import dataclass

import grpc
from google.protobuf import field_mask_pb2

from ctxwarden.v1 import context_service_pb2 as pb
from ctxwarden.v1 import context_service_pb2_grpc as pb_grpc
from ctxwarden.v1 import message_pb2 as m
from ctxwarden.v1 import session_pb2 as ses
from tests.support.builders import assistant, failed, result, user

BIG_LINES = 4000
"""Lines of the big tool output (about 150 KB: over the preview and the policy's cut)."""


@dataclass(frozen=True)
class Seeded:
    session_id: str
    big_seq: int
    rolled_back: tuple[int, ...]
    compaction_id: str
    big_text: str


def big_output() -> str:
    return "".join(
        f"line {i:05d}: test_module_{i % 17}.py::test_case_{i} PASSED\n" for i in range(BIG_LINES)
    )


def seed_session(
    channel: grpc.Channel, metadata: tuple[tuple[str, str], ...], session_id: str
) -> Seeded:
    stub = pb_grpc.ContextServiceStub(channel)

    stub.CreateSession(
        pb.CreateSessionRequest(
            session_id=session_id,
            session=ses.Session(
                title="Fix the flaky parser test",
                user_id="alice",
                project_id="parser",
                model="gpt-4.1",
                system_prompt="You are a careful coding agent.",
                labels={"team": "core", "env": "ci"},
                tools=[ses.ToolDefinition(name="read_file", description="Read a file")],
                policy=ses.ContextPolicy(
                    context_window=32000,
                    reserve_tokens=8000,
                    tool_output_max_bytes=4096,
                    tool_output_max_lines=60,
                ),
            ),
        ),
        metadata=metadata,
        timeout=30,
    )

    def append(*messages: m.Message) -> pb.AppendMessagesResponse:
        return stub.AppendMessages(
            pb.AppendMessagesRequest(session_id=session_id, messages=list(messages)),
            metadata=metadata,
            timeout=30,
        )

    for turn in range(6):
        append(
            user(f"Turn {turn}: look at parser/module_{turn}.py and explain what it does. " * 8),
            assistant(calls=[(f"c{turn}", "read_file", {"path": f"parser/module_{turn}.py"})]),
            result(
                f"c{turn}", f"def parse_{turn}(text):\n    return text.split()\n" * 20, "read_file"
            ),
            assistant(f"Module {turn} splits text on whitespace. " * 10),
        )
    compaction = stub.Compact(
        pb.CompactRequest(session_id=session_id, keep_recent_tokens=400),
        metadata=metadata,
        timeout=60,
    )
    text = big_output()
    answer = append(
        user("Now run the whole test suite."),
        assistant(calls=[("big", "run_tests", {"cmd": "pytest -q"})]),
        result("big", text, "run_tests"),
    )
    big_seq = answer.messages[-1].seq
    append(assistant("Everything passed; the flaky test did not fail this time."))
    append(user("Try the flaky test 100 times."), failed("upstream 529: overloaded"))
    rolled = stub.RollbackTurn(
        pb.RollbackTurnRequest(session_id=session_id), metadata=metadata, timeout=30
    )
    append(user("Try the flaky test 100 times, please."), failed("request timed out"))
    note = user("(operator note: this run is on the CI machine)")
    note.visibility = m.MESSAGE_VISIBILITY_HISTORY_ONLY
    append(note)
    append(user("Go on."), assistant("It failed 3 times of 100."))
    stub.UpdateSession(
        pb.UpdateSessionRequest(
            session=ses.Session(session_id=session_id, pinned_state="goal: fix test_flaky"),
            update_mask=field_mask_pb2.FieldMask(paths=["pinned_state"]),
        ),
        metadata=metadata,
        timeout=30,
    )
    return Seeded(
        session_id, big_seq, tuple(rolled.rolled_back_seqs), compaction.compaction_id, text
    )


@dataclass(frozen=True)
class Lineage:
    """A parent (8 messages, later rolled back to seq 2 and archived), its fork at
    seq 5 (inherits 1-4, adds 5-6) and a fork of that fork at its end (adds 7)."""

    project: str
    parent: str
    fork: str
    grandchild: str


def seed_lineage(channel: grpc.Channel, metadata: tuple[tuple[str, str], ...], run: str) -> Lineage:
    stub = pb_grpc.ContextServiceStub(channel)
    project = f"lineage-{run}"
    parent, fork, grandchild = f"{project}-parent", f"{project}-fork", f"{project}-fork2"
    stub.CreateSession(
        pb.CreateSessionRequest(
            session_id=parent,
            session=ses.Session(
                title="Parent", project_id=project, model="gpt-4.1", system_prompt="Be brief."
            ),
        ),
        metadata=metadata,
        timeout=30,
    )

    def append(sid: str, *messages: m.Message) -> None:
        stub.AppendMessages(
            pb.AppendMessagesRequest(session_id=sid, messages=list(messages)),
            metadata=metadata,
            timeout=30,
        )

    for turn in range(4):
        append(parent, user(f"parent question {turn} " * 5), assistant(f"parent answer {turn}"))
    stub.ForkSession(
        pb.ForkSessionRequest(session_id=parent, at_seq=5, new_session_id=fork),
        metadata=metadata,
        timeout=30,
    )
    append(fork, user("fork question " * 7), assistant("fork answer"))
    stub.ForkSession(
        pb.ForkSessionRequest(session_id=fork, new_session_id=grandchild),
        metadata=metadata,
        timeout=30,
    )
    append(grandchild, user("grandchild question " * 3))
    # The parent rewinds past the fork point: the forks still see seqs 3 and 4.
    stub.RollbackTurn(
        pb.RollbackTurnRequest(session_id=parent, to_seq=2), metadata=metadata, timeout=30
    )
    stub.ArchiveSession(pb.ArchiveSessionRequest(session_id=parent), metadata=metadata, timeout=30)
    return Lineage(project, parent, fork, grandchild)
