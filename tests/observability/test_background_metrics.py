"""A real ``ctxwarden serve``: background compactions run, and show in /metrics."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import grpc

from ctxwarden.v1 import context_service_pb2 as pb
from ctxwarden.v1 import context_service_pb2_grpc as pb_grpc
from ctxwarden.v1 import session_pb2 as ses_pb
from tests.observability.conftest import Samples, family_names, observed_server, sample, scrape
from tests.support.builders import assistant, user

POLICY = ses_pb.ContextPolicy(
    context_window=8000,
    reserve_tokens=2000,
    keep_recent_tokens=500,
    tokenizer="heuristic",
    background_compaction_percent=60,
)


def wait_for_metric(address: str, name: str, want: float, timeout: float = 30.0) -> Samples:
    """Scrape until ``name`` reaches ``want`` (the server works on its own schedule)."""
    deadline = time.monotonic() + timeout
    samples = scrape(address)
    while sample(samples, name) < want:
        if time.monotonic() > deadline:
            raise AssertionError(f"{name} stayed {sample(samples, name)}, wanted {want}")
        time.sleep(0.05)
        samples = scrape(address)
    return samples


def test_background_compaction_runs_in_the_server_and_is_counted(
    backend_url: str, tmp_path: Path
) -> None:
    args = ("--summarizer", "extractive", "--background-compactions", "1")
    with observed_server(backend_url, tmp_path, *args) as server:
        names = family_names(server.metrics)
        for family in (
            "ctxwarden_background_compactions_started",
            "ctxwarden_background_compactions_succeeded",
            "ctxwarden_background_compactions_failed",
            "ctxwarden_background_compactions_retried",
            "ctxwarden_background_compactions_in_flight",
            "ctxwarden_background_compactions_queued",
            "ctxwarden_background_compactions_pending",
            "ctxwarden_background_compactions_waiting_for_idle",
            "ctxwarden_background_compactions_after_idle",
            "ctxwarden_background_compaction_duration_seconds",
        ):
            assert family in names
        with grpc.insecure_channel(server.target) as ch:
            stub = pb_grpc.ContextServiceStub(ch)
            sid = f"bg-{uuid.uuid4().hex[:10]}"
            stub.CreateSession(
                pb.CreateSessionRequest(session_id=sid, session=ses_pb.Session(policy=POLICY)),
                timeout=10,
            )
            # Up to the soft threshold (60% of 6,000 tokens), not the hard one; the
            # compaction may commit before this loop sees the crossing.
            for i in range(200):
                view = stub.BuildModelInput(pb.BuildModelInputRequest(session_id=sid), timeout=10)
                if view.compaction_id or view.tokens.total_tokens > 3600:
                    break
                stub.AppendMessages(
                    pb.AppendMessagesRequest(
                        session_id=sid,
                        messages=[user(f"Step {i}: what next? " * 8), assistant("Done. " * 30)],
                    ),
                    timeout=10,
                )
            assert not view.compaction_recommended
            samples = wait_for_metric(
                server.metrics, "ctxwarden_background_compactions_succeeded_total", 1
            )
            page = stub.ListCompactions(pb.ListCompactionsRequest(session_id=sid), timeout=10)
        assert [c.trigger for c in page.compactions] == [pb.COMPACTION_TRIGGER_BACKGROUND]
        assert sample(samples, "ctxwarden_background_compactions_started_total") == 1
        assert sample(samples, "ctxwarden_background_compactions_failed_total") == 0
        assert (
            sample(
                samples,
                "ctxwarden_compactions_total",
                trigger="background",
                summarizer="extractive",
            )
            == 1
        )
        assert (
            sample(
                samples,
                "ctxwarden_background_compaction_duration_seconds_count",
                result="succeeded",
            )
            == 1
        )
