"""Memory exhaustion before authentication: raw HTTP/2 streams that announce a
60 MB message, send part of it and stall (see h2flood.py)."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from ctxwarden.v1 import context_service_pb2 as pb
from ctxwarden.v1 import context_service_pb2_grpc as pb_grpc
from tests.hardening.h2flood import Flood, rss_kib
from tests.support.errors import expect_error
from tests.support.server import ServerProcess

KEY = "transport-key-" + "z" * 24
AUTH = (("authorization", f"Bearer {KEY}"),)
MIB = 1024


@pytest.fixture
def guarded(backend_url: str, tmp_path: Path) -> Iterator[ServerProcess]:
    (tmp_path / "keys").write_text(f"tenant-t:{hashlib.sha256(KEY.encode()).hexdigest()}\n")
    server = ServerProcess(
        backend_url,
        log_dir=tmp_path,
        extra_args=["--api-keys-file", str(tmp_path / "keys"), "--request-read-timeout", "1"],
    )
    server.start()
    try:
        yield server
    finally:
        server.stop()


def _pid(server: ServerProcess) -> int:
    assert server.proc is not None
    return server.proc.pid


def _drive(server: ServerProcess, flood: Flood, deadline_s: float) -> tuple[int, int]:
    """Run the flood until the server has ended every stream (or the deadline);
    returns (baseline RSS, peak RSS) in KiB."""
    pid = _pid(server)
    base = peak = rss_kib(pid)
    flood.start()
    deadline = time.monotonic() + deadline_s
    try:
        while time.monotonic() < deadline:
            peak = max(peak, rss_kib(pid))
            if flood.opened == flood.connections * flood.streams and flood.reset == flood.opened:
                break
            time.sleep(0.1)  # sampling interval, not synchronisation
        peak = max(peak, rss_kib(pid))
    finally:
        flood.stop()
    print(
        f"{flood.path}: RSS {base // MIB} -> peak {peak // MIB} MiB, sent "
        f"{flood.sent // 2**20} MiB, {flood.reset}/{flood.opened} streams ended by the server"
    )
    return base, peak


def _still_serves(server: ServerProcess) -> None:
    with grpc.insecure_channel(server.target) as ch:
        health = health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=10)
        assert health.status == health_pb2.HealthCheckResponse.SERVING
        stub = pb_grpc.ContextServiceStub(ch)
        assert stub.CreateSession(pb.CreateSessionRequest(), metadata=AUTH, timeout=10).session_id


def test_unauthenticated_streams_are_refused_unread(guarded: ServerProcess) -> None:
    flood = Flood("127.0.0.1", guarded.port, connections=10, streams=100)
    base, peak = _drive(guarded, flood, 30)
    # Nothing is read before authentication: each stream holds at most its 16 KiB
    # window (1,000 streams: 16 MiB), and every one is answered at once.
    assert flood.reset == flood.opened == 1000
    assert peak - base < 64 * MIB, (base, peak)
    # 1,000 failed authentications from one peer: it is cooling down now.
    with grpc.insecure_channel(guarded.target) as ch:
        err = expect_error(
            grpc.StatusCode.RESOURCE_EXHAUSTED,
            "AUTH_RATE_LIMITED",
            pb_grpc.ContextServiceStub(ch).CreateSession,
            pb.CreateSessionRequest(),
            metadata=AUTH,
        )
        assert "failed authentication" in (err.details() or "")


def test_health_cannot_buffer_large_partial_messages(guarded: ServerProcess) -> None:
    flood = Flood(
        "127.0.0.1", guarded.port, path="/grpc.health.v1.Health/Check", connections=10, streams=100
    )
    base, peak = _drive(guarded, flood, 40)
    # 4 health reads at once, each dropped after 1 s; the others wait and are refused.
    assert flood.reset == flood.opened == 1000
    assert peak - base < 96 * MIB, (base, peak)
    _still_serves(guarded)


def test_stalled_authenticated_requests_are_dropped_after_the_timeout(
    guarded: ServerProcess,
) -> None:
    flood = Flood("127.0.0.1", guarded.port, connections=2, streams=50, metadata=AUTH)
    started = time.monotonic()
    base, peak = _drive(guarded, flood, 30)
    elapsed = time.monotonic() - started
    # 32 reads in progress (--max-concurrent-reads) of ~900 KiB each; every stalled
    # request is dropped after --request-read-timeout 1 (waiting ones too).
    assert flood.reset == flood.opened == 100
    assert elapsed < 15, elapsed
    assert peak - base < 128 * MIB, (base, peak)
    _still_serves(guarded)
