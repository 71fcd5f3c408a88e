"""The Python client speaks the whole ContextService: every RPC, every request field.

The tests walk the service descriptor of ``ctxwarden.v1.ContextService``. For
each RPC the sync and the async client must have a method (the RPC's name in
snake_case; for StreamMessages the stream's ``send``) with a parameter per
request field. Then each method is called with a non-default value for every
field against a recording gRPC server, which must receive exactly the request
those values make: a parameter that is accepted but not sent fails too. A new
RPC or request field fails here until the client (and the README's table) can
express it.
"""

from __future__ import annotations

import inspect
import itertools
import re
import threading
from collections.abc import Callable, Iterable, Iterator
from concurrent import futures
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf import field_mask_pb2, message_factory, timestamp_pb2
from google.protobuf.descriptor import FieldDescriptor, MethodDescriptor
from google.protobuf.message import Message

import ctxwarden_client as cw
from ctxwarden.v1 import context_service_pb2 as server_pb
from ctxwarden_client.v1 import context_service_pb2 as pb

SERVICE = pb.DESCRIPTOR.services_by_name["ContextService"]
METHODS: list[MethodDescriptor] = list(SERVICE.methods)
README = Path(__file__).resolve().parents[2] / "client" / "python" / "README.md"

# Request fields that a method takes under another parameter name.
PARAMETER_NAMES = {("StreamMessages", "session_id"): "session_id_or_request"}


def method_name(rpc: MethodDescriptor) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", rpc.name).lower()


def parameter_name(rpc: MethodDescriptor, field: FieldDescriptor) -> str:
    return PARAMETER_NAMES.get((rpc.name, field.name), field.name)


def request_fields(rpc: MethodDescriptor) -> list[FieldDescriptor]:
    return list(rpc.input_type.fields)


# -- sample values: (what the method takes, what the request then holds) ----------


def _message_sample(full_name: str) -> tuple[object, object]:
    if full_name == "ctxwarden.v1.Session":
        session = cw.session_pb2.Session(session_id="s-1", title="title", system_prompt="sp")
        return session, session
    if full_name == "ctxwarden.v1.Message":
        message = cw.user("hello", message_id="m-1")
        return message, message
    if full_name == "ctxwarden.v1.ToolDefinition":
        tool = cw.tool_definition("read", "Reads a file", {"type": "object"})
        return tool, tool
    if full_name == "ctxwarden.v1.ProviderError":
        error = cw.provider_error(
            429, {"error": {"type": "rate_limit_error"}}, {"retry-after": "3"}
        )
        return error, error
    if full_name == "google.protobuf.FieldMask":
        return ["title", "labels"], field_mask_pb2.FieldMask(paths=["title", "labels"])
    if full_name == "ctxwarden.v1.StateDelta":
        delta = cw.state_delta({"step": 2, "gone": None}, user={"theme": "dark"})
        return delta, delta
    if full_name == "ctxwarden.v1.ProposedMemory":
        proposed = cw.memory_pb2.ProposedMemory(key="k-1", text="a fact", project_scope=True)
        return proposed, proposed
    if full_name == "ctxwarden.v1.AnchorSurvival":
        minimum = pb.AnchorSurvival(category=cw.session_pb2.ANCHOR_CATEGORY_URL, min_fraction=0.5)
        return minimum, minimum
    if full_name == "ctxwarden.v1.Memory":
        memory = cw.memory("a fact", user_id="u-1", key="k-1", labels={"a": "b"}, pinned=True)
        return memory, memory
    if full_name == "google.protobuf.Timestamp":
        when = datetime(2026, 1, 2, 3, 4, 5, 600_000, tzinfo=UTC)
        stamp = timestamp_pb2.Timestamp()
        stamp.FromDatetime(when)
        return when, stamp
    pytest.fail(f"no sample for a request field of type {full_name}: add one here")


