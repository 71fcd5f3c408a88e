"""AppendMessages, StreamMessages and ListMessages end to end."""

from __future__ import annotations

import json
import uuid
from typing import Any

import grpc
import pytest

from ctxwarden.v1 import context_service_pb2 as pb
from ctxwarden.v1 import message_pb2 as m
from tests.e2e.conftest import NewSession, Stub
from tests.support.builders import assistant, failed, result, user
from tests.support.errors import expect_error

INVALID = grpc.StatusCode.INVALID_ARGUMENT


def append(stub: Stub, sid: str, *msgs: m.Message, **kw: Any) -> pb.AppendMessagesResponse:
    return stub.AppendMessages(pb.AppendMessagesRequest(session_id=sid, messages=list(msgs), **kw))


def test_append_assigns_dense_seqs_and_token_counts(stub: Stub, new_session: NewSession) -> None:
    sid = new_session().session_id
    r1 = append(stub, sid, user("hello there"), assistant("hi", [("c1", "read", {"path": "a"})]))
    assert [x.seq for x in r1.messages] == [1, 2] and r1.last_seq == 2
    # heuristic: ceil(len("hello there")/4) = 3
    assert r1.messages[0].token_count == 3
    # "hi" + "read" + '{"path": "a"}' = 2 + 4 + 13 = 19 chars -> 5 tokens
    assert r1.messages[1].token_count == 5
    assert all(x.message_id and x.state == m.MESSAGE_STATE_ACTIVE for x in r1.messages)
    assert r1.messages[0].create_time.seconds > 0
    r2 = append(stub, sid, result("c1", "file a"))
    assert r2.messages[0].seq == 3 and r2.last_seq == 3
    assert r2.context_tokens == 3 + 5 + 2
    assert stub.GetSession(pb.GetSessionRequest(session_id=sid)).last_seq == 3


def test_message_id_makes_resend_a_no_op(stub: Stub, new_session: NewSession) -> None:
    sid = new_session().session_id
    first = append(stub, sid, user("one", message_id="m-1"))
    again = append(stub, sid, user("one", message_id="m-1"), user("two", message_id="m-2"))
    assert again.messages[0] == first.messages[0]
    assert [x.seq for x in again.messages] == [1, 2]
    again2 = append(stub, sid, user("two", message_id="m-2"))
    assert again2.messages[0].seq == 2 and again2.last_seq == 2
    listed = stub.ListMessages(pb.ListMessagesRequest(session_id=sid))
    assert [x.message_id for x in listed.messages] == ["m-1", "m-2"]


def test_request_id_replays_first_result(stub: Stub, new_session: NewSession) -> None:
    sid = new_session().session_id
    req = pb.AppendMessagesRequest(session_id=sid, messages=[user("once")], request_id="r-1")
    a = stub.AppendMessages(req)
    b = stub.AppendMessages(req)
    assert a == b
    assert stub.GetSession(pb.GetSessionRequest(session_id=sid)).last_seq == 1
    other = pb.AppendMessagesRequest(session_id=sid, messages=[user("different")], request_id="r-1")
    expect_error(INVALID, "REQUEST_ID_REUSED", stub.AppendMessages, other)


def test_expected_last_seq_conflict_writes_nothing(stub: Stub, new_session: NewSession) -> None:
    sid = new_session().session_id
    append(stub, sid, user("a"), expected_last_seq=0)
    err = expect_error(
        grpc.StatusCode.ABORTED,
        "LAST_SEQ_MISMATCH",
        append,
        stub,
        sid,
        user("b"),
        user("c"),
        expected_last_seq=0,
    )
    assert "last_seq 1" in err.details()
    assert stub.GetSession(pb.GetSessionRequest(session_id=sid)).last_seq == 1
    ok = append(stub, sid, user("b"), expected_last_seq=1)
    assert ok.last_seq == 2


@pytest.mark.parametrize(
    ("message", "reason", "field_hint"),
    [
        (
            m.Message(
                role=m.ROLE_UNSPECIFIED, content=[m.ContentBlock(text=m.TextContent(text="x"))]
            ),
            "INVALID_ROLE",
            "role",
        ),
        (
            m.Message(
                role=m.Role.ValueType(7), content=[m.ContentBlock(text=m.TextContent(text="x"))]
            ),
            "INVALID_ROLE",
            "role",
        ),
        (m.Message(role=m.ROLE_USER), "EMPTY_CONTENT", "content"),
        (
            m.Message(role=m.ROLE_ASSISTANT, stop_reason=m.STOP_REASON_STOP),
            "EMPTY_CONTENT",
            "content",
        ),
        (result("", "out"), "MISSING_FIELD", "tool_call_id"),
        (
            assistant(calls=[("c", "read", {})]).__class__(
                role=m.ROLE_ASSISTANT,
                content=[
                    m.ContentBlock(
                        tool_call=m.ToolCall(id="c", name="read", arguments_json="[1, 2]")
                    )
                ],
            ),
            "INVALID_JSON",
            "arguments_json",
        ),
        (
            m.Message(
                role=m.ROLE_ASSISTANT,
                content=[
                    m.ContentBlock(
                        tool_call=m.ToolCall(id="c", name="read", arguments_json="{oops")
                    )
                ],
            ),
            "INVALID_JSON",
            "arguments_json",
        ),
        (m.Message(role=m.ROLE_USER, content=[m.ContentBlock()]), "INVALID_CONTENT", "content[0]"),
        (
            m.Message(
                role=m.ROLE_USER,
                content=[m.ContentBlock(tool_call=m.ToolCall(id="c", name="read"))],
            ),
            "INVALID_CONTENT",
            "content[0]",
        ),
    ],
)
def test_validation_names_the_field(
    stub: Stub, new_session: NewSession, message: m.Message, reason: str, field_hint: str
) -> None:
    sid = new_session().session_id
    err = expect_error(INVALID, reason, append, stub, sid, user("fine"), message)
    assert "messages[1]" in err.details() and field_hint in err.details()
    assert stub.GetSession(pb.GetSessionRequest(session_id=sid)).last_seq == 0


