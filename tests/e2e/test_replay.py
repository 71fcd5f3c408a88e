"""Exact replay: BuildModelInput(as_of_seq=N) reproduces, byte for byte, the
input returned just before message N was appended, across compactions,
rollbacks, settings changes and tool truncation, before and after a restart."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import grpc
from google.protobuf import field_mask_pb2

from ctxwarden.v1 import context_service_pb2 as pb
from ctxwarden.v1 import context_service_pb2_grpc as pb_grpc
from ctxwarden.v1 import message_pb2 as m
from ctxwarden.v1 import session_pb2 as ses
from tests.support.builders import assistant, failed, result, user
from tests.support.errors import expect_error
from tests.support.server import ServerProcess


class Recorder:
    """Drives a session and keeps the last BuildModelInput before each append."""

    def __init__(self, stub: pb_grpc.ContextServiceStub, sid: str) -> None:
        self.stub, self.sid = stub, sid
        self.saved: dict[int, bytes] = {}

    def build(self, **kw: Any) -> pb.ModelInput:
        return self.stub.BuildModelInput(
            pb.BuildModelInputRequest(session_id=self.sid, max_output_tokens=2000, **kw)
        )

    def append(self, *msgs: m.Message) -> None:
        mi = self.build()
        self.saved[mi.last_seq + 1] = mi.SerializeToString(deterministic=True)
        self.stub.AppendMessages(pb.AppendMessagesRequest(session_id=self.sid, messages=list(msgs)))

    def compact(self, summary: str) -> pb.Compaction:
        plan = self.stub.PrepareCompaction(pb.PrepareCompactionRequest(session_id=self.sid))
        return self.stub.CommitCompaction(
            pb.CommitCompactionRequest(
                session_id=self.sid,
                plan_id=plan.plan_id,
                summary=summary,
                turn_prefix_summary="prefix" if plan.split_turn else "",
            )
        )

    def update(self, paths: list[str], **fields: Any) -> None:
        self.stub.UpdateSession(
            pb.UpdateSessionRequest(
                session=ses.Session(session_id=self.sid, **fields),
                update_mask=field_mask_pb2.FieldMask(paths=paths),
            )
        )


def _turn(r: Recorder, i: int, big: bool = False, usage: int = 0) -> None:
    out = "\n".join(f"line {k} of output {i}" for k in range(60 if big else 3))
    r.append(user(f"step {i}: do the thing " + "u" * 50))
    call = assistant(f"ok {i}", [(f"c{i}", "read", {"path": f"f{i}.py"})])
    if usage:
        call.usage.CopyFrom(m.Usage(input_tokens=usage, output_tokens=20))
    r.append(call)
    r.append(result(f"c{i}", out, name="read"))
    r.append(assistant(f"done {i} " + "a" * 40))


def _script(r: Recorder) -> None:
    for i in range(4):
        _turn(r, i, big=i % 2 == 0, usage=400 + 90 * i)
    r.append(failed("503 overloaded"))
    r.stub.RollbackTurn(pb.RollbackTurnRequest(session_id=r.sid))
    r.compact("first summary")
    for i in range(4, 7):
        _turn(r, i, big=True, usage=900 + 50 * i)
    r.update(["system_prompt", "pinned_state"], system_prompt="new rules", pinned_state="pin 2")
    _turn(r, 7)
    r.update(["policy"], policy=ses.ContextPolicy(keep_recent_tokens=80, tool_output_max_lines=10))
    _turn(r, 8, big=True)
    second = r.compact("second summary")
    _turn(r, 9)
    r.update(["model"], model="gpt-4o")  # new tokenizer: stored counts are recomputed
    _turn(r, 10, big=True)
    # Rewind to before the second checkpoint: it is superseded.
    r.stub.RollbackTurn(pb.RollbackTurnRequest(session_id=r.sid, to_seq=second.first_kept_seq - 3))
    _turn(r, 11)
    r.append(user("the end"))


def test_as_of_seq_reproduces_every_input(backend_url: str, tmp_path: Path) -> None:
    server = ServerProcess(backend_url, log_dir=tmp_path)
    server.start()
    try:
        with grpc.insecure_channel(server.target) as ch:
            stub = pb_grpc.ContextServiceStub(ch)
            sid = f"replay-{uuid.uuid4().hex[:8]}"
            stub.CreateSession(
                pb.CreateSessionRequest(
                    session_id=sid,
                    session=ses.Session(
                        system_prompt="rules",
                        pinned_state="pin 1",
                        policy=ses.ContextPolicy(keep_recent_tokens=120, tool_output_max_lines=20),
                    ),
                )
            )
            r = Recorder(stub, sid)
            _script(r)
            now = r.build()
            r.saved[now.last_seq + 1] = now.SerializeToString(deterministic=True)
            assert len(r.saved) > 40
            kinds = {pb.ModelInput.FromString(b).compaction_id for b in r.saved.values()}
            assert len(kinds) == 3  # before, after the first and after the second compaction

            def check(stub: pb_grpc.ContextServiceStub) -> None:
                for n, expected in sorted(r.saved.items()):
                    got = stub.BuildModelInput(
                        pb.BuildModelInputRequest(
                            session_id=sid, max_output_tokens=2000, as_of_seq=n
                        )
                    ).SerializeToString(deterministic=True)
                    assert got == expected, f"as_of_seq={n} differs"

            check(stub)
            expect_error(
                grpc.StatusCode.INVALID_ARGUMENT,
                "INVALID_SEQ",
                stub.BuildModelInput,
                pb.BuildModelInputRequest(session_id=sid, as_of_seq=now.last_seq + 2),
            )
        server.restart()
        with grpc.insecure_channel(server.target) as ch:
            check(pb_grpc.ContextServiceStub(ch))
    finally:
        server.stop()
