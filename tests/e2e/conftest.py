from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import Any

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


Stub = pb_grpc.ContextServiceStub
"""The type of the ``stub`` fixture."""


@pytest.fixture(scope="session")
def stub(channel: grpc.Channel) -> Stub:
    return pb_grpc.ContextServiceStub(channel)


NewSession = Callable[..., ses.Session]


@pytest.fixture
def new_session(stub: pb_grpc.ContextServiceStub) -> NewSession:
    def make(**fields: Any) -> ses.Session:
        session_id = f"t-{uuid.uuid4().hex[:12]}"
        return stub.CreateSession(
            pb.CreateSessionRequest(session=ses.Session(**fields), session_id=session_id),
            timeout=10,
        )

    return make
