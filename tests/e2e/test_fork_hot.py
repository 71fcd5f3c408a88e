"""The fork of a hot session with a long history and no checkpoint, at its end: made
from the source's context in memory (shared, not derived again), it still is the
source's replay at the fork point, and what another server restores of it from the
database, resume token included. A client holding the source's input resumes on the
fork with the source's resume_token (on the server that made the fork)."""

from __future__ import annotations

import uuid
from pathlib import Path

import grpc

from ctxwarden.v1 import context_service_pb2 as pb
from ctxwarden.v1 import context_service_pb2_grpc as pb_grpc
from ctxwarden.v1 import message_pb2 as m
from ctxwarden.v1 import session_pb2 as ses
from tests.support.builders import assistant, result, user
from tests.support.server import ServerProcess

Stub = pb_grpc.ContextServiceStub
HISTORY = 20_000


def _turns(n: int) -> list[m.Message]:
    out: list[m.Message] = []
    i = 0
    while len(out) < n:
        call = f"c{i}"
        out += [
            user(f"step {i}: look at file {i}"),
            assistant("", calls=[(call, "read", {"path": f"f{i}.py"})]),
            result(call, f"contents of f{i}.py " * 3, name="read"),
            assistant(f"f{i}.py read"),
        ]
        i += 1
    return out[:n]


def _input(stub: Stub, sid: str, as_of_seq: int = 0, *, keep_token: bool = False) -> bytes:
    req = pb.BuildModelInputRequest(session_id=sid)
    if as_of_seq:
        req.as_of_seq = as_of_seq
    mi = stub.BuildModelInput(req, timeout=120)
    mi.session_id = ""
    if not keep_token:
        mi.resume_token = ""
    return mi.SerializeToString(deterministic=True)


def test_a_hot_fork_of_a_long_history_is_its_sources_replay(
    stub: Stub, backend_url: str, tmp_path: Path
) -> None:
    src = f"long-{uuid.uuid4().hex[:12]}"
    stub.CreateSession(pb.CreateSessionRequest(session=ses.Session(model="gpt-4o"), session_id=src))
    history = _turns(HISTORY)
    for k in range(0, HISTORY, 1000):
        stub.AppendMessages(
            pb.AppendMessagesRequest(session_id=src, messages=history[k : k + 1000]), timeout=120
        )
    stub.AppendMessages(  # an open call last: the view closes it with a synthetic result
        pb.AppendMessagesRequest(
            session_id=src, messages=[assistant("", calls=[("open", "read", {"path": "x"})])]
        )
    )
    before = _input(stub, src)  # hot, its view built
    held = stub.BuildModelInput(pb.BuildModelInputRequest(session_id=src), timeout=120)
    fork = stub.ForkSession(pb.ForkSessionRequest(session_id=src))
    assert fork.parent_seq == HISTORY + 1 and fork.last_seq == HISTORY + 1
    # A client holding the source's input sends its token: it gets only the rest.
    resumed = stub.BuildModelInput(
        pb.BuildModelInputRequest(session_id=fork.session_id, resume_token=held.resume_token)
    )
    k = int(held.resume_token.split(".")[0])  # all but the synthetic result of the open call
    assert resumed.messages_offset == k == HISTORY + 1 and len(resumed.messages) == 1
    assert [*held.messages[:k], *resumed.messages] == list(held.messages)
    hot = _input(stub, fork.session_id, keep_token=True)
    replay = _input(stub, src, HISTORY + 2)
    assert _input(stub, fork.session_id) == replay == before
    # Another server restores the fork from its rows: the same input, the same token.
    other = ServerProcess(backend_url, log_dir=tmp_path)
    other.start()
    try:
        with grpc.insecure_channel(other.target) as channel:
            restored = pb_grpc.ContextServiceStub(channel)
            cold = _input(restored, fork.session_id, keep_token=True)
            # The source's token is taken by the server that made the fork only.
            req = pb.BuildModelInputRequest(
                session_id=fork.session_id, resume_token=held.resume_token
            )
            assert restored.BuildModelInput(req).messages_offset == 0
    finally:
        other.stop()
    assert cold == hot
    # They go their own ways: the tool result reaches the fork only.
    stub.AppendMessages(
        pb.AppendMessagesRequest(session_id=fork.session_id, messages=[result("open", "x!")])
    )
    assert _input(stub, src) == before
    mine = stub.BuildModelInput(pb.BuildModelInputRequest(session_id=fork.session_id))
    assert mine.messages[-1].content[0].text.text == "x!" and len(mine.messages) == HISTORY + 2
