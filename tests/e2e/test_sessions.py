"""Session RPCs end to end: create, get, list, update, delete."""

from __future__ import annotations

import uuid

import grpc
from google.protobuf import field_mask_pb2
from sqlalchemy import create_engine, text

from ctxwarden.store.urls import sync_url
from ctxwarden.v1 import context_service_pb2 as pb
from ctxwarden.v1 import session_pb2 as ses
from tests.e2e.conftest import NewSession, Stub
from tests.support.builders import user
from tests.support.errors import expect_error

NOT_FOUND = grpc.StatusCode.NOT_FOUND


def test_create_with_server_id_is_sortable(stub: Stub) -> None:
    a = stub.CreateSession(pb.CreateSessionRequest(session=ses.Session(title="a")))
    b = stub.CreateSession(pb.CreateSessionRequest(session=ses.Session(title="b")))
    assert len(a.session_id) == 26 and a.session_id < b.session_id
    assert a.last_seq == 0 and a.etag and a.create_time.seconds > 0


def test_create_with_client_id_and_duplicate(stub: Stub) -> None:
    sid = f"client-{uuid.uuid4().hex}"
    s = stub.CreateSession(
        pb.CreateSessionRequest(
            session=ses.Session(title="t", system_prompt="be brief", model="gpt-4o"), session_id=sid
        )
    )
    assert s.session_id == sid and s.system_prompt == "be brief"
    assert s.context_tokens > 0
    expect_error(
        grpc.StatusCode.ALREADY_EXISTS,
        "SESSION_ALREADY_EXISTS",
        stub.CreateSession,
        pb.CreateSessionRequest(session_id=sid),
    )


def test_create_request_id_returns_first_result(stub: Stub) -> None:
    rid = uuid.uuid4().hex
    req = pb.CreateSessionRequest(session=ses.Session(title="once"), request_id=rid)
    first = stub.CreateSession(req)
    second = stub.CreateSession(req)
    assert first == second
    changed = pb.CreateSessionRequest(session=ses.Session(title="other"), request_id=rid)
    expect_error(grpc.StatusCode.INVALID_ARGUMENT, "REQUEST_ID_REUSED", stub.CreateSession, changed)


def test_create_rejects_bad_ids(stub: Stub) -> None:
    for bad in ("has space", "-lead", "x" * 256, "ünïcode", "a#1"):
        expect_error(
            grpc.StatusCode.INVALID_ARGUMENT,
            "INVALID_SESSION_ID",
            stub.CreateSession,
            pb.CreateSessionRequest(session_id=bad),
        )


def test_get_and_not_found(stub: Stub, new_session: NewSession) -> None:
    s = new_session(title="hello", labels={"k": "v"})
    got = stub.GetSession(pb.GetSessionRequest(session_id=s.session_id))
    assert got == s
    err = expect_error(
        NOT_FOUND, "SESSION_NOT_FOUND", stub.GetSession, pb.GetSessionRequest(session_id="nope")
    )
    assert "nope" in err.details()


def test_list_newest_first_with_pages_and_filters(stub: Stub, new_session: NewSession) -> None:
    project = f"p-{uuid.uuid4().hex[:8]}"
    made = [new_session(project_id=project, user_id=f"u{i % 2}").session_id for i in range(7)]
    seen: list[str] = []
    token = ""
    while True:
        resp = stub.ListSessions(
            pb.ListSessionsRequest(project_id=project, page_size=3, page_token=token)
        )
        assert len(resp.sessions) <= 3
        seen += [s.session_id for s in resp.sessions]
        token = resp.next_page_token
        if not token:
            break
    assert seen == list(reversed(made))
    only_u1 = stub.ListSessions(pb.ListSessionsRequest(project_id=project, user_id="u1"))
    assert [s.session_id for s in only_u1.sessions] == [made[5], made[3], made[1]]
    expect_error(
        grpc.StatusCode.INVALID_ARGUMENT,
        "INVALID_PAGE_TOKEN",
        stub.ListSessions,
        pb.ListSessionsRequest(project_id=project, page_token="garbage!"),
    )


