"""Focused regression tests for what the fuzzers found, plus the documented size limits.

A bug found later in code outside the fuzz suite can be pinned here with a strict
xfail plus a tests/fuzz/harness.KNOWN_BUGS entry (tolerated while fuzzing) until
it is fixed; none is open.
"""

from __future__ import annotations

import base64
import json
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf import field_mask_pb2
from google.protobuf.message import Message as PbMessage

from ctxwarden.api.errors import MAX_MESSAGE_BYTES
from ctxwarden.v1 import context_service_pb2 as pb
from ctxwarden.v1 import context_service_pb2_grpc as pb_grpc
from ctxwarden.v1 import message_pb2 as m
from ctxwarden.v1 import session_pb2 as ses
from tests.fuzz.harness import FuzzTarget
from tests.support.builders import assistant, result, user
from tests.support.errors import expect_error

INVALID = grpc.StatusCode.INVALID_ARGUMENT


@pytest.fixture
def stub(fuzz: FuzzTarget) -> pb_grpc.ContextServiceStub:
    return pb_grpc.ContextServiceStub(fuzz.channel)


_counter = iter(range(10**6))


def new_session(stub: pb_grpc.ContextServiceStub, **fields: object) -> str:
    sid = f"fuzz-regression-{next(_counter)}"
    stub.CreateSession(
        pb.CreateSessionRequest(session=ses.Session(**fields), session_id=sid),  # type: ignore[arg-type]
        timeout=30,
    )
    return sid


def tool_call(call_id: str, name: str, arguments_json: str) -> m.Message:
    return m.Message(
        role=m.ROLE_ASSISTANT,
        stop_reason=m.STOP_REASON_TOOL_USE,
        content=[
            m.ContentBlock(
                tool_call=m.ToolCall(id=call_id, name=name, arguments_json=arguments_json)
            )
        ],
    )


def compactable_turns(arguments_json: str = '{"path": "a.txt"}') -> list[m.Message]:
    return [
        user("what is in a.txt? " * 20),
        tool_call("c1", "read", arguments_json),
        result("c1", "line\n" * 50, name="read"),
        assistant("It has fifty lines. " * 10),
        user("and then? " * 30),
        assistant("Nothing else. " * 30),
    ]


# -- fixed ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "request_",
    [
        pb.CountTokensRequest(tokenizer="\U0001f600" * 70_000),
        pb.CountTokensRequest(tokenizer="é" * 1_000),
        pb.CreateSessionRequest(
            session=ses.Session(policy=ses.ContextPolicy(tokenizer="x" * 9_000))
        ),
        pb.AppendMessagesRequest(
            session_id="fuzz-plain",
            messages=[m.Message(role=m.ROLE_USER, content=[], metadata={"k" * 50_000: "\x00"})],
        ),
    ],
    ids=["emoji-tokenizer", "accented-tokenizer", "session-tokenizer", "metadata-key"],
)
def test_errors_quoting_huge_input_keep_their_details(
    stub: pb_grpc.ContextServiceStub, request_: PbMessage
) -> None:
    """An error message quotes the bad value; unbounded, the trailers outgrew what
    clients accept and the call failed as RESOURCE_EXHAUSTED without ErrorInfo."""
    methods: dict[type[PbMessage], Callable[..., Any]] = {
        pb.CountTokensRequest: stub.CountTokens,
        pb.CreateSessionRequest: stub.CreateSession,
        pb.AppendMessagesRequest: stub.AppendMessages,
    }
    method = methods[type(request_)]
    err = expect_error(INVALID, None, method, request_, timeout=30)
    assert len((err.details() or "").encode()) <= MAX_MESSAGE_BYTES


