"""The memory block's history (issue #25, defect 8): a replay
(``BuildModelInput(as_of_seq=k)``) and a fork at k carry the block that was in
force just before message k was appended, not today's, across refreshes (two
at one seq too), a new budget and compactions, before and after a restart."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import grpc
from google.protobuf import field_mask_pb2

from ctxwarden.v1 import context_service_pb2 as pb
from ctxwarden.v1 import context_service_pb2_grpc as pb_grpc
from ctxwarden.v1 import memory_pb2 as mem
from ctxwarden.v1 import session_pb2 as ses
from tests.support.builders import assistant, result, user
from tests.support.server import ServerProcess

Stub = pb_grpc.ContextServiceStub
RENDERED = pb.MODEL_INPUT_FORMAT_ANTHROPIC_MESSAGES


def _uid(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


class Recorder:
    """Drives a session and keeps, for each k, the last input (native bytes and
    rendered JSON) it returned while its last_seq was k - 1."""

    def __init__(self, stub: Stub, sid: str, user_id: str) -> None:
        self.stub, self.sid, self.user_id = stub, sid, user_id
        self.native: dict[int, bytes] = {}
        self.rendered: dict[int, str] = {}
        self.blocks: dict[int, str] = {}

    def build(self, **kw: Any) -> pb.ModelInput:
        mi = self.stub.BuildModelInput(pb.BuildModelInputRequest(session_id=self.sid, **kw))
        k = mi.last_seq + 1
        self.native[k] = mi.SerializeToString(deterministic=True)
        self.blocks[k] = mi.memory_block
        fmt = pb.BuildModelInputRequest(session_id=self.sid, format=RENDERED)
        self.rendered[k] = self.stub.BuildModelInput(fmt).rendered_json
        return mi

    def remember(self, text: str) -> None:
        self.stub.CreateMemory(
            mem.CreateMemoryRequest(memory=mem.Memory(text=text, user_id=self.user_id))
        )

    def turn(self, i: int) -> None:
        for msg in (
            user(f"turn {i}: please read file{i}.py " + "u" * 80),
            assistant(f"reading {i}", [(f"c{i}", "read", {"path": f"src/file{i}.py"})]),
            result(f"c{i}", f"contents of file{i} " + "r" * 120, name="read"),
            assistant(f"file{i} defines thing{i} " + "a" * 60),
        ):
            self.build()
            self.stub.AppendMessages(pb.AppendMessagesRequest(session_id=self.sid, messages=[msg]))
        self.build()

    def compact(self) -> None:
        plan = self.stub.PrepareCompaction(pb.PrepareCompactionRequest(session_id=self.sid))
        self.stub.CommitCompaction(
            pb.CommitCompactionRequest(
                session_id=self.sid,
                plan_id=plan.plan_id,
                summary=f"summary at {plan.first_kept_seq}",
                turn_prefix_summary="PREFIX" if plan.split_turn else "",
            )
        )
        self.build()

    def budget(self, tokens: int) -> None:
        self.stub.UpdateSession(
            pb.UpdateSessionRequest(
                session=ses.Session(
                    session_id=self.sid,
                    policy=ses.ContextPolicy(memory_max_tokens=tokens, keep_recent_tokens=60),
                ),
                update_mask=field_mask_pb2.FieldMask(paths=["policy"]),
            )
        )
        self.build()


def _script(r: Recorder) -> None:
    r.remember("fact one: the user likes tea")
    r.stub.CreateSession(
        pb.CreateSessionRequest(
            session_id=r.sid,
            session=ses.Session(
                system_prompt="You are careful.",
                model="gpt-4o",
                user_id=r.user_id,
                policy=ses.ContextPolicy(memory_max_tokens=400, keep_recent_tokens=60),
            ),
        )
    )
    r.build()
    r.turn(0)
    r.remember("fact two: the user writes Go")
    r.turn(1)  # frozen: fact two is not in the block yet
    r.build(refresh_memory=True)
    r.remember("fact three: the user lives in Lyon")
    r.build(refresh_memory=True)  # a second refresh at the same seq: the later one counts
    r.turn(2)
    r.remember("fact four: the user prefers short answers")
    r.turn(3)
    r.compact()  # the block is selected again
    r.turn(4)
    r.remember("fact five: the user is on call on Mondays")
    r.budget(600)  # a new budget selects it again
    r.turn(5)


def _check(stub: Stub, r: Recorder) -> None:
    for k, expected in sorted(r.native.items()):
        req = pb.BuildModelInputRequest(session_id=r.sid, as_of_seq=k)
        assert stub.BuildModelInput(req).SerializeToString(deterministic=True) == expected, k
        req.format = RENDERED
        assert stub.BuildModelInput(req).rendered_json == r.rendered[k], k


def _without_ids(mi: pb.ModelInput) -> bytes:
    mi.session_id = mi.resume_token = ""
    return mi.SerializeToString(deterministic=True)


def test_replays_and_forks_carry_the_block_of_their_time(backend_url: str, tmp_path: Path) -> None:
    server = ServerProcess(backend_url, log_dir=tmp_path)
    server.start()
    try:
        with grpc.insecure_channel(server.target) as ch:
            stub = pb_grpc.ContextServiceStub(ch)
            r = Recorder(stub, _uid("mh"), _uid("u"))
            _script(r)
            assert len(set(r.blocks.values())) == 4  # created, refreshed twice, compacted, budget
            _check(stub, r)
            changes = [k for k in sorted(r.blocks) if r.blocks[k] != r.blocks.get(k - 1, "")]
            for k in [1, *changes, *(c - 1 for c in changes[1:]), max(r.blocks)]:
                fork = stub.ForkSession(pb.ForkSessionRequest(session_id=r.sid, at_seq=k))
                got = stub.BuildModelInput(pb.BuildModelInputRequest(session_id=fork.session_id))
                assert got.memory_block == r.blocks[k], k
                want = pb.ModelInput.FromString(r.native[k])
                assert _without_ids(got) == _without_ids(want), k
                # The fork's own history starts with that block too.
                again = pb.BuildModelInputRequest(session_id=fork.session_id, as_of_seq=k)
                assert stub.BuildModelInput(again).memory_block == r.blocks[k], k
        server.restart()
        with grpc.insecure_channel(server.target) as ch:
            _check(pb_grpc.ContextServiceStub(ch), r)
    finally:
        server.stop()
