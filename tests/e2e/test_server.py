"""The server process: health, reflection, environment config, graceful stop."""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from ctxwarden.v1 import context_service_pb2 as pb
from ctxwarden.v1 import context_service_pb2_grpc as pb_grpc
from tests.support.builders import user
from tests.support.server import ServerProcess


def test_health_serving(channel: grpc.Channel) -> None:
    stub = health_pb2_grpc.HealthStub(channel)
    for service in ("", "ctxwarden.v1.ContextService"):
        resp = stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=5)
        assert resp.status == health_pb2.HealthCheckResponse.SERVING


def test_reflection_lists_the_service(channel: grpc.Channel) -> None:
    stub = reflection_pb2_grpc.ServerReflectionStub(channel)
    responses = stub.ServerReflectionInfo(
        iter([reflection_pb2.ServerReflectionRequest(list_services="")]), timeout=5
    )
    names = {s.name for r in responses for s in r.list_services_response.service}
    assert "ctxwarden.v1.ContextService" in names and "grpc.health.v1.Health" in names


def test_env_vars_configure_serve(backend_url: str, tmp_path: Path) -> None:
    env = {**os.environ, "CTXWARDEN_LISTEN": "127.0.0.1:0", "CTXWARDEN_DATABASE_URL": backend_url}
    proc = subprocess.Popen(
        [sys.executable, "-m", "ctxwarden", "serve"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("ctxwarden listening on 127.0.0.1:")
        target = line.split()[-1]
        with grpc.insecure_channel(target) as ch:
            stub = pb_grpc.ContextServiceStub(ch)
            assert stub.CreateSession(pb.CreateSessionRequest(), timeout=10).session_id
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0


def _wait_shutdown_began(channel: grpc.Channel) -> None:
    """Until the server says NOT_SERVING (its first step on SIGTERM) or refuses a new
    call (UNAVAILABLE, or CANCELLED when it arrived as the server stopped taking calls)."""
    check = health_pb2_grpc.HealthStub(channel).Check
    deadline = time.monotonic() + 30
    while True:
        try:
            status = check(health_pb2.HealthCheckRequest(), timeout=5).status
        except grpc.RpcError as err:
            if err.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED):
                return
            raise
        if status == health_pb2.HealthCheckResponse.NOT_SERVING:
            return
        assert time.monotonic() < deadline, "the server did not begin to shut down"
        time.sleep(0.01)


def test_sigterm_finishes_in_flight_calls(backend_url: str, tmp_path: Path) -> None:
    """After SIGTERM an open stream keeps being served until the client ends it."""
    server = ServerProcess(backend_url, log_dir=tmp_path)
    server.start()
    ch = grpc.insecure_channel(server.target)
    stub = pb_grpc.ContextServiceStub(ch)
    sid = f"g-{uuid.uuid4().hex[:10]}"
    stub.CreateSession(pb.CreateSessionRequest(session_id=sid))
    outbox: queue.Queue[pb.AppendMessagesRequest | None] = queue.Queue()

    def requests() -> Iterator[pb.AppendMessagesRequest]:
        while (item := outbox.get()) is not None:
            yield item

    call = stub.StreamMessages(requests(), timeout=60)
    seqs = []
    for i in range(20):
        if i == 10:
            assert server.proc is not None
            server.proc.send_signal(signal.SIGTERM)
            _wait_shutdown_began(ch)
        outbox.put(pb.AppendMessagesRequest(session_id=sid, messages=[user(f"m{i}")]))
        seqs.append(next(call).last_seq)
    outbox.put(None)
    assert list(call) == []
    assert seqs == list(range(1, 21))
    # New calls are refused while draining or after the stop.
    assert server.proc is not None
    assert server.proc.wait(timeout=30) == 0
    ch.close()
    server.proc = None
    server.start()
    with grpc.insecure_channel(server.target) as ch2:
        stub2 = pb_grpc.ContextServiceStub(ch2)
        assert stub2.GetSession(pb.GetSessionRequest(session_id=sid)).last_seq == 20
    server.stop()