def test_failed_assistant_may_be_empty(stub: Stub, new_session: NewSession) -> None:
    sid = new_session().session_id
    r = append(stub, sid, user("q"), failed("503 overloaded"))
    assert r.last_seq == 2 and r.messages[1].error_message == "503 overloaded"


def test_result_for_an_unknown_call_is_stored_and_left_out_of_the_input(
    stub: Stub, new_session: NewSession
) -> None:
    sid = new_session().session_id
    append(stub, sid, user("q"), assistant(calls=[("c1", "read", {})]))
    stray = append(stub, sid, result("nope", "x")).messages[0]
    assert stray.seq == 3
    append(stub, sid, result("c1", "ok"))
    mi = stub.BuildModelInput(pb.BuildModelInputRequest(session_id=sid))
    assert [x.seq for x in mi.messages] == [1, 2, 4]
    assert [(n.code, n.seq) for n in mi.notices] == [("ORPHANED_TOOL_RESULT_OMITTED", 3)]
    expect_error(
        grpc.StatusCode.FAILED_PRECONDITION,
        "TOOL_CALL_ALREADY_ANSWERED",
        append,
        stub,
        sid,
        result("c1", "again"),
    )


def test_call_and_result_in_one_request(stub: Stub, new_session: NewSession) -> None:
    sid = new_session().session_id
    r = append(stub, sid, user("q"), assistant(calls=[("c1", "ls", {})]), result("c1", "a b"))
    assert r.last_seq == 3


def test_invalid_utf8_is_invalid_argument(channel: grpc.Channel, new_session: NewSession) -> None:
    sid = new_session().session_id
    good = pb.AppendMessagesRequest(session_id=sid, messages=[user("PLACEHOLDER")])
    raw = good.SerializeToString().replace(b"PLACEHOLDER", b"bad \xff\xfe str")
    call = channel.unary_unary(
        "/ctxwarden.v1.ContextService/AppendMessages",
        request_serializer=lambda b: b,
        response_deserializer=pb.AppendMessagesResponse.FromString,
    )
    err = expect_error(INVALID, "MALFORMED_REQUEST", call, raw, timeout=10)
    assert "UTF-8" in err.details()


def test_size_limits(stub: Stub, new_session: NewSession) -> None:
    sid = new_session().session_id
    big = user("x" * (8 * 1024 * 1024 + 10))
    err = expect_error(INVALID, "MESSAGE_TOO_LARGE", append, stub, sid, big)
    assert "messages[0]" in err.details()
    many = [user(str(i)) for i in range(1001)]
    expect_error(INVALID, "TOO_MANY_MESSAGES", append, stub, sid, *many)
    assert stub.GetSession(pb.GetSessionRequest(session_id=sid)).last_seq == 0
    ok = append(stub, sid, *many[:1000])
    assert ok.last_seq == 1000


def test_list_messages_pages_and_rolled_back(stub: Stub, new_session: NewSession) -> None:
    sid = new_session().session_id
    append(stub, sid, *[user(f"m{i}") for i in range(5)], failed("boom"))
    stub.RollbackTurn(pb.RollbackTurnRequest(session_id=sid))
    seqs: list[int] = []
    token = ""
    while True:
        page = stub.ListMessages(
            pb.ListMessagesRequest(session_id=sid, page_size=2, page_token=token)
        )
        seqs += [x.seq for x in page.messages]
        token = page.next_page_token
        if not token:
            break
    assert seqs == [1, 2, 3, 4, 5]
    everything = stub.ListMessages(pb.ListMessagesRequest(session_id=sid, include_rolled_back=True))
    assert [x.seq for x in everything.messages] == [1, 2, 3, 4, 5, 6]
    assert everything.messages[-1].state == m.MESSAGE_STATE_ROLLED_BACK
    expect_error(
        grpc.StatusCode.NOT_FOUND,
        "SESSION_NOT_FOUND",
        stub.ListMessages,
        pb.ListMessagesRequest(session_id="missing"),
    )


