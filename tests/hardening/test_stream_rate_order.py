"""A stream over the tenant's rate: the server reads requests ahead of its answers
(to write those waiting together), yet a refused request ends the stream only
after every earlier request was answered; none is applied unanswered."""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest
from google.rpc import error_details_pb2, status_pb2

from ctxwarden.v1 import context_service_pb2 as pb
from ctxwarden.v1 import context_service_pb2_grpc as pb_grpc
from tests.support.builders import user
from tests.support.errors import call_error, error_info
from tests.support.server import ServerProcess


def _retry_seconds(err: grpc.RpcError) -> float:
    for key, value in call_error(err).trailing_metadata():
        if key == "grpc-status-details-bin":
            for detail in status_pb2.Status.FromString(value).details:
                delay = error_details_pb2.RetryInfo()
                if detail.Unpack(delay):
                    return float(delay.retry_delay.ToNanoseconds()) / 1e9
    return 0.0


def test_a_refused_request_ends_the_stream_after_every_earlier_answer(
    backend_url: str, tmp_path: Path
) -> None:
    server = ServerProcess(backend_url, log_dir=tmp_path, extra_args=["--rate-limit-rps", "5"])
    server.start()
    try:
        with grpc.insecure_channel(server.target) as ch:
            stub = pb_grpc.ContextServiceStub(ch)
            sid = stub.CreateSession(pb.CreateSessionRequest()).session_id
            requests = [
                pb.AppendMessagesRequest(session_id=sid, messages=[user(f"m{i}")])
                for i in range(40)
            ]
            answers = []
            with pytest.raises(grpc.RpcError) as info:
                for answer in stub.StreamMessages(iter(requests), timeout=30):
                    answers.append(answer)
            err = info.value
            assert err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            assert error_info(err).reason == "RATE_LIMITED"
            assert _retry_seconds(err) > 0
            # The burst (10, less CreateSession) was admitted and answered, in order.
            assert 2 <= len(answers) < 40
            assert [a.last_seq for a in answers] == list(range(1, len(answers) + 1))
            assert [a.messages[0].content[0].text.text for a in answers] == [
                f"m{i}" for i in range(len(answers))
            ]
        # Read later, from a fresh bucket: exactly the answered requests are stored.
        server.stop()
        server.start()
        with grpc.insecure_channel(server.target) as ch:
            stub = pb_grpc.ContextServiceStub(ch)
            page = stub.ListMessages(pb.ListMessagesRequest(session_id=sid, page_size=100))
            assert [m.seq for m in page.messages] == list(range(1, len(answers) + 1))
    finally:
        server.stop()
