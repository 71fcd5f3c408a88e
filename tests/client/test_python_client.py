"""Tests of the Python client ``ctxwarden_client``.

The first part needs no ctxwarden server: builders, error decoding, retry
policy, and retries/rich errors against a tiny in-process fake server. The
second part runs against the live server given by the ``server_target`` fixture.
"""

from __future__ import annotations

import asyncio
import json
import threading
import uuid
from collections.abc import Iterator
from concurrent import futures
from dataclasses import dataclass, field
from typing import Any

import grpc
import pytest
from google.protobuf import any_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2
from grpc_status import rpc_status

import ctxwarden_client as cw
from ctxwarden_client import (
    AbortedError,
    AlreadyExistsError,
    AsyncClient,
    Client,
    CtxwardenError,
    DeadlineExceededError,
    FailedPreconditionError,
    InvalidArgumentError,
    NotFoundError,
    ResourceExhaustedError,
    UnavailableError,
    assistant,
    tool_call,
    tool_result,
    user,
)
from ctxwarden_client._retry import RetryPolicy
from ctxwarden_client.v1 import (
    context_service_pb2,
    context_service_pb2_grpc,
    message_pb2,
    session_pb2,
)

DETAILS_KEY = "grpc-status-details-bin"


def new_id(prefix: str = "py") -> str:
    return f"{prefix}-{uuid.uuid4().hex}"


# ---------------------------------------------------------------------------
# Builders
# ---------------------------------------------------------------------------


def test_user_builder() -> None:
    msg = user("hello", message_id="m1", images=[cw.image(b"\x89PNG", "image/png")])
    assert msg.role == message_pb2.ROLE_USER
    assert msg.message_id == "m1"
    assert [b.WhichOneof("block") for b in msg.content] == ["text", "image"]
    assert msg.content[0].text.text == "hello"
    assert msg.content[1].image.data == b"\x89PNG"
    assert msg.content[1].image.mime_type == "image/png"

    tuple_image = user("", images=[("image/jpeg", b"jpg")])
    assert [b.WhichOneof("block") for b in tuple_image.content] == ["image"]
    assert tuple_image.content[0].image.mime_type == "image/jpeg"


def test_assistant_builder_defaults() -> None:
    plain = assistant("done")
    assert plain.role == message_pb2.ROLE_ASSISTANT
    assert plain.stop_reason == message_pb2.STOP_REASON_STOP
    assert plain.content[0].text.text == "done"
    assert not plain.HasField("usage")

    call = tool_call("call_1", "read", {"path": "a.txt", "n": 1})
    with_tools = assistant(
        "let me look",
        tool_calls=[call, tool_call("call_2", "ls", '{"dir": "."}')],
        thinking="hmm",
        usage=cw.usage(10, 5),
        model="gpt-4o",
        provider="openai",
        message_id="a1",
    )
    assert with_tools.stop_reason == message_pb2.STOP_REASON_TOOL_USE
    assert [b.WhichOneof("block") for b in with_tools.content] == [
        "thinking",
        "text",
        "tool_call",
        "tool_call",
    ]
    assert json.loads(with_tools.content[2].tool_call.arguments_json) == {"path": "a.txt", "n": 1}
    assert with_tools.content[3].tool_call.arguments_json == '{"dir": "."}'
    assert with_tools.usage.total_tokens == 15
    assert (with_tools.model, with_tools.provider, with_tools.message_id) == (
        "gpt-4o",
        "openai",
        "a1",
    )

    failed = assistant(stop_reason=message_pb2.STOP_REASON_ERROR, error_message="429 rate limit")
    assert failed.stop_reason == message_pb2.STOP_REASON_ERROR
    assert failed.error_message == "429 rate limit"
    assert len(failed.content) == 0
    # An error message alone implies a failed turn.
    assert assistant(error_message="boom").stop_reason == message_pb2.STOP_REASON_ERROR
    explicit = assistant("cut", stop_reason=message_pb2.STOP_REASON_LENGTH)
    assert explicit.stop_reason == message_pb2.STOP_REASON_LENGTH


