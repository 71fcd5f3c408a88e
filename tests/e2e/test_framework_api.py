"""What framework adapters build on: popping the newest item atomically, items the
model never sees, and long session IDs."""

from __future__ import annotations

import json
import uuid
from typing import Any

import grpc
import pytest

from ctxwarden.v1 import context_service_pb2 as pb
from ctxwarden.v1 import message_pb2 as m
from ctxwarden.v1 import session_pb2 as ses
from tests.e2e.conftest import NewSession, Stub
from tests.e2e.test_messages import append
from tests.support.builders import assistant, failed, result, user
from tests.support.errors import error_info, expect_error

HIDDEN = m.MESSAGE_VISIBILITY_HISTORY_ONLY
FORMATS = [
    pb.MODEL_INPUT_FORMAT_OPENAI_CHAT,
    pb.MODEL_INPUT_FORMAT_OPENAI_RESPONSES,
    pb.MODEL_INPUT_FORMAT_ANTHROPIC_MESSAGES,
    pb.MODEL_INPUT_FORMAT_GEMINI,
]


def hidden(text: str = "", role: Any = m.ROLE_USER, **fields: Any) -> m.Message:
    content = [m.ContentBlock(text=m.TextContent(text=text))] if text else []
    return m.Message(role=role, content=content, visibility=HIDDEN, **fields)


def last_seq(stub: Stub, sid: str) -> int:
    return stub.GetSession(pb.GetSessionRequest(session_id=sid)).last_seq


def pop(stub: Stub, sid: str, **kw: Any) -> pb.RollbackTurnResponse:
    """A framework's pop_item: roll back exactly the newest active message."""
    newest = stub.ListMessages(
        pb.ListMessagesRequest(session_id=sid, page_size=1, newest_first=True)
    )
    seq = newest.messages[0].seq
    return stub.RollbackTurn(
        pb.RollbackTurnRequest(
            session_id=sid, to_seq=seq - 1, expected_last_seq=last_seq(stub, sid), **kw
        )
    )


# -- RollbackTurn.expected_last_seq -------------------------------------------------


def test_pop_rolls_back_exactly_the_newest_message_whatever_its_role(
    stub: Stub, new_session: NewSession
) -> None:
    sid = new_session().session_id
    append(stub, sid, user("q"), assistant("look", [("c1", "read", {})]), result("c1", "out"))
    append(stub, sid, assistant("done"), user("thanks"))
    popped = [list(pop(stub, sid).rolled_back_seqs) for _ in range(5)]
    assert popped == [[5], [4], [3], [2], [1]]  # user, assistant, tool result, assistant, user
    listed = stub.ListMessages(pb.ListMessagesRequest(session_id=sid, include_rolled_back=True))
    assert [x.state for x in listed.messages] == [m.MESSAGE_STATE_ROLLED_BACK] * 5
    assert stub.ListMessages(pb.ListMessagesRequest(session_id=sid)).messages == []
    # The next append continues after the rolled-back seqs.
    assert append(stub, sid, user("again")).last_seq == 6


def test_popping_a_tool_result_leaves_its_call_open(stub: Stub, new_session: NewSession) -> None:
    sid = new_session().session_id
    append(stub, sid, user("q"), assistant("look", [("c1", "read", {})]), result("c1", "out"))
    assert list(pop(stub, sid).rolled_back_seqs) == [3]
    mi = stub.BuildModelInput(pb.BuildModelInputRequest(session_id=sid))
    assert [n.code for n in mi.notices] == ["SYNTHETIC_TOOL_RESULT"]
    append(stub, sid, result("c1", "second try"))  # the call takes a result again
    mi = stub.BuildModelInput(pb.BuildModelInputRequest(session_id=sid))
    assert mi.messages[-1].content[0].text.text == "second try" and list(mi.notices) == []