@pytest.mark.parametrize("tokenizer", ["hf:\x00", "hf:/a\x00b", "heuristic\x00"])
def test_nul_in_tokenizer_spec_is_invalid_argument(
    stub: pb_grpc.ContextServiceStub, tokenizer: str
) -> None:
    """An hf: spec is a path; os.path raised ValueError on NUL, answered as INTERNAL."""
    policy = ses.ContextPolicy(tokenizer=tokenizer)
    expect_error(
        INVALID,
        "NUL_CHARACTER",
        stub.CreateSession,
        pb.CreateSessionRequest(session=ses.Session(policy=policy)),
        timeout=30,
    )
    update = pb.UpdateSessionRequest(
        session=ses.Session(session_id="fuzz-plain", policy=policy),
        update_mask=field_mask_pb2.FieldMask(paths=["policy"]),
    )
    expect_error(INVALID, "NUL_CHARACTER", stub.UpdateSession, update, timeout=30)


@pytest.mark.parametrize(
    "arguments_json",
    ['{"path": "\\ud800"}', '{"path": ["a", "\\udfff\\ud800"]}', '{"\\uDBFF": 1}'],
)
def test_json_escaping_a_lone_surrogate_is_invalid_argument(
    stub: pb_grpc.ContextServiceStub, arguments_json: str
) -> None:
    """Accepted before, it decoded to a string no UTF-8 encoder takes: from then on the
    session's Anthropic/Gemini rendering, Compact and PrepareCompaction were INTERNAL."""
    sid = new_session(stub)
    turns = compactable_turns(arguments_json)
    append = pb.AppendMessagesRequest(session_id=sid, messages=turns)
    expect_error(INVALID, "INVALID_JSON", stub.AppendMessages, append, timeout=30)
    tool = ses.ToolDefinition(name="read", parameters_json=arguments_json)
    create = pb.CreateSessionRequest(session=ses.Session(tools=[tool]))
    expect_error(INVALID, "INVALID_JSON", stub.CreateSession, create, timeout=30)


def test_escaped_surrogate_pairs_still_work_everywhere(stub: pb_grpc.ContextServiceStub) -> None:
    arguments = '{"path": "\\ud83d\\ude00.txt", "n": "\\u0000"}'
    tool = ses.ToolDefinition(name="read", parameters_json='{"d": "\\ud83d\\ude00"}')
    sid = new_session(stub, tools=[tool], policy=ses.ContextPolicy(keep_recent_tokens=20))
    turns = compactable_turns(arguments)
    stub.AppendMessages(pb.AppendMessagesRequest(session_id=sid, messages=turns), timeout=30)
    for fmt in range(1, 6):
        stub.BuildModelInput(
            pb.BuildModelInputRequest(session_id=sid, format=fmt),  # type: ignore[arg-type]
            timeout=30,
        )
    compaction = stub.Compact(pb.CompactRequest(session_id=sid), timeout=30)
    assert compaction.read_files == ["\U0001f600.txt"]


def _png(width: int, height: int) -> bytes:
    return b"\x89PNG\r\n\x1a\n" + struct.pack(">I4sII", 13, b"IHDR", width, height)


def test_gemini_image_claiming_a_huge_size_costs_at_most_16_tiles(
    stub: pb_grpc.ContextServiceStub,
) -> None:
    """258 per 768-px tile of the claimed size was 8 * 10**15 tokens for this 24-byte
    header: INTERNAL on MySQL (the stored count overflowed), a poisoned total on SQLite."""
    sid = new_session(stub, model="gemini-2.5-pro")
    image = m.ContentBlock(image=m.ImageContent(mime_type="image/png", data=_png(2**32 - 1, 7)))
    message = m.Message(role=m.ROLE_USER, content=[image])
    stored = stub.AppendMessages(
        pb.AppendMessagesRequest(session_id=sid, messages=[message]), timeout=30
    )
    assert 258 <= stored.messages[0].token_count <= 258 * 16 + 10
    assert stub.GetSession(pb.GetSessionRequest(session_id=sid), timeout=30).context_tokens < 10_000


