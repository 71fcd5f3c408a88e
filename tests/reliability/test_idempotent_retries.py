"""A retry after a lost answer is the same request sent again: with a request_id it
must return the first result, whatever the first attempt changed in the session.

The server kill and database outage tests produce exactly this (an append
committed, its answer lost with the connection, the agent retries); here the
resend is made deterministic by simply sending the request twice.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import grpc
import pytest

from ctxwarden.v1 import context_service_pb2 as pb
from ctxwarden.v1 import context_service_pb2_grpc as pb_grpc
from tests.support.builders import assistant, result, user


@pytest.fixture
def stub(server_target: str) -> Iterator[pb_grpc.ContextServiceStub]:
    with grpc.insecure_channel(server_target) as channel:
        yield pb_grpc.ContextServiceStub(channel)


def _session(stub: pb_grpc.ContextServiceStub) -> str:
    sid = f"idem-{uuid.uuid4().hex[:10]}"
    stub.CreateSession(pb.CreateSessionRequest(session_id=sid), timeout=30)
    return sid


def _history(stub: pb_grpc.ContextServiceStub, sid: str) -> list[tuple[int, int]]:
    listed = stub.ListMessages(pb.ListMessagesRequest(session_id=sid), timeout=30).messages
    return [(x.seq, x.role) for x in listed]


def _resend(stub: pb_grpc.ContextServiceStub, req: pb.AppendMessagesRequest) -> None:
    first = stub.AppendMessages(req, timeout=30)
    history = _history(stub, req.session_id)
    again = stub.AppendMessages(req, timeout=30)
    assert again == first
    assert _history(stub, req.session_id) == history


def test_resent_user_message_with_request_id_is_replayed(stub: pb_grpc.ContextServiceStub) -> None:
    """The control: nothing in the resend conflicts with the first attempt's effect."""
    sid = _session(stub)
    _resend(stub, pb.AppendMessagesRequest(session_id=sid, messages=[user("hi")], request_id="r1"))


def test_resent_tool_result_with_request_id_is_replayed(stub: pb_grpc.ContextServiceStub) -> None:
    sid = _session(stub)
    stub.AppendMessages(
        pb.AppendMessagesRequest(
            session_id=sid,
            messages=[user("read a"), assistant("ok", [("c1", "read", {"path": "a"})])],
        ),
        timeout=30,
    )
    _resend(
        stub,
        pb.AppendMessagesRequest(
            session_id=sid, messages=[result("c1", "contents of a")], request_id="r-tool"
        ),
    )


def test_resent_append_with_expected_last_seq_is_replayed(
    stub: pb_grpc.ContextServiceStub,
) -> None:
    sid = _session(stub)
    _resend(
        stub,
        pb.AppendMessagesRequest(
            session_id=sid, messages=[user("hi")], request_id="r-cas", expected_last_seq=0
        ),
    )
