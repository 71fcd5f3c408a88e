"""BuildModelInput: the view the model sees, token counts, determinism."""

from __future__ import annotations

from typing import Any

from ctxwarden.v1 import context_service_pb2 as pb
from ctxwarden.v1 import session_pb2 as ses
from tests.e2e.conftest import NewSession, Stub
from tests.e2e.test_messages import append
from tests.support.builders import assistant, failed, result, user


def build(stub: Stub, sid: str, **kw: Any) -> pb.ModelInput:
    return stub.BuildModelInput(pb.BuildModelInputRequest(session_id=sid, **kw))


def codes(mi: pb.ModelInput) -> list[tuple[str, int]]:
    return [(n.code, n.seq) for n in mi.notices]


def test_empty_session(stub: Stub, new_session: NewSession) -> None:
    s = new_session(system_prompt="You are terse.", tools=[ses.ToolDefinition(name="read")])
    mi = build(stub, s.session_id)
    assert mi.system_prompt == "You are terse." and [t.name for t in mi.tools] == ["read"]
    assert list(mi.messages) == [] and mi.first_kept_seq == 0 and mi.last_seq == 0
    assert mi.tokens.system_tokens == 4 and mi.tokens.tools_tokens == 1
    assert mi.tokens.total_tokens == 5 and mi.tokens.estimated
    assert mi.tokens.context_window == 128000
    assert mi.tokens.compaction_threshold == 128000 - 16384
    assert len(mi.prefix_hash) == 64 and mi.compaction_id == "" and mi.summary == ""


def test_view_pairs_tool_calls_and_skips_failures(stub: Stub, new_session: NewSession) -> None:
    sid = new_session().session_id
    append(
        stub,
        sid,
        user("do two things"),  # 1
        assistant("ok", [("a", "read", {}), ("b", "read", {})]),  # 2
        result("a", "A"),  # 3 (b never answered)
        user("and then?"),  # 4
        failed("500 internal server error"),  # 5
        assistant(calls=[("c", "write", {"path": "x"})]),  # 6 (pending at the end)
    )
    mi = build(stub, sid)
    roles = [(x.role, x.seq, x.tool_call_id) for x in mi.messages]
    assert roles == [
        (1, 1, ""),
        (2, 2, ""),
        (3, 3, "a"),
        (3, 0, "b"),
        (1, 4, ""),
        (2, 6, ""),
        (3, 0, "c"),
    ]
    synthetic = mi.messages[3]
    assert synthetic.content[0].text.text == "No result provided" and synthetic.is_error
    assert synthetic.metadata["ctxwarden.synthetic"] == "true"
    assert codes(mi) == [
        ("SYNTHETIC_TOOL_RESULT", 2),
        ("FAILED_MESSAGE_OMITTED", 5),
        ("SYNTHETIC_TOOL_RESULT", 6),
    ]
    assert mi.first_kept_seq == 1 and mi.last_seq == 6
    t = mi.tokens
    assert t.message_tokens == sum(x.token_count for x in mi.messages)
    assert t.total_tokens == t.system_tokens + t.tools_tokens + t.summary_tokens + t.message_tokens
    # storage is untouched by the view
    stored = stub.ListMessages(pb.ListMessagesRequest(session_id=sid)).messages
    assert [x.seq for x in stored] == [1, 2, 3, 4, 5, 6]