def test_tool_result_builder() -> None:
    msg = tool_result("call_1", "file body", tool_name="read", is_error=True, message_id="t1")
    assert msg.role == message_pb2.ROLE_TOOL_RESULT
    assert msg.tool_call_id == "call_1"
    assert msg.tool_name == "read"
    assert msg.is_error is True
    assert msg.message_id == "t1"
    assert msg.content[0].text.text == "file body"
    # Builders return real protos that round-trip through the wire format.
    assert message_pb2.Message.FromString(msg.SerializeToString()) == msg


def test_tool_definition_builder() -> None:
    tool = cw.tool_definition("read", "Reads a file", {"type": "object"})
    assert isinstance(tool, session_pb2.ToolDefinition)
    assert json.loads(tool.parameters_json) == {"type": "object"}


# ---------------------------------------------------------------------------
# Error decoding (no server)
# ---------------------------------------------------------------------------


@dataclass(eq=False)
class FakeRpcError(grpc.RpcError):
    """Quacks like grpc's _InactiveRpcError / aio AioRpcError."""

    status_code: grpc.StatusCode
    message: str
    trailers: Any = field(default_factory=tuple)

    def code(self) -> grpc.StatusCode:
        return self.status_code

    def details(self) -> str:
        return self.message

    def trailing_metadata(self) -> Any:
        return self.trailers


def rich_status(
    code: int, message: str, reason: str, metadata: dict[str, str] | None = None
) -> status_pb2.Status:
    info = error_details_pb2.ErrorInfo(
        reason=reason, domain="ctxwarden.dev", metadata=metadata or {}
    )
    packed = any_pb2.Any()
    packed.Pack(info)
    retry = any_pb2.Any()
    retry.Pack(error_details_pb2.RetryInfo())
    return status_pb2.Status(code=code, message=message, details=[retry, packed])


def test_error_decoding_from_status_details() -> None:
    status = rich_status(
        code_pb2.NOT_FOUND, "session s1 not found", "SESSION_NOT_FOUND", {"session_id": "s1"}
    )
    err = cw.error_from_rpc_error(
        FakeRpcError(
            grpc.StatusCode.NOT_FOUND,
            "session s1 not found",
            (("content-type", "x"), (DETAILS_KEY, status.SerializeToString())),
        )
    )
    assert type(err) is NotFoundError
    assert isinstance(err, CtxwardenError)
    assert err.code == grpc.StatusCode.NOT_FOUND
    assert err.message == "session s1 not found"
    assert err.reason == "SESSION_NOT_FOUND"
    assert err.domain == "ctxwarden.dev"
    assert err.metadata == {"session_id": "s1"}
    assert len(err.details) == 2
    assert "SESSION_NOT_FOUND" in str(err)
    assert "NOT_FOUND" in str(err)


def test_error_decoding_aio_metadata() -> None:
    status = rich_status(code_pb2.ABORTED, "last_seq is 3", "LAST_SEQ_MISMATCH")
    trailers = grpc.aio.Metadata((DETAILS_KEY, status.SerializeToString()))
    err = cw.error_from_rpc_error(FakeRpcError(grpc.StatusCode.ABORTED, "last_seq is 3", trailers))
    assert isinstance(err, AbortedError)
    assert err.reason == "LAST_SEQ_MISMATCH"


def test_error_decoding_without_details() -> None:
    err = cw.error_from_rpc_error(FakeRpcError(grpc.StatusCode.INTERNAL, "boom", None))
    assert type(err) is CtxwardenError
    assert err.code == grpc.StatusCode.INTERNAL
    assert (err.message, err.reason, err.domain, err.metadata) == ("boom", "", "", {})


def test_error_decoding_malformed_details() -> None:
    trailers = ((DETAILS_KEY, b"\xff\xff not a status"),)
    err = cw.error_from_rpc_error(FakeRpcError(grpc.StatusCode.UNAVAILABLE, "down", trailers))
    assert isinstance(err, UnavailableError)
    assert err.reason == ""
    assert err.message == "down"