def test_stream_messages_in_order(stub: Stub, new_session: NewSession) -> None:
    sid = new_session().session_id
    reqs = [
        pb.AppendMessagesRequest(session_id=sid, messages=[user(f"s{i}")], request_id=f"s-{i}")
        for i in range(50)
    ]
    responses = list(stub.StreamMessages(iter(reqs), timeout=30))
    assert [r.last_seq for r in responses] == list(range(1, 51))
    assert [r.messages[0].content[0].text.text for r in responses] == [f"s{i}" for i in range(50)]


def test_stream_error_ends_stream_nothing_half_written(stub: Stub, new_session: NewSession) -> None:
    sid = new_session().session_id
    reqs = [
        pb.AppendMessagesRequest(session_id=sid, messages=[user("a")]),
        pb.AppendMessagesRequest(
            session_id=sid, messages=[user("b"), assistant(calls=[("c1", "ls", {})])]
        ),
        pb.AppendMessagesRequest(
            session_id=sid, messages=[user("c"), result("c1", "x"), result("c1", "twice")]
        ),
        pb.AppendMessagesRequest(session_id=sid, messages=[user("never")]),
    ]
    call = stub.StreamMessages(iter(reqs), timeout=30)
    assert next(call).last_seq == 1
    assert next(call).last_seq == 3
    with pytest.raises(grpc.RpcError) as info:
        next(call)
    assert info.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    listed = stub.ListMessages(pb.ListMessagesRequest(session_id=sid, include_rolled_back=True))
    assert [x.seq for x in listed.messages] == [1, 2, 3]


def test_roundtrip_of_every_field(stub: Stub, new_session: NewSession) -> None:
    sid = new_session().session_id
    msg = m.Message(
        role=m.ROLE_ASSISTANT,
        message_id=f"id-{uuid.uuid4().hex}",
        content=[
            m.ContentBlock(
                thinking=m.ThinkingContent(thinking="hmm", signature="sig", redacted=True)
            ),
            m.ContentBlock(text=m.TextContent(text="ünïcödé ✓ \t tab")),
            m.ContentBlock(
                tool_call=m.ToolCall(id="t1", name="read", arguments_json=json.dumps({"p": 1}))
            ),
        ],
        stop_reason=m.STOP_REASON_TOOL_USE,
        usage=m.Usage(
            input_tokens=10,
            output_tokens=5,
            cache_read_tokens=2,
            cache_write_tokens=1,
            total_tokens=15,
        ),
        model="gpt-4o",
        provider="openai",
        metadata={"trace": "abc"},
    )
    img = m.Message(
        role=m.ROLE_TOOL_RESULT,
        tool_call_id="t1",
        tool_name="read",
        is_error=True,
        content=[
            m.ContentBlock(text=m.TextContent(text="see image")),
            m.ContentBlock(image=m.ImageContent(mime_type="image/png", data=bytes(range(256)))),
        ],
    )
    stored = append(stub, sid, user("q"), msg, img).messages
    listed = stub.ListMessages(pb.ListMessagesRequest(session_id=sid)).messages
    assert list(listed) == list(stored)
    got = listed[1]
    for field in ("content", "stop_reason", "usage", "model", "provider", "metadata", "message_id"):
        assert getattr(got, field) == getattr(msg, field), field
    assert listed[2].content[1].image.data == bytes(range(256)) and listed[2].is_error
    assert listed[2].token_count == 3 + 1200


def test_hostile_input_is_refused_cleanly(stub: Stub, new_session: NewSession) -> None:
    sid = new_session().session_id
    deep = "[" * 100_000 + "]" * 100_000
    nested = m.Message(
        role=m.ROLE_ASSISTANT,
        content=[m.ContentBlock(tool_call=m.ToolCall(id="c", name="t", arguments_json=deep))],
    )
    expect_error(INVALID, "JSON_TOO_DEEP", append, stub, sid, nested)
    deep_obj = '{"a":' * 50_000 + "1" + "}" * 50_000
    nested.content[0].tool_call.arguments_json = deep_obj
    expect_error(INVALID, "JSON_TOO_DEEP", append, stub, sid, nested)
    expect_error(INVALID, "NUL_CHARACTER", append, stub, sid, user("bad \x00 byte"))
    bogus = assistant("hi")
    bogus.usage.CopyFrom(m.Usage(input_tokens=5_000_000_000))
    expect_error(INVALID, "INVALID_USAGE", append, stub, sid, bogus)
    # The server is still fine afterwards.
    assert append(stub, sid, user("still here")).last_seq == 1


def test_basic_view_leaves_out_the_content(stub: Stub, new_session: NewSession) -> None:
    sid = new_session().session_id
    full = append(stub, sid, user("hello there"), assistant("hi", [("c1", "read", {"path": "a"})]))
    basic = append(stub, sid, user("again"), view=pb.MESSAGE_VIEW_BASIC)
    assert [len(m.content) for m in full.messages] == [1, 2]
    (stored,) = basic.messages
    assert list(stored.content) == [] and stored.seq == 3 and stored.token_count > 0
    assert stored.message_id and stored.role == m.ROLE_USER and basic.last_seq == 3
    # What is stored is complete all the same.
    listed = stub.ListMessages(pb.ListMessagesRequest(session_id=sid))
    assert listed.messages[2].content[0].text.text == "again"
