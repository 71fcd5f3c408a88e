"""A fork of a fork made at a seq before its source's own fork point, after a
rewind in the first session's history (issue #25, defect 10).

u1 a1 u2 a2, ``RollbackTurn(to_seq=2)``, u3; F1 forks at the end; F2 forks F1
at seq 4 (so it sees u1 a1 u2, as the first session was before a2); F2 appends
a3 u4 a4. The rows F2 reads from the first session must be seen as they were
at F2's fork point, not at F1's: u2 was rolled back after seq 4 was appended."""

from __future__ import annotations

import uuid
from pathlib import Path

import grpc

from ctxwarden.v1 import context_service_pb2 as pb
from ctxwarden.v1 import context_service_pb2_grpc as pb_grpc
from ctxwarden.v1 import message_pb2 as m
from ctxwarden.v1 import session_pb2 as ses
from tests.support.builders import assistant, user
from tests.support.server import ServerProcess

Stub = pb_grpc.ContextServiceStub


def _input(stub: Stub, sid: str, as_of_seq: int = 0) -> bytes:
    """BuildModelInput without what names the session (its ID, resume_token)."""
    req = pb.BuildModelInputRequest(session_id=sid)
    if as_of_seq:
        req.as_of_seq = as_of_seq
    mi = stub.BuildModelInput(req)
    mi.session_id = mi.resume_token = ""
    return mi.SerializeToString(deterministic=True)


def _texts(stub: Stub, sid: str, as_of_seq: int = 0) -> list[str]:
    mi = pb.ModelInput.FromString(_input(stub, sid, as_of_seq))
    return [x.content[0].text.text for x in mi.messages]


def _append(stub: Stub, sid: str, msg: m.Message, saved: dict[int, bytes]) -> None:
    """Append ``msg``, keeping the input returned just before it (by its seq)."""
    last = stub.GetSession(pb.GetSessionRequest(session_id=sid)).last_seq
    saved[last + 1] = _input(stub, sid)
    stub.AppendMessages(pb.AppendMessagesRequest(session_id=sid, messages=[msg]))


def test_fork_of_a_fork_before_a_rewind_keeps_its_messages(
    backend_url: str, tmp_path: Path
) -> None:
    server = ServerProcess(backend_url, log_dir=tmp_path)
    server.start()
    try:
        with grpc.insecure_channel(server.target) as ch:
            stub = pb_grpc.ContextServiceStub(ch)
            src = f"rw-{uuid.uuid4().hex[:10]}"
            stub.CreateSession(
                pb.CreateSessionRequest(
                    session_id=src, session=ses.Session(system_prompt="s", model="gpt-4o")
                )
            )
            seen: dict[int, bytes] = {}
            for msg in (user("u1"), assistant("a1"), user("u2"), assistant("a2")):
                _append(stub, src, msg, seen)
            stub.RollbackTurn(pb.RollbackTurnRequest(session_id=src, to_seq=2))
            _append(stub, src, user("u3"), seen)
            assert _texts(stub, src) == ["u1", "a1", "u3"]
            f1 = stub.ForkSession(pb.ForkSessionRequest(session_id=src)).session_id
            f2 = stub.ForkSession(pb.ForkSessionRequest(session_id=f1, at_seq=4)).session_id
            saved = {k: v for k, v in seen.items() if k < 4}  # F2 was its source then
            for msg in (assistant("a3"), user("u4"), assistant("a4")):
                _append(stub, f2, msg, saved)
            saved[7] = _input(stub, f2)
            live = ["u1", "a1", "u2", "a3", "u4", "a4"]
            assert _texts(stub, f2) == live
            assert _texts(stub, f2, 7) == live
            for k in range(1, 8):
                assert _input(stub, f2, k) == saved[k], f"as_of_seq={k}"
        server.restart()
        with grpc.insecure_channel(server.target) as ch:
            stub = pb_grpc.ContextServiceStub(ch)
            assert _texts(stub, f2) == live
            assert _input(stub, f2) == saved[7]
            for k in range(1, 8):
                assert _input(stub, f2, k) == saved[k], f"as_of_seq={k} after a restart"
    finally:
        server.stop()
