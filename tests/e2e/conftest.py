from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator

import grpc
import pytest

from ctxwarden.v1 import context_service_pb2 as pb
from ctxwarden.v1 import context_service_pb2_grpc as pb_grpc
from ctxwarden.v1 import session_pb2 as ses
from tests.support.server import ServerProcess


@pytest.fixture(scope="session")
def channel(server: ServerProcess) -> Iterator[grpc.Channel]:
    with grpc.insecure_channel(server.target) as ch:
        yield ch


@pytest.fixture(scope="session")
def stub(channel: grpc.Channel) -> pb_grpc.ContextServiceStub:
    return pb_grpc.ContextServiceStub(channel)


NewSession = Callable[..., ses.Session]


@pytest.fixture
def new_session(stub: pb_grpc.ContextServiceStub) -> NewSession:
    def make(**fields: object) -> ses.Session:
        session_id = f"t-{uuid.uuid4().hex[:12]}"
        return stub.CreateSession(
            pb.CreateSessionRequest(session=ses.Session(**fields), session_id=session_id),  # type: ignore[arg-type]
            timeout=10,
        )

    return make