def test_model_input_bytes_do_not_depend_on_metadata_order(
    stub: pb_grpc.ContextServiceStub, fuzz: FuzzTarget
) -> None:
    """Found by the restart check: messages were encoded with map entries in the order
    the map was filled, which differs between the appended message (request order)
    and the restored one (sorted), so "same state, same bytes" failed after a restore."""
    build: grpc.UnaryUnaryMultiCallable[bytes, bytes] = fuzz.channel.unary_unary(
        "/ctxwarden.v1.ContextService/BuildModelInput",
        request_serializer=None,
        response_deserializer=None,
    )
    sid = new_session(stub)
    message = user("hello")
    for key in ("z", "k", "d", "b", "a"):
        message.metadata[key] = key
    stub.AppendMessages(pb.AppendMessagesRequest(session_id=sid, messages=[message]), timeout=30)
    request = pb.BuildModelInputRequest(session_id=sid).SerializeToString()
    hot = build(request, timeout=30)
    for other in fuzz.pool.sessions[:4]:  # the fuzzed server keeps 3 sessions hot
        build(pb.BuildModelInputRequest(session_id=other).SerializeToString(), timeout=30)
    assert build(request, timeout=30) == hot


# -- documented limits ------------------------------------------------------------------


def test_a_message_over_the_size_limit_is_invalid_argument(
    stub: pb_grpc.ContextServiceStub,
) -> None:
    big = user("x" * (8 * 1024 * 1024 + 1))
    request = pb.AppendMessagesRequest(session_id="fuzz-plain", messages=[big])
    expect_error(INVALID, "MESSAGE_TOO_LARGE", stub.AppendMessages, request, timeout=60)


def test_too_many_messages_is_invalid_argument(stub: pb_grpc.ContextServiceStub) -> None:
    request = pb.AppendMessagesRequest(session_id="fuzz-plain", messages=[user("x")] * 1001)
    expect_error(INVALID, "TOO_MANY_MESSAGES", stub.AppendMessages, request, timeout=60)


def test_a_request_over_64_mib_is_refused_and_the_server_carries_on(fuzz: FuzzTarget) -> None:
    unary: grpc.UnaryUnaryMultiCallable[bytes, bytes] = fuzz.channel.unary_unary(
        "/ctxwarden.v1.ContextService/CountTokens",
        request_serializer=None,
        response_deserializer=None,
    )
    payload = pb.CountTokensRequest(text="x" * (64 * 1024 * 1024 + 16)).SerializeToString()
    with pytest.raises(grpc.RpcError) as caught:
        unary(payload, timeout=60)
    assert caught.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    fuzz.assert_healthy()


# -- bugs found by fuzzing in service/ (fixed) -----------------------------------------


def _token(value: dict[str, object]) -> str:
    return base64.urlsafe_b64encode(json.dumps(value).encode()).decode().rstrip("=")


FORGED_TOKENS = [
    ("ListSessions", _token({"u": "", "p": ""})),
    ("ListSessions", _token({"u": "", "p": "", "t": "x", "i": "a"})),
    ("ListSessions", _token({"u": "", "p": "", "t": 10**30, "i": "a"})),
    ("ListSessions", _token({"u": "", "p": "", "t": 1, "i": "é"})),
    ("ListSessions", _token({"u": "", "p": "", "t": 1, "i": "\ud800"})),
    ("ListSessions", base64.urlsafe_b64encode(b"[" * 100_000).decode()),
    ("ListMessages", _token({"s": "fuzz-plain", "r": False})),
    ("ListMessages", _token({"s": "fuzz-plain", "r": False, "a": None})),
    ("ListMessages", _token({"s": "fuzz-plain", "r": False, "a": 10**30})),
    ("ListCompactions", _token({"s": "fuzz-claude"})),
    ("ListCompactions", _token({"s": "fuzz-claude", "t": [], "i": "x"})),
]


