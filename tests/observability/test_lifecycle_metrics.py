"""A real server with the lifecycle options exports evictions by cause and the
retention schedule's metrics (the schedule itself runs by an injected clock in
tests/hardening/test_lifecycle.py)."""

from __future__ import annotations

import uuid
from pathlib import Path

import grpc

from ctxwarden.v1 import context_service_pb2 as pb
from ctxwarden.v1 import context_service_pb2_grpc as pb_grpc
from tests.observability.conftest import family_names, observed_server, sample, scrape

ARGS = ("--max-hot-sessions", "1", "--purge-interval", "3600", "--idle-evict-seconds", "3600")


def test_evictions_by_cause_and_retention_metrics(backend_url: str, tmp_path: Path) -> None:
    with observed_server(backend_url, tmp_path, *ARGS) as server:
        names = family_names(server.metrics)
        assert {
            "ctxwarden_hot_session_evictions",
            "ctxwarden_retention_purged",
            "ctxwarden_retention_runs",
            "ctxwarden_retention_failures",
            "ctxwarden_retention_last_run_timestamp_seconds",
        } <= names
        before = scrape(server.metrics)
        with grpc.insecure_channel(server.target) as ch:
            stub = pb_grpc.ContextServiceStub(ch)
            a, b = (f"e-{uuid.uuid4().hex[:10]}" for _ in range(2))
            stub.CreateSession(pb.CreateSessionRequest(session_id=a), timeout=10)
            stub.CreateSession(pb.CreateSessionRequest(session_id=b), timeout=10)  # evicts a
            stub.ArchiveSession(pb.ArchiveSessionRequest(session_id=b), timeout=10)
        after = scrape(server.metrics)
        evictions = "ctxwarden_hot_session_evictions_total"
        for cause, n in (("lru", 1), ("archived", 1), ("idle", 0)):
            delta = sample(after, evictions, cause=cause) - sample(before, evictions, cause=cause)
            assert delta == n, cause
        assert sample(after, "ctxwarden_retention_last_run_timestamp_seconds") == 0