def test_error_message_falls_back_to_status_message() -> None:
    status = rich_status(code_pb2.INVALID_ARGUMENT, "role is required", "INVALID_MESSAGE")
    trailers = ((DETAILS_KEY, status.SerializeToString()),)
    err = cw.error_from_rpc_error(FakeRpcError(grpc.StatusCode.INVALID_ARGUMENT, "", trailers))
    assert isinstance(err, InvalidArgumentError)
    assert err.message == "role is required"


@pytest.mark.parametrize(
    ("code", "cls"),
    [
        (grpc.StatusCode.NOT_FOUND, NotFoundError),
        (grpc.StatusCode.ALREADY_EXISTS, AlreadyExistsError),
        (grpc.StatusCode.INVALID_ARGUMENT, InvalidArgumentError),
        (grpc.StatusCode.FAILED_PRECONDITION, FailedPreconditionError),
        (grpc.StatusCode.ABORTED, AbortedError),
        (grpc.StatusCode.RESOURCE_EXHAUSTED, ResourceExhaustedError),
        (grpc.StatusCode.UNAVAILABLE, UnavailableError),
        (grpc.StatusCode.DEADLINE_EXCEEDED, DeadlineExceededError),
        (grpc.StatusCode.PERMISSION_DENIED, CtxwardenError),
        (grpc.StatusCode.UNKNOWN, CtxwardenError),
    ],
)
def test_error_class_table(code: grpc.StatusCode, cls: type[CtxwardenError]) -> None:
    err = cw.error_from_rpc_error(FakeRpcError(code, "x"))
    assert type(err) is cls
    assert err.code == code


def test_retry_policy() -> None:
    policy = RetryPolicy(retries=2)
    unavailable = CtxwardenError("x", code=grpc.StatusCode.UNAVAILABLE)
    deadline = CtxwardenError("x", code=grpc.StatusCode.DEADLINE_EXCEEDED)
    aborted = CtxwardenError("x", code=grpc.StatusCode.ABORTED)
    assert policy.should_retry(unavailable, 0, safe=False)
    assert policy.should_retry(unavailable, 1, safe=False)
    assert not policy.should_retry(unavailable, 2, safe=False)
    assert policy.should_retry(deadline, 0, safe=True)
    assert not policy.should_retry(deadline, 0, safe=False)
    assert not policy.should_retry(aborted, 0, safe=True)
    assert not RetryPolicy(retries=0).should_retry(unavailable, 0, safe=True)
    assert all(0 < policy.backoff(n) <= policy.max_backoff for n in range(10))


# ---------------------------------------------------------------------------
# Fake server: retries and rich errors over a real gRPC connection
# ---------------------------------------------------------------------------


class FakeService(context_service_pb2_grpc.ContextServiceServicer):
    """Fails each method with a scripted status code a few times, then succeeds.

    Only GetSession and CreateSession are implemented; the rest answer UNIMPLEMENTED.
    """

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.script: dict[str, list[grpc.StatusCode]] = {}
        self.calls: dict[str, int] = {}

    def fail(self, method: str, *codes: grpc.StatusCode) -> None:
        with self.lock:
            self.script[method] = list(codes)
            self.calls[method] = 0

    def _step(self, method: str, context: grpc.ServicerContext) -> None:
        with self.lock:
            self.calls[method] = self.calls.get(method, 0) + 1
            codes = self.script.get(method, [])
            code = codes.pop(0) if codes else None
        if code is not None:
            status = rich_status(code.value[0], f"scripted {code.name}", f"FAKE_{code.name}")
            context.abort_with_status(rpc_status.to_status(status))

    def GetSession(
        self, request: context_service_pb2.GetSessionRequest, context: grpc.ServicerContext
    ) -> session_pb2.Session:
        self._step("GetSession", context)
        return session_pb2.Session(session_id=request.session_id)

    def CreateSession(
        self, request: context_service_pb2.CreateSessionRequest, context: grpc.ServicerContext
    ) -> session_pb2.Session:
        self._step("CreateSession", context)
        session = session_pb2.Session()
        session.CopyFrom(request.session)
        session.session_id = request.session_id or "generated"
        return session