def sample(field: FieldDescriptor) -> tuple[object, object]:
    """A non-default value for ``field``: as a method argument and as the field's value."""
    if field.message_type is not None and field.message_type.GetOptions().map_entry:
        return {"key-1": "value-1"}, {"key-1": "value-1"}
    if field.message_type is not None:
        argument, value = _message_sample(field.message_type.full_name)
        return ([argument], [value]) if field.is_repeated else (argument, value)
    if field.is_repeated:
        pytest.fail(f"no sample for the repeated scalar field {field.full_name}: add one here")
    if field.enum_type is not None:
        number = field.enum_type.values[-1].number
        return number, number
    if field.type == FieldDescriptor.TYPE_STRING:
        return f"{field.name}-1", f"{field.name}-1"
    if field.type == FieldDescriptor.TYPE_BOOL:
        return True, True
    if field.cpp_type in (
        FieldDescriptor.CPPTYPE_INT32,
        FieldDescriptor.CPPTYPE_INT64,
        FieldDescriptor.CPPTYPE_UINT32,
        FieldDescriptor.CPPTYPE_UINT64,
    ):
        return 7 + field.number, 7 + field.number
    pytest.fail(f"no sample for {field.full_name} (type {field.type}): add one here")


def _real_oneof(field: FieldDescriptor) -> str:
    """The oneof ``field`` is a member of ("" for none, or a proto3 ``optional``)."""
    oneof = field.containing_oneof
    if oneof is None or (len(oneof.fields) == 1 and oneof.name == f"_{field.name}"):
        return ""
    return str(oneof.name)


def variants(rpc: MethodDescriptor) -> list[tuple[dict[str, object], Message]]:
    """(method arguments, the request they must make): every field set, once per
    member of each oneof (the members of a oneof exclude one another)."""
    fields = request_fields(rpc)
    oneofs: dict[str, list[FieldDescriptor]] = {}
    for field in fields:
        if _real_oneof(field):
            oneofs.setdefault(_real_oneof(field), []).append(field)
    choices = [dict(zip(oneofs, pick, strict=True)) for pick in itertools.product(*oneofs.values())]
    out = []
    for chosen in choices:
        arguments: dict[str, object] = {}
        values: dict[str, object] = {}
        for field in fields:
            if _real_oneof(field) and chosen[_real_oneof(field)] is not field:
                continue
            arguments[parameter_name(rpc, field)], values[field.name] = sample(field)
        request_class = message_factory.GetMessageClass(rpc.input_type)
        out.append((arguments, request_class(**values)))
    return out


# -- a gRPC server that records every request ---------------------------------------


class Recorder:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._requests: list[tuple[str, Message]] = []

    def add(self, rpc: str, request: Message) -> None:
        with self._lock:
            self._requests.append((rpc, request))

    def take(self) -> list[tuple[str, Message]]:
        with self._lock:
            taken, self._requests = self._requests, []
        return taken


def _handler(rpc: MethodDescriptor, recorder: Recorder) -> grpc.RpcMethodHandler[Any, Any]:
    request_class = message_factory.GetMessageClass(rpc.input_type)
    response_class = message_factory.GetMessageClass(rpc.output_type)

    def unary(request: Message, context: grpc.ServicerContext) -> Message:
        recorder.add(rpc.name, request)
        return response_class()  # defaults: e.g. an empty next_page_token ends a listing

    def stream(requests: Iterable[Message], context: grpc.ServicerContext) -> Iterator[Message]:
        for request in requests:
            recorder.add(rpc.name, request)
            yield response_class()

    codec: dict[str, Any] = {
        "request_deserializer": request_class.FromString,
        "response_serializer": response_class.SerializeToString,
    }
    if rpc.client_streaming:
        return grpc.stream_stream_rpc_method_handler(stream, **codec)
    return grpc.unary_unary_rpc_method_handler(unary, **codec)


@pytest.fixture(scope="module")
def recording_server() -> Iterator[tuple[str, Recorder]]:
    recorder = Recorder()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    handlers = {rpc.name: _handler(rpc, recorder) for rpc in METHODS}
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler(SERVICE.full_name, handlers),)
    )
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield f"127.0.0.1:{port}", recorder
    finally:
        server.stop(grace=None)