def test_a_stale_expected_last_seq_rolls_back_nothing(stub: Stub, new_session: NewSession) -> None:
    sid = new_session().session_id
    append(stub, sid, user("q"), assistant("a"))
    err = expect_error(
        grpc.StatusCode.ABORTED,
        "LAST_SEQ_MISMATCH",
        stub.RollbackTurn,
        pb.RollbackTurnRequest(session_id=sid, to_seq=1, expected_last_seq=1),
    )
    assert error_info(err).metadata["last_seq"] == "2"
    # The same status and reason as AppendMessages' expected_last_seq mismatch.
    again = expect_error(
        grpc.StatusCode.ABORTED,
        "LAST_SEQ_MISMATCH",
        append,
        stub,
        sid,
        user("x"),
        expected_last_seq=1,
    )
    assert error_info(again).metadata["last_seq"] == "2"
    listed = stub.ListMessages(pb.ListMessagesRequest(session_id=sid, include_rolled_back=True))
    assert [x.state for x in listed.messages] == [m.MESSAGE_STATE_ACTIVE] * 2
    # Without to_seq it guards the failed-turn rollback the same way.
    append(stub, sid, failed("503"))
    expect_error(
        grpc.StatusCode.ABORTED,
        "LAST_SEQ_MISMATCH",
        stub.RollbackTurn,
        pb.RollbackTurnRequest(session_id=sid, expected_last_seq=2),
    )
    ok = stub.RollbackTurn(pb.RollbackTurnRequest(session_id=sid, expected_last_seq=3))
    assert list(ok.rolled_back_seqs) == [3]


def test_a_retried_pop_is_answered_from_its_first_result(
    stub: Stub, new_session: NewSession
) -> None:
    sid = new_session().session_id
    append(stub, sid, user("q"), assistant("a"), user("more"))
    request = pb.RollbackTurnRequest(
        session_id=sid, to_seq=2, expected_last_seq=3, request_id="pop-1"
    )
    first = stub.RollbackTurn(request)
    append(stub, sid, user("moved on"))  # last_seq is 4 now: the request alone would fail
    assert stub.RollbackTurn(request) == first and list(first.rolled_back_seqs) == [3]
    listed = stub.ListMessages(pb.ListMessagesRequest(session_id=sid))
    assert [x.seq for x in listed.messages] == [1, 2, 4]


# -- MESSAGE_VISIBILITY_HISTORY_ONLY --------------------------------------------------


def test_history_only_messages_are_stored_and_listed_but_never_in_the_input(
    stub: Stub, new_session: NewSession
) -> None:
    sid = new_session(system_prompt="sp").session_id
    append(stub, sid, user("q"), assistant("look", [("c1", "read", {})]))
    before = stub.GetSession(pb.GetSessionRequest(session_id=sid)).context_tokens
    stored = append(
        stub,
        sid,
        hidden(metadata={"adk.event": "state-only"}),  # no content at all
        hidden("SECRET-BOOKKEEPING", role=m.ROLE_ASSISTANT),
        result("c1", "out"),
        hidden("SECRET-TOOL", role=m.ROLE_TOOL_RESULT),
    )
    assert [x.token_count for x in stored.messages] == [0, 0, stored.messages[2].token_count, 0]
    assert stored.messages[0].visibility == HIDDEN and stored.messages[2].visibility == 0
    after = stub.GetSession(pb.GetSessionRequest(session_id=sid)).context_tokens
    assert after == before + stored.messages[2].token_count
    listed = stub.ListMessages(pb.ListMessagesRequest(session_id=sid))
    assert [x.visibility for x in listed.messages] == [0, 0, HIDDEN, HIDDEN, 0, HIDDEN]
    assert dict(listed.messages[2].metadata) == {"adk.event": "state-only"}
    mi = stub.BuildModelInput(pb.BuildModelInputRequest(session_id=sid))
    # The call and its result stay together; no notice for what was left out.
    assert [x.seq for x in mi.messages] == [1, 2, 5] and list(mi.notices) == []
    for fmt in FORMATS:
        rendered = stub.BuildModelInput(pb.BuildModelInputRequest(session_id=sid, format=fmt))
        assert "SECRET" not in rendered.rendered_json and "adk.event" not in rendered.rendered_json
        assert json.loads(rendered.rendered_json)
    # A replay leaves them out too.
    replay = stub.BuildModelInput(pb.BuildModelInputRequest(session_id=sid, as_of_seq=7))
    assert [x.seq for x in replay.messages] == [1, 2, 5]