@pytest.mark.parametrize(("rpc", "forged"), FORGED_TOKENS, ids=[str(i) for i in range(11)])
def test_forged_page_tokens_are_invalid_argument(
    stub: pb_grpc.ContextServiceStub, rpc: str, forged: str
) -> None:
    """A token that decodes but was not issued by the server (was: INTERNAL from
    KeyError, ValueError, TypeError, RecursionError, SQLite OverflowError,
    UnicodeEncodeError; UNAVAILABLE on MySQL for a non-ASCII id; or accepted)."""
    requests: dict[str, tuple[Callable[..., Any], PbMessage]] = {
        "ListSessions": (stub.ListSessions, pb.ListSessionsRequest(page_token=forged)),
        "ListMessages": (
            stub.ListMessages,
            pb.ListMessagesRequest(session_id="fuzz-plain", page_token=forged),
        ),
        "ListCompactions": (
            stub.ListCompactions,
            pb.ListCompactionsRequest(session_id="fuzz-claude", page_token=forged),
        ),
    }
    method, request = requests[rpc]
    expect_error(INVALID, "INVALID_PAGE_TOKEN", method, request, timeout=30)


@pytest.mark.parametrize("request_id", ["é", "a" * 129, "a b"])
def test_compact_rejects_a_malformed_request_id(
    stub: pb_grpc.ContextServiceStub, request_id: str
) -> None:
    """As every other RPC: INVALID_KEY (was: accepted on SQLite; on MySQL a non-ASCII
    one UNAVAILABLE, one over 128 characters INTERNAL after the summariser ran)."""
    sid = new_session(stub, policy=ses.ContextPolicy(keep_recent_tokens=20))
    stub.AppendMessages(
        pb.AppendMessagesRequest(session_id=sid, messages=compactable_turns()), timeout=30
    )
    request = pb.CompactRequest(session_id=sid, request_id=request_id)
    expect_error(INVALID, "INVALID_KEY", stub.Compact, request, timeout=30)


def test_commit_with_a_non_ascii_plan_id_is_not_found(stub: pb_grpc.ContextServiceStub) -> None:
    """Was UNAVAILABLE on MySQL (illegal mix of collations with the ASCII column)."""
    commit = pb.CommitCompactionRequest(session_id="fuzz-plain", plan_id="é", summary="s")
    expect_error(grpc.StatusCode.NOT_FOUND, "PLAN_NOT_FOUND", stub.CommitCompaction, commit)


def test_count_tokens_refuses_hf_paths_outside_the_allowlist(
    stub: pb_grpc.ContextServiceStub, tmp_path: Path
) -> None:
    """As CreateSession/UpdateSession: TOKENIZER_NOT_ALLOWED (CountTokens used to open
    and parse the file, and its error told whether a path exists and parses)."""
    secret = tmp_path / "tokenizer.json"
    secret.write_text("not json")
    request = pb.CountTokensRequest(tokenizer=f"hf:{secret}", text="x")
    expect_error(INVALID, "TOKENIZER_NOT_ALLOWED", stub.CountTokens, request, timeout=30)


@pytest.mark.parametrize("request_id", ["é", "a" * 129, "a b"])
def test_an_unreadable_model_output_with_a_malformed_request_id_is_invalid_key(
    stub: pb_grpc.ContextServiceStub, request_id: str
) -> None:
    """Found by the structured fuzzer: a body that does not read made the server look
    the key up in the request log (a retry may no longer read); on MySQL a non-ASCII
    key there was UNAVAILABLE (a collation error). Now INVALID_KEY before any read."""
    sid = new_session(stub)
    body = json.dumps({"object": "chat.completion", "choices": [{"message": {"content": "x"}}]})
    request = pb.AppendModelOutputRequest(
        session_id=sid,
        format=pb.MODEL_INPUT_FORMAT_OPENAI_CHAT,
        items_json=body,
        request_id=request_id,
    )
    expect_error(INVALID, "INVALID_KEY", stub.AppendModelOutput, request, timeout=30)