def _check_received(rpc: MethodDescriptor, recorder: Recorder, expected: Message) -> None:
    received = recorder.take()
    assert [name for name, _ in received] == [rpc.name], received
    request = received[0][1]
    assert request == expected, (
        f"{rpc.name}: the server received\n{request}\ninstead of\n{expected}"
        "(a parameter that does not reach the request?)"
    )


# -- the tests -------------------------------------------------------------------------


def test_the_client_copy_of_the_contract_is_the_servers() -> None:
    assert SERVICE.full_name == "ctxwarden.v1.ContextService"
    assert pb.DESCRIPTOR.serialized_pb == server_pb.DESCRIPTOR.serialized_pb


def _target_of(client_class: type[Any], rpc: MethodDescriptor) -> Callable[..., Any]:
    if rpc.client_streaming:
        stream_class = cw.AsyncMessageStream if client_class is cw.AsyncClient else cw.MessageStream
        send: Callable[..., Any] = stream_class.send
        return send
    method: Callable[..., Any] = getattr(client_class, method_name(rpc))
    return method


@pytest.mark.parametrize("client_class", [cw.Client, cw.AsyncClient], ids=["sync", "async"])
def test_every_rpc_and_request_field_has_a_method_and_parameter(client_class: type[Any]) -> None:
    missing: list[str] = []
    for rpc in METHODS:
        name = method_name(rpc)
        if not hasattr(client_class, name):
            missing.append(f"{rpc.name}: no method {client_class.__name__}.{name}")
            continue
        target = _target_of(client_class, rpc)
        parameters = inspect.signature(target).parameters
        missing.extend(
            f"{rpc.name}.{field.name}: no parameter {parameter_name(rpc, field)!r} "
            f"of {target.__qualname__}"
            for field in request_fields(rpc)
            if parameter_name(rpc, field) not in parameters
        )
    assert not missing, "\n".join(missing)


def _calls() -> list[tuple[MethodDescriptor, tuple[dict[str, object], Message]]]:
    return [(rpc, variant) for rpc in METHODS for variant in variants(rpc)]


def test_sync_client_sends_every_request_field(recording_server: tuple[str, Recorder]) -> None:
    target, recorder = recording_server
    with cw.Client(target, timeout=10, retries=0) as client:
        for rpc, (arguments, expected) in _calls():
            if rpc.client_streaming:
                session_id = arguments.pop(parameter_name(rpc, rpc.input_type.fields[0]))
                with client.stream_messages() as stream:
                    stream.send(session_id, **arguments)  # type: ignore[arg-type]
            else:
                result = getattr(client, method_name(rpc))(**arguments)
                if inspect.isgenerator(result):
                    list(result)
            _check_received(rpc, recorder, expected)


async def test_async_client_sends_every_request_field(
    recording_server: tuple[str, Recorder],
) -> None:
    target, recorder = recording_server
    async with cw.AsyncClient(target, timeout=10, retries=0) as client:
        for rpc, (arguments, expected) in _calls():
            if rpc.client_streaming:
                session_id = arguments.pop(parameter_name(rpc, rpc.input_type.fields[0]))
                async with client.stream_messages() as stream:
                    await stream.send(session_id, **arguments)  # type: ignore[arg-type]
            else:
                result = getattr(client, method_name(rpc))(**arguments)
                if inspect.isasyncgen(result):
                    _ = [item async for item in result]
                else:
                    await result
            _check_received(rpc, recorder, expected)


def test_readme_lists_every_public_method() -> None:
    """client/python/README.md's API table has a row per public client method."""
    text = README.read_text()
    listed = set(re.findall(r"^\| `(\w+)\(", text, flags=re.M))
    public = {
        name
        for name, member in inspect.getmembers(cw.Client)
        if not name.startswith("_") and callable(member)
    }
    assert public - {"close"} <= listed, sorted(public - {"close"} - listed)
    assert listed <= public, sorted(listed - public)