def test_history_only_messages_are_left_out_of_compaction_prompts(
    stub: Stub, new_session: NewSession
) -> None:
    sid = new_session(policy=ses.ContextPolicy(keep_recent_tokens=40)).session_id
    for i in range(6):
        append(
            stub,
            sid,
            user(f"question {i} " * 8),
            hidden(f"HIDDEN-{i}"),
            assistant(f"answer {i} " * 8),
        )
    plan = stub.PrepareCompaction(pb.PrepareCompactionRequest(session_id=sid))
    assert "question 0" in plan.history_prompt.user
    assert "HIDDEN" not in plan.history_prompt.user + plan.turn_prefix_prompt.user
    done = stub.CommitCompaction(
        pb.CommitCompactionRequest(session_id=sid, plan_id=plan.plan_id, summary="## Goal\nx")
    )
    mi = stub.BuildModelInput(pb.BuildModelInputRequest(session_id=sid))
    assert mi.first_kept_seq == done.first_kept_seq
    assert all(x.visibility == 0 for x in mi.messages)


def test_an_unknown_visibility_is_refused(stub: Stub, new_session: NewSession) -> None:
    sid = new_session().session_id
    expect_error(
        grpc.StatusCode.INVALID_ARGUMENT,
        "INVALID_VISIBILITY",
        append,
        stub,
        sid,
        m.Message(role=m.ROLE_USER, content=[], visibility=7),  # type: ignore[arg-type]
    )


def test_a_result_whose_call_was_rolled_back_is_stored(stub: Stub, new_session: NewSession) -> None:
    sid = new_session().session_id
    append(
        stub,
        sid,
        user("q"),
        assistant(calls=[("c1", "read", {})], stop=m.STOP_REASON_ERROR, error="503"),
    )
    stub.RollbackTurn(pb.RollbackTurnRequest(session_id=sid))
    late = append(stub, sid, result("c1", "late output"))
    assert late.messages[0].seq == 3
    mi = stub.BuildModelInput(pb.BuildModelInputRequest(session_id=sid))
    assert [x.seq for x in mi.messages] == [1]
    assert [(n.code, n.seq) for n in mi.notices] == [("ORPHANED_TOOL_RESULT_OMITTED", 3)]


# -- session IDs of up to 255 characters ----------------------------------------------


@pytest.mark.parametrize("length", [128, 200, 255])
def test_long_session_ids(stub: Stub, length: int) -> None:
    owner = uuid.uuid4().hex
    sid = ("app:user.x-" + owner + "_").ljust(length, "z")
    assert len(sid) == length
    made = stub.CreateSession(
        pb.CreateSessionRequest(session_id=sid, session=ses.Session(user_id=owner))
    )
    assert made.session_id == sid
    append(stub, sid, user("hi"), request_id="r1")
    stub.RollbackTurn(pb.RollbackTurnRequest(session_id=sid, to_seq=0, request_id="r2"))
    page = stub.ListMessages(
        pb.ListMessagesRequest(session_id=sid, page_size=1, include_rolled_back=True)
    )
    assert page.messages[0].seq == 1
    listed = stub.ListSessions(pb.ListSessionsRequest(user_id=owner))
    assert [s.session_id for s in listed.sessions] == [sid]
    expect_error(
        grpc.StatusCode.INVALID_ARGUMENT,
        "INVALID_SESSION_ID",
        stub.CreateSession,
        pb.CreateSessionRequest(session_id="a" * 256),
    )


def test_count_tokens_counts_nothing_for_a_history_only_message(stub: Stub) -> None:
    shown = user("count me please")
    counted = stub.CountTokens(
        pb.CountTokensRequest(model="gpt-4o", messages=[shown, hidden("not me at all " * 20)])
    )
    alone = stub.CountTokens(pb.CountTokensRequest(model="gpt-4o", messages=[shown]))
    assert list(counted.message_tokens)[1] == 0
    assert counted.total_tokens == alone.total_tokens