def test_update_with_mask_and_etag(stub: Stub, new_session: NewSession) -> None:
    s = new_session(title="old", system_prompt="sp")
    upd = stub.UpdateSession(
        pb.UpdateSessionRequest(
            session=ses.Session(session_id=s.session_id, title="new", system_prompt="ignored"),
            update_mask=field_mask_pb2.FieldMask(paths=["title"]),
            etag=s.etag,
        )
    )
    assert upd.title == "new" and upd.system_prompt == "sp" and upd.etag != s.etag
    expect_error(
        grpc.StatusCode.ABORTED,
        "ETAG_MISMATCH",
        stub.UpdateSession,
        pb.UpdateSessionRequest(
            session=ses.Session(session_id=s.session_id, title="x"),
            update_mask=field_mask_pb2.FieldMask(paths=["title"]),
            etag=s.etag,
        ),
    )
    expect_error(
        grpc.StatusCode.INVALID_ARGUMENT,
        "INVALID_UPDATE_MASK",
        stub.UpdateSession,
        pb.UpdateSessionRequest(
            session=ses.Session(session_id=s.session_id),
            update_mask=field_mask_pb2.FieldMask(paths=["last_seq"]),
        ),
    )
    pol = stub.UpdateSession(
        pb.UpdateSessionRequest(
            session=ses.Session(
                session_id=s.session_id,
                policy=ses.ContextPolicy(context_window=1000),
                tools=[ses.ToolDefinition(name="read", description="reads a file")],
                pinned_state="step 2 of 5",
                labels={"team": "a"},
            ),
            update_mask=field_mask_pb2.FieldMask(
                paths=["policy", "tools", "pinned_state", "labels"]
            ),
        )
    )
    assert pol.policy.context_window == 1000 and pol.pinned_state == "step 2 of 5"
    assert [t.name for t in pol.tools] == ["read"] and dict(pol.labels) == {"team": "a"}
    assert stub.GetSession(pb.GetSessionRequest(session_id=s.session_id)) == pol
    mi = stub.BuildModelInput(pb.BuildModelInputRequest(session_id=s.session_id))
    assert mi.tokens.context_window == 1000 and mi.tokens.tools_tokens > 0


def test_update_model_switches_tokenizer(stub: Stub, new_session: NewSession) -> None:
    s = new_session(model="unknown-model")
    stub.AppendMessages(
        pb.AppendMessagesRequest(session_id=s.session_id, messages=[user("hello world " * 50)])
    )
    before = stub.BuildModelInput(pb.BuildModelInputRequest(session_id=s.session_id))
    assert before.tokens.estimated
    stub.UpdateSession(
        pb.UpdateSessionRequest(
            session=ses.Session(session_id=s.session_id, model="gpt-4o"),
            update_mask=field_mask_pb2.FieldMask(paths=["model"]),
        )
    )
    after = stub.BuildModelInput(pb.BuildModelInputRequest(session_id=s.session_id))
    assert not after.tokens.estimated
    # o200k: "hello world " x50 -> 101 tokens, + 3 for OpenAI's per-message framing
    assert after.messages[0].token_count == 104
    listed = stub.ListMessages(pb.ListMessagesRequest(session_id=s.session_id))
    assert listed.messages[0].token_count == 104  # recounts are persisted


def test_delete_is_soft(stub: Stub, new_session: NewSession, backend_url: str) -> None:
    s = new_session()
    stub.AppendMessages(
        pb.AppendMessagesRequest(session_id=s.session_id, messages=[user("keep me")])
    )
    stub.DeleteSession(pb.DeleteSessionRequest(session_id=s.session_id))
    expect_error(
        NOT_FOUND,
        "SESSION_NOT_FOUND",
        stub.GetSession,
        pb.GetSessionRequest(session_id=s.session_id),
    )
    expect_error(
        NOT_FOUND,
        "SESSION_NOT_FOUND",
        stub.AppendMessages,
        pb.AppendMessagesRequest(session_id=s.session_id, messages=[user("x")]),
    )
    expect_error(
        NOT_FOUND,
        "SESSION_NOT_FOUND",
        stub.DeleteSession,
        pb.DeleteSessionRequest(session_id=s.session_id),
    )
    listed = stub.ListSessions(pb.ListSessionsRequest(page_size=1000))
    assert s.session_id not in {x.session_id for x in listed.sessions}
    engine = create_engine(sync_url(backend_url))
    with engine.connect() as conn:
        kept = conn.execute(
            text("SELECT COUNT(*) FROM messages WHERE session_id = :s"), {"s": s.session_id}
        ).scalar_one()
        row = conn.execute(
            text("SELECT delete_time_us FROM sessions WHERE session_id = :s"), {"s": s.session_id}
        ).scalar_one()
    engine.dispose()
    assert kept == 1 and row > 0