def test_tool_output_truncation_marker(stub: Stub, new_session: NewSession) -> None:
    sid = new_session(
        policy=ses.ContextPolicy(tool_output_max_bytes=100, tool_output_max_lines=3)
    ).session_id
    long_lines = "\n".join(f"line {i}" for i in range(50))
    append(stub, sid, user("q"), assistant(calls=[("a", "cat", {})]), result("a", long_lines))
    mi = build(stub, sid)
    text = mi.messages[2].content[0].text.text
    assert text.startswith("line 0\nline 1\nline 2\n")
    assert "line 3" not in text
    assert f"of {len(long_lines)} bytes" in text and "50 lines" in text and "seq 3" in text
    assert codes(mi) == [("TOOL_OUTPUT_TRUNCATED", 3)]
    assert mi.messages[2].token_count == -(-len(text) // 4)  # counted as shown
    assert mi.tokens.message_tokens == sum(x.token_count for x in mi.messages)
    full = stub.ListMessages(pb.ListMessagesRequest(session_id=sid)).messages[2]
    assert full.content[0].text.text == long_lines


def test_same_state_same_bytes(stub: Stub, new_session: NewSession) -> None:
    sid = new_session(system_prompt="sp").session_id
    append(stub, sid, user("q"), assistant("a", [("x", "t", {"k": [1, 2]})]), result("x", "r"))
    a = build(stub, sid).SerializeToString(deterministic=True)
    b = build(stub, sid).SerializeToString(deterministic=True)
    assert a == b


def test_prefix_hash_tracks_the_stable_prefix(stub: Stub, new_session: NewSession) -> None:
    from google.protobuf import field_mask_pb2

    s = new_session(system_prompt="sp")
    h1 = build(stub, s.session_id).prefix_hash
    append(stub, s.session_id, user("q"))
    assert build(stub, s.session_id).prefix_hash == h1
    stub.UpdateSession(
        pb.UpdateSessionRequest(
            session=ses.Session(session_id=s.session_id, system_prompt="sp2"),
            update_mask=field_mask_pb2.FieldMask(paths=["system_prompt"]),
        )
    )
    assert build(stub, s.session_id).prefix_hash != h1


def test_compaction_recommended(stub: Stub, new_session: NewSession) -> None:
    sid = new_session(policy=ses.ContextPolicy(context_window=1000, reserve_tokens=100)).session_id
    append(stub, sid, user("x" * 3000))  # 750 tokens
    mi = build(stub, sid)
    assert mi.tokens.compaction_threshold == 900 and not mi.compaction_recommended
    mi = build(stub, sid, max_output_tokens=300)
    assert mi.tokens.compaction_threshold == 700 and mi.compaction_recommended


def test_exact_tokenizer_for_known_model(stub: Stub, new_session: NewSession) -> None:
    sid = new_session(model="gpt-4o-2024-08-06").session_id
    r = append(stub, sid, user("hello world"))
    assert r.messages[0].token_count == 2 + 3  # o200k tokens + OpenAI's per-message framing
    mi = build(stub, sid)
    assert not mi.tokens.estimated and mi.tokens.context_window == 128000


def test_tokenizer_in_policy(stub: Stub, new_session: NewSession) -> None:
    sid = new_session(policy=ses.ContextPolicy(tokenizer="tiktoken:cl100k_base")).session_id
    assert append(stub, sid, user("hello world")).messages[0].token_count == 2
    import grpc

    from tests.support.errors import expect_error

    expect_error(
        grpc.StatusCode.INVALID_ARGUMENT,
        "UNKNOWN_TOKENIZER",
        stub.CreateSession,
        pb.CreateSessionRequest(session=ses.Session(policy=ses.ContextPolicy(tokenizer="bogus"))),
    )


def test_per_model_calibration_seeds_new_sessions(stub: Stub, new_session: NewSession) -> None:
    from ctxwarden.v1 import message_pb2 as m

    model = f"house-model-{id(stub)}"
    first = new_session(model=model).session_id
    append(stub, first, user("x" * 400))  # 100 heuristic tokens
    answer = assistant("y" * 40)
    answer.usage.CopyFrom(m.Usage(input_tokens=150, output_tokens=10))  # provider: 1.5x
    append(stub, first, answer)
    learned = build(stub, first).tokens.estimate_error_ratio
    assert learned == 1.5
    second = new_session(model=model).session_id
    append(stub, second, user("z" * 400))
    mi = build(stub, second)
    assert mi.tokens.estimate_error_ratio == learned  # the model's factor, before any usage
    assert mi.tokens.total_tokens == 150
    other = new_session(model="another-model").session_id
    assert build(stub, other).tokens.estimate_error_ratio == 1.0