@pytest.fixture(scope="module")
def fake() -> Iterator[tuple[FakeService, str]]:
    service = FakeService()  # type: ignore[abstract]  # abstract only in the .pyi
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    context_service_pb2_grpc.add_ContextServiceServicer_to_server(service, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield service, f"127.0.0.1:{port}"
    finally:
        server.stop(None)


def test_sync_retries_unavailable(fake: tuple[FakeService, str]) -> None:
    service, target = fake
    service.fail("GetSession", grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.UNAVAILABLE)
    with Client(target, timeout=5) as client:
        assert client.get_session("s1").session_id == "s1"
    assert service.calls["GetSession"] == 3

    service.fail("GetSession", *[grpc.StatusCode.UNAVAILABLE] * 3)
    with Client(target, timeout=5) as client, pytest.raises(UnavailableError) as info:
        client.get_session("s1")
    assert info.value.reason == "FAKE_UNAVAILABLE"
    assert service.calls["GetSession"] == 3

    service.fail("GetSession", grpc.StatusCode.UNAVAILABLE)
    with Client(target, timeout=5, retries=0) as client, pytest.raises(UnavailableError):
        client.get_session("s1")
    assert service.calls["GetSession"] == 1


def test_sync_deadline_retried_only_when_safe(fake: tuple[FakeService, str]) -> None:
    service, target = fake
    with Client(target, timeout=5) as client:
        service.fail("CreateSession", grpc.StatusCode.DEADLINE_EXCEEDED)
        with pytest.raises(DeadlineExceededError):
            client.create_session(title="t")
        assert service.calls["CreateSession"] == 1

        service.fail("CreateSession", grpc.StatusCode.DEADLINE_EXCEEDED)
        created = client.create_session(session_id="s9", request_id=new_id("req"), title="t")
        assert (created.session_id, created.title) == ("s9", "t")
        assert service.calls["CreateSession"] == 2

        service.fail("GetSession", grpc.StatusCode.DEADLINE_EXCEEDED)
        assert client.get_session("s2").session_id == "s2"
        assert service.calls["GetSession"] == 2

        service.fail("GetSession", grpc.StatusCode.NOT_FOUND)
        with pytest.raises(NotFoundError) as info:
            client.get_session("s2")
        assert info.value.reason == "FAKE_NOT_FOUND"
        assert info.value.domain == "ctxwarden.dev"
        assert service.calls["GetSession"] == 1


async def test_async_retries_and_rich_errors(fake: tuple[FakeService, str]) -> None:
    service, target = fake
    async with AsyncClient(target, timeout=5) as client:
        service.fail("GetSession", grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.UNAVAILABLE)
        assert (await client.get_session("a1")).session_id == "a1"
        assert service.calls["GetSession"] == 3

        service.fail("CreateSession", grpc.StatusCode.ALREADY_EXISTS)
        with pytest.raises(AlreadyExistsError) as info:
            await client.create_session(session_id="dup")
        assert info.value.reason == "FAKE_ALREADY_EXISTS"
        assert service.calls["CreateSession"] == 1


def test_create_session_rejects_session_and_fields() -> None:
    with Client("127.0.0.1:1") as client, pytest.raises(TypeError):
        client.create_session(session_pb2.Session(title="a"), title="b")


def test_client_unreachable_raises_unavailable() -> None:
    # Nothing listens on port 1: every attempt fails fast with UNAVAILABLE.
    with Client("127.0.0.1:1", timeout=5, retries=1) as client, pytest.raises(UnavailableError):
        client.get_session("x")


# ---------------------------------------------------------------------------
# Live server
# ---------------------------------------------------------------------------

READ_TOOL = cw.tool_definition(
    "read",
    "Reads a file",
    {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
)


def three_messages() -> list[message_pb2.Message]:
    return [
        user("Read a.txt please"),
        assistant(
            "Reading it.",
            tool_calls=[tool_call("call_1", "read", {"path": "a.txt"})],
            usage=cw.usage(20, 8),
            model="gpt-4o",
            provider="openai",
        ),
        tool_result("call_1", "hello from a.txt", tool_name="read"),
    ]


def test_sync_client_flow(server_target: str) -> None:
    with Client(server_target, timeout=10) as client:
        sid = new_id("sync")
        created = client.create_session(
            session_id=sid,
            user_id="py-client",
            title="sync flow",
            system_prompt="You are a careful assistant.",
            tools=[READ_TOOL],
            model="gpt-4o",
            labels={"suite": "client"},
        )
        assert created.session_id == sid
        assert created.last_seq == 0
        assert created.etag

        appended = client.append_messages(sid, three_messages(), expected_last_seq=0)
        assert appended.last_seq == 3
        assert [m.seq for m in appended.messages] == [1, 2, 3]
        assert all(m.token_count > 0 for m in appended.messages)

        model_input = client.build_model_input(sid)
        assert model_input.session_id == sid
        assert model_input.system_prompt == "You are a careful assistant."
        assert [t.name for t in model_input.tools] == ["read"]
        assert [m.role for m in model_input.messages] == [
            message_pb2.ROLE_USER,
            message_pb2.ROLE_ASSISTANT,
            message_pb2.ROLE_TOOL_RESULT,
        ]
        assert [m.seq for m in model_input.messages] == [1, 2, 3]
        assert all(m.token_count > 0 for m in model_input.messages)
        assert model_input.tokens.message_tokens > 0
        assert model_input.tokens.total_tokens > 0
        assert model_input.last_seq == 3

        # Two more messages, then page through 5 messages two at a time.
        client.append_messages(sid, user("thanks"))
        client.append_messages(sid, [assistant("You're welcome.")])
        listed = list(client.list_messages(sid, page_size=2))
        assert [m.seq for m in listed] == [1, 2, 3, 4, 5]
        assert listed[2].tool_call_id == "call_1"

        # The session changed only in history: etag stays, last_seq moves.
        fetched = client.get_session(sid)
        assert fetched.last_seq == 5
        assert fetched.etag == created.etag

        # Optimistic concurrency on settings.
        fetched.title = "renamed"
        updated = client.update_session(fetched, ["title"], etag=fetched.etag)
        assert updated.title == "renamed"
        assert updated.etag != fetched.etag
        fetched.title = "stale write"
        with pytest.raises(AbortedError) as aborted:
            client.update_session(fetched, ["title"], etag=fetched.etag)
        assert aborted.value.reason
        assert client.get_session(sid).title == "renamed"

        client.delete_session(sid)
        with pytest.raises(NotFoundError) as info:
            client.get_session(sid)
        assert info.value.reason
        assert info.value.domain == "ctxwarden.dev"


def test_sync_list_sessions(server_target: str) -> None:
    owner = new_id("owner")
    with Client(server_target, timeout=10) as client:
        ids = [client.create_session(user_id=owner, title=f"s{i}").session_id for i in range(5)]
        other = client.create_session(user_id=new_id("other")).session_id
        listed = [s.session_id for s in client.list_sessions(user_id=owner, page_size=2)]
        assert sorted(listed) == sorted(ids)
        assert listed == list(reversed(ids))  # newest first
        assert other not in listed
        assert all(s.user_id == owner for s in client.list_sessions(user_id=owner))
        every = {s.session_id for s in client.list_sessions(page_size=3)}
        assert set(ids) | {other} <= every


def test_sync_stream_messages(server_target: str) -> None:
    with Client(server_target, timeout=10) as client:
        sid = client.create_session(title="sync stream").session_id
        with client.stream_messages(max_in_flight=4) as stream:
            seqs = [stream.send(sid, [user(f"hello {i}")]).last_seq for i in range(5)]
            assert seqs == [1, 2, 3, 4, 5]
            requests = [
                context_service_pb2.AppendMessagesRequest(session_id=sid, messages=[user(f"m{i}")])
                for i in range(10)
            ]
            piped = [r.last_seq for r in stream.send_many(requests)]
            assert piped == list(range(6, 16))
        assert client.get_session(sid).last_seq == 15


async def test_async_client_flow(server_target: str) -> None:
    async with AsyncClient(server_target, timeout=10) as client:
        sid = new_id("async")
        created = await client.create_session(
            session_id=sid, user_id="py-async", tools=[READ_TOOL], system_prompt="Be brief."
        )
        assert created.session_id == sid

        appended = await client.append_messages(sid, three_messages())
        assert appended.last_seq == 3

        model_input = await client.build_model_input(sid, max_output_tokens=1024)
        assert len(model_input.messages) == 3
        assert all(m.token_count > 0 for m in model_input.messages)
        assert model_input.tokens.total_tokens > 0

        listed = [m.seq async for m in client.list_messages(sid, page_size=2)]
        assert listed == [1, 2, 3]
        sessions = [s.session_id async for s in client.list_sessions(user_id="py-async")]
        assert sid in sessions

        fetched = await client.get_session(sid)
        fetched.pinned_state = "step 2 of 5"
        updated = await client.update_session(fetched, ["pinned_state"], etag=fetched.etag)
        assert updated.pinned_state == "step 2 of 5"

        await client.delete_session(sid)
        with pytest.raises(NotFoundError) as info:
            await client.get_session(sid)
        assert info.value.reason


def test_sync_count_tokens(server_target: str) -> None:
    with Client(server_target, timeout=10) as client:
        counted = client.count_tokens(
            "gpt-4o", messages=three_messages(), tools=[READ_TOOL], text="Summarise the file."
        )
        assert len(counted.message_tokens) == 3
        assert all(n > 0 for n in counted.message_tokens)
        assert counted.tools_tokens > 0
        assert counted.text_tokens > 0
        # Messages add their reply framing once; tools and text add exactly their counts.
        only_messages = client.count_tokens("gpt-4o", messages=three_messages())
        assert list(only_messages.message_tokens) == list(counted.message_tokens)
        assert only_messages.total_tokens >= sum(only_messages.message_tokens)
        assert counted.total_tokens == (
            only_messages.total_tokens + counted.tools_tokens + counted.text_tokens
        )
        no_messages = client.count_tokens("gpt-4o", tools=[READ_TOOL], text="Summarise the file.")
        assert no_messages.total_tokens == counted.tools_tokens + counted.text_tokens
        assert counted.tokenizer

        short = client.count_tokens(text="hello")
        longer = client.count_tokens(text="hello " * 50)
        assert list(short.message_tokens) == [] and short.tools_tokens == 0
        assert 0 < short.total_tokens < longer.total_tokens
        assert longer.total_tokens == longer.text_tokens

        heuristic = client.count_tokens(text="hello " * 50, tokenizer="heuristic")
        assert heuristic.tokenizer == "heuristic"
        assert not heuristic.exact
        assert heuristic.text_tokens > 0


async def test_async_count_tokens(server_target: str) -> None:
    async with AsyncClient(server_target, timeout=10) as client:
        counted = await client.count_tokens(
            "gpt-4o", messages=user("What is in a.txt?"), tools=[READ_TOOL], text="extra"
        )
        assert len(counted.message_tokens) == 1
        assert counted.tools_tokens > 0
        only_message = await client.count_tokens("gpt-4o", messages=[user("What is in a.txt?")])
        assert only_message.total_tokens >= sum(only_message.message_tokens) > 0
        assert counted.total_tokens == (
            only_message.total_tokens + counted.tools_tokens + counted.text_tokens
        )
        short = await client.count_tokens("gpt-4o", text="one two three")
        longer = await client.count_tokens("gpt-4o", text="one two three " * 40)
        assert 0 < short.total_tokens < longer.total_tokens


async def test_async_stream_messages(server_target: str) -> None:
    async with AsyncClient(server_target, timeout=10) as client:
        sid = (await client.create_session(title="async stream")).session_id
        async with client.stream_messages(max_in_flight=8) as stream:
            last_seqs = []
            for i in range(50):
                response = await stream.send(sid, [user(f"message {i}")])
                assert len(response.messages) == 1
                assert response.messages[0].seq == response.last_seq
                last_seqs.append(response.last_seq)
            assert last_seqs == list(range(1, 51))

            # Concurrent senders: requests go out in call order, bounded in flight.
            responses = await asyncio.gather(
                *(stream.send(sid, [user(f"concurrent {i}")]) for i in range(20))
            )
            assert [r.last_seq for r in responses] == list(range(51, 71))

            requests = (
                context_service_pb2.AppendMessagesRequest(
                    session_id=sid, messages=[user(f"piped {i}")]
                )
                for i in range(10)
            )
            piped = [r.last_seq async for r in stream.send_many(requests)]
            assert piped == list(range(71, 81))
        assert stream.closed
        assert (await client.get_session(sid)).last_seq == 80
        texts = [m.content[0].text.text async for m in client.list_messages(sid, page_size=30)]
        assert texts[:2] == ["message 0", "message 1"]
        assert texts[-1] == "piped 9"


async def test_async_stream_error_ends_stream(server_target: str) -> None:
    async with AsyncClient(server_target, timeout=10) as client:
        sid = (await client.create_session(title="stream error")).session_id
        async with client.stream_messages() as stream:
            ok = await stream.send(sid, [user("one")], expected_last_seq=0)
            assert ok.last_seq == 1
            with pytest.raises(AbortedError) as info:
                await stream.send(sid, [user("two")], expected_last_seq=0)
            assert info.value.reason
            # The server ends the stream on the first error; later sends fail too.
            with pytest.raises(CtxwardenError):
                await stream.send(sid, [user("three")])
        assert (await client.get_session(sid)).last_seq == 1


def test_error_mapping(server_target: str) -> None:
    with Client(server_target, timeout=10) as client:
        sid = new_id("errors")
        client.create_session(session_id=sid, tools=[READ_TOOL])

        with pytest.raises(AlreadyExistsError) as exists:
            client.create_session(session_id=sid)
        assert exists.value.reason

        client.append_messages(sid, [user("hi")])
        with pytest.raises(AbortedError) as aborted:
            client.append_messages(sid, [user("again")], expected_last_seq=0)
        assert aborted.value.reason

        client.append_messages(
            sid,
            [
                assistant(tool_calls=[tool_call("c1", "read", {"path": "a"})]),
                tool_result("c1", "output", tool_name="read"),
            ],
        )
        with pytest.raises(FailedPreconditionError) as precondition:
            client.append_messages(sid, [tool_result("c1", "again", tool_name="read")])
        assert precondition.value.reason == "TOOL_CALL_ALREADY_ANSWERED"

        no_role = message_pb2.Message(
            content=[message_pb2.ContentBlock(text=message_pb2.TextContent(text="who am I"))]
        )
        with pytest.raises(InvalidArgumentError) as invalid:
            client.append_messages(sid, [no_role])
        assert invalid.value.reason

        with pytest.raises(NotFoundError) as missing:
            client.build_model_input(new_id("missing"))
        assert missing.value.reason

        # None of the failed appends wrote anything.
        assert client.get_session(sid).last_seq == 3


async def test_async_error_mapping(server_target: str) -> None:
    async with AsyncClient(server_target, timeout=10) as client:
        sid = new_id("async-errors")
        await client.create_session(session_id=sid)
        with pytest.raises(AlreadyExistsError):
            await client.create_session(session_id=sid)
        with pytest.raises(AbortedError):
            await client.append_messages(sid, [user("x")], expected_last_seq=7)
        with pytest.raises(NotFoundError):
            await client.get_session(new_id("missing"))


def test_rollback_failed_turn(server_target: str) -> None:
    with Client(server_target, timeout=10) as client:
        sid = client.create_session(title="rollback").session_id
        client.append_messages(sid, [user("write a poem")])
        failed = assistant(
            stop_reason=message_pb2.STOP_REASON_ERROR,
            error_message="429 rate limit",
            model="gpt-4o",
            provider="openai",
        )
        appended = client.append_messages(sid, [failed])
        failed_seq = appended.messages[0].seq
        assert failed_seq == 2

        result = client.rollback_turn(sid)
        assert list(result.rolled_back_seqs) == [failed_seq]
        assert result.action == context_service_pb2.RECOVERY_ACTION_RETRY

        history = list(client.list_messages(sid, include_rolled_back=True))
        assert [m.state for m in history] == [
            message_pb2.MESSAGE_STATE_ACTIVE,
            message_pb2.MESSAGE_STATE_ROLLED_BACK,
        ]
        assert [m.seq for m in client.list_messages(sid)] == [1]

        # Nothing left to roll back: harmless.
        again = client.rollback_turn(sid)
        assert list(again.rolled_back_seqs) == []
