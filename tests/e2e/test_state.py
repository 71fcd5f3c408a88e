"""Session, user and project state: set with CreateSession and AppendMessages'
state_delta, atomically with the messages, once per request_id; read by GetSession;
kept across restarts; and a deleted session's ID used again."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf import json_format
from google.protobuf.struct_pb2 import Struct

from ctxwarden.v1 import context_service_pb2 as pb
from ctxwarden.v1 import context_service_pb2_grpc as pb_grpc
from ctxwarden.v1 import session_pb2 as ses
from tests.e2e.conftest import Stub
from tests.e2e.test_messages import append
from tests.support.builders import assistant, result, user
from tests.support.errors import error_info, expect_error
from tests.support.server import ServerProcess


def struct(value: dict[str, Any]) -> Struct:
    out = Struct()
    out.update(value)
    return out


def plain(value: Struct) -> dict[str, Any]:
    return json_format.MessageToDict(value)


def delta(**parts: dict[str, Any]) -> pb.StateDelta:
    return pb.StateDelta(**{k: struct(v) for k, v in parts.items()})


def create(stub: Stub, project: str, user_id: str, state: dict[str, Any] | None = None) -> str:
    sid = f"st-{uuid.uuid4().hex[:12]}"
    session = ses.Session(project_id=project, user_id=user_id)
    if state is not None:
        session.state.CopyFrom(struct(state))
    made = stub.CreateSession(pb.CreateSessionRequest(session_id=sid, session=session))
    assert plain(made.state) == (state or {})
    return sid


def get(stub: Stub, sid: str) -> ses.Session:
    return stub.GetSession(pb.GetSessionRequest(session_id=sid))


def test_deltas_set_and_delete_keys_with_the_messages(stub: Stub) -> None:
    project = f"p-{uuid.uuid4().hex[:8]}"
    sid = create(stub, project, "u1", {"step": 1, "keep": "me"})
    answer = append(
        stub,
        sid,
        user("hi"),
        state_delta=delta(session={"step": 2, "plan": {"a": [1, "x"]}, "keep": None}),
    )
    assert answer.last_seq == 1
    s = get(stub, sid)
    assert plain(s.state) == {"step": 2, "plan": {"a": [1, "x"]}}
    assert plain(s.user_state) == {} and plain(s.project_state) == {}
    # ListSessions shows the session's own state.
    listed = stub.ListSessions(pb.ListSessionsRequest(project_id=project))
    assert [plain(x.state) for x in listed.sessions] == [{"step": 2, "plan": {"a": [1, "x"]}}]


def test_user_and_project_states_are_shared(stub: Stub) -> None:
    project, other = f"p-{uuid.uuid4().hex[:8]}", f"p-{uuid.uuid4().hex[:8]}"
    a, b = create(stub, project, "alice"), create(stub, project, "alice")
    c, d = create(stub, project, "bob"), create(stub, other, "alice")
    append(stub, a, user("x"), state_delta=delta(user={"theme": "dark"}, project={"repo": "r1"}))
    append(stub, c, user("y"), state_delta=delta(project={"ci": "green"}))
    assert plain(get(stub, b).user_state) == {"theme": "dark"}
    assert plain(get(stub, b).project_state) == {"repo": "r1", "ci": "green"}
    assert plain(get(stub, c).user_state) == {}
    assert plain(get(stub, d).user_state) == {} and plain(get(stub, d).project_state) == {}
    append(stub, b, state_delta=delta(user={"theme": None, "lang": "en"}))
    assert plain(get(stub, a).user_state) == {"lang": "en"}


def test_an_append_of_only_a_state_delta(stub: Stub) -> None:
    sid = create(stub, "p", f"u-{uuid.uuid4().hex[:6]}")
    append(stub, sid, user("q"))
    answer = append(stub, sid, state_delta=delta(session={"k": 1}), expected_last_seq=1)
    assert answer.last_seq == 1 and list(answer.messages) == []
    assert plain(get(stub, sid).state) == {"k": 1} and get(stub, sid).last_seq == 1
    expect_error(
        grpc.StatusCode.ABORTED,
        "LAST_SEQ_MISMATCH",
        append,
        stub,
        sid,
        state_delta=delta(session={"k": 2}),
        expected_last_seq=0,
    )
    assert plain(get(stub, sid).state) == {"k": 1}
    expect_error(grpc.StatusCode.INVALID_ARGUMENT, "MISSING_FIELD", append, stub, sid)


def test_a_delta_is_applied_once_per_request_id(stub: Stub) -> None:
    sid = create(stub, "p", f"u-{uuid.uuid4().hex[:6]}")
    request = pb.AppendMessagesRequest(
        session_id=sid, messages=[user("q")], request_id="r1", state_delta=delta(session={"n": 1})
    )
    first = stub.AppendMessages(request)
    append(stub, sid, state_delta=delta(session={"n": 2}))
    assert stub.AppendMessages(request) == first  # answered from the record, not applied again
    assert plain(get(stub, sid).state) == {"n": 2} and get(stub, sid).last_seq == 1


def test_a_failed_append_changes_no_state(stub: Stub) -> None:
    project = f"p-{uuid.uuid4().hex[:8]}"
    sid = create(stub, project, "u")
    append(stub, sid, user("q"), assistant(calls=[("c1", "read", {})]), result("c1", "x"))
    expect_error(
        grpc.StatusCode.FAILED_PRECONDITION,
        "TOOL_CALL_ALREADY_ANSWERED",
        append,
        stub,
        sid,
        result("c1", "again"),
        state_delta=delta(session={"a": 1}, user={"a": 1}, project={"a": 1}),
    )
    s = get(stub, sid)
    assert plain(s.state) == {} and plain(s.user_state) == {} and plain(s.project_state) == {}


def test_states_are_bounded(stub: Stub) -> None:
    project = f"p-{uuid.uuid4().hex[:8]}"
    sid = create(stub, project, "u")
    big = "x" * 40_000
    for scope in ("session", "user", "project"):
        append(stub, sid, state_delta=delta(**{scope: {"a": big}}))
        err = expect_error(
            grpc.StatusCode.INVALID_ARGUMENT,
            "STATE_TOO_LARGE",
            append,
            stub,
            sid,
            user("not stored"),
            state_delta=delta(**{scope: {"b": big}}),
        )
        assert error_info(err).metadata["limit_bytes"] == str(64 * 1024)
    assert get(stub, sid).last_seq == 0
    expect_error(
        grpc.StatusCode.INVALID_ARGUMENT,
        "STATE_TOO_LARGE",
        stub.CreateSession,
        pb.CreateSessionRequest(session=ses.Session(state=struct({"a": "y" * 70_000}))),
    )


# -- across restarts, and a deleted session's ID used again ---------------------------


@pytest.fixture
def own_server(backend_url: str, tmp_path: Path) -> Iterator[ServerProcess]:
    proc = ServerProcess(backend_url, log_dir=tmp_path)
    proc.start()
    try:
        yield proc
    finally:
        proc.stop()


def _stub(proc: ServerProcess) -> tuple[grpc.Channel, pb_grpc.ContextServiceStub]:
    channel = grpc.insecure_channel(proc.target)
    return channel, pb_grpc.ContextServiceStub(channel)


def test_state_survives_a_restart(own_server: ServerProcess) -> None:
    project = f"p-{uuid.uuid4().hex[:8]}"
    channel, stub = _stub(own_server)
    with channel:
        sid = create(stub, project, "u", {"a": 1})
        append(stub, sid, user("q"), state_delta=delta(session={"b": 2}, user={"c": 3}))
    own_server.restart()
    channel, stub = _stub(own_server)
    with channel:
        s = get(stub, sid)
        assert plain(s.state) == {"a": 1, "b": 2} and plain(s.user_state) == {"c": 3}
        append(stub, sid, user("more"), state_delta=delta(session={"a": None}))
        assert plain(get(stub, sid).state) == {"b": 2}


def test_a_deleted_sessions_id_makes_a_fresh_session(own_server: ServerProcess) -> None:
    sid = f"reuse-{uuid.uuid4().hex[:10]}"
    channel, stub = _stub(own_server)
    with channel:
        old = ses.Session(state=struct({"old": 1}), policy=ses.ContextPolicy(keep_recent_tokens=5))
        first = stub.CreateSession(
            pb.CreateSessionRequest(session_id=sid, request_id="create-1", session=old)
        )
        append(stub, sid, user("old question"), assistant("old answer"), request_id="a1")
        append(stub, sid, user("old follow-up " * 5), assistant("old reply " * 5))
        plan = stub.PrepareCompaction(pb.PrepareCompactionRequest(session_id=sid))
        stub.CommitCompaction(
            pb.CommitCompactionRequest(
                session_id=sid, plan_id=plan.plan_id, summary="old", turn_prefix_summary="old"
            )
        )
        chat = pb.BuildModelInputRequest(session_id=sid, format=pb.MODEL_INPUT_FORMAT_OPENAI_CHAT)
        assert "old reply" in stub.BuildModelInput(chat).rendered_json  # cached renderings
        stub.DeleteSession(pb.DeleteSessionRequest(session_id=sid))
        expect_error(grpc.StatusCode.NOT_FOUND, "SESSION_NOT_FOUND", get, stub, sid)
        again = stub.CreateSession(
            pb.CreateSessionRequest(session_id=sid, session=ses.Session(title="second"))
        )
        assert again.last_seq == 0 and plain(again.state) == {}
        assert again.create_time.ToMicroseconds() > first.create_time.ToMicroseconds()
        _check_fresh(stub, sid)
        assert "old" not in stub.BuildModelInput(chat).rendered_json
        # A request_id of the old incarnation is the new one's to use.
        assert append(stub, sid, user("new"), request_id="a1").last_seq == 1
        # A retried CreateSession still returns the first result (no new session).
        retried = stub.CreateSession(
            pb.CreateSessionRequest(session_id=sid, request_id="create-1", session=old)
        )
        assert retried.session_id == sid and retried.title == "second"
        expect_error(
            grpc.StatusCode.ALREADY_EXISTS,
            "SESSION_ALREADY_EXISTS",
            stub.CreateSession,
            pb.CreateSessionRequest(session_id=sid),
        )
    own_server.restart()
    channel, stub = _stub(own_server)
    with channel:
        listed = stub.ListMessages(pb.ListMessagesRequest(session_id=sid, include_rolled_back=True))
        assert [m.content[0].text.text for m in listed.messages] == ["new"]
        stub.DeleteSession(pb.DeleteSessionRequest(session_id=sid))
        third = stub.CreateSession(pb.CreateSessionRequest(session_id=sid))
        assert third.last_seq == 0
        _check_fresh(stub, sid)


def _check_fresh(stub: pb_grpc.ContextServiceStub, sid: str) -> None:
    listed = stub.ListMessages(pb.ListMessagesRequest(session_id=sid, include_rolled_back=True))
    assert list(listed.messages) == []
    mi = stub.BuildModelInput(pb.BuildModelInputRequest(session_id=sid))
    assert list(mi.messages) == [] and mi.last_seq == 0 and mi.compaction_id == ""
    assert list(stub.ListCompactions(pb.ListCompactionsRequest(session_id=sid)).compactions) == []


def test_a_resume_token_of_a_deleted_session_does_not_resume_the_new_one(stub: Stub) -> None:
    """Same ID, settings, message_ids and sizes, different content: the new
    session's input comes back whole, never spliced onto the old one's."""
    sid = f"resume-{uuid.uuid4().hex[:10]}"
    stub.CreateSession(pb.CreateSessionRequest(session_id=sid))
    append(stub, sid, user("old text", message_id="m1"))
    held = stub.BuildModelInput(pb.BuildModelInputRequest(session_id=sid))
    assert held.resume_token
    stub.DeleteSession(pb.DeleteSessionRequest(session_id=sid))
    stub.CreateSession(pb.CreateSessionRequest(session_id=sid))
    append(stub, sid, user("new text", message_id="m1"))
    again = stub.BuildModelInput(
        pb.BuildModelInputRequest(session_id=sid, resume_token=held.resume_token)
    )
    assert again.messages_offset == 0
    assert [m.content[0].text.text for m in again.messages] == ["new text"]
