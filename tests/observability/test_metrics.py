"""Prometheus metrics scraped over HTTP from a real server process."""

from __future__ import annotations

import signal
import uuid
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from ctxwarden.v1 import context_service_pb2 as pb
from ctxwarden.v1 import context_service_pb2_grpc as pb_grpc
from ctxwarden.v1 import session_pb2 as ses_pb
from tests.observability.conftest import (
    SERVICE,
    family_names,
    observed_server,
    sample,
    scrape,
    scrape_text,
)
from tests.support.builders import assistant, user
from tests.support.server import ServerProcess

SERVICE_HOOKS_WIRED = True
"""Flip to True once the service use cases call their runtime's
``ServiceMetrics`` hooks (appends, built inputs)."""

EXPECTED_FAMILIES = {
    "ctxwarden_build_info",
    "ctxwarden_rpc_duration_seconds",
    "ctxwarden_rpcs",
    "ctxwarden_rpcs_in_flight",
    "ctxwarden_rpc_stream_messages",
    "ctxwarden_hot_sessions",
    "ctxwarden_hot_sessions_capacity",
    "ctxwarden_session_restores",
    "ctxwarden_session_catch_ups",
    "ctxwarden_messages_appended",
    "ctxwarden_model_input_tokens",
    "ctxwarden_token_estimate_error_ratio",
    "ctxwarden_compactions",
    "ctxwarden_compaction_tokens_removed",
    "ctxwarden_summarizer_duration_seconds",
    "ctxwarden_summarizer_failures",
    "ctxwarden_db_query_duration_seconds",
    "ctxwarden_db_errors",
    "ctxwarden_db_pool_connections_in_use",
    "ctxwarden_db_pool_checkouts",
    "ctxwarden_db_pool_size",
    "ctxwarden_database_up",
    "process_resident_memory_bytes",
}


def m(name: str) -> str:
    return f"{SERVICE}/{name}"


def test_metrics_count_rpcs_sessions_and_queries(backend_url: str, tmp_path: Path) -> None:
    with observed_server(backend_url, tmp_path, "--max-hot-sessions", "1") as server:
        before = scrape(server.metrics)
        assert family_names(server.metrics) >= EXPECTED_FAMILIES
        with grpc.insecure_channel(server.target) as ch:
            stub = pb_grpc.ContextServiceStub(ch)
            a = f"m-{uuid.uuid4().hex[:10]}"
            b = f"m-{uuid.uuid4().hex[:10]}"
            stub.CreateSession(pb.CreateSessionRequest(session_id=a), timeout=10)
            stub.CreateSession(pb.CreateSessionRequest(session_id=b), timeout=10)  # evicts a
            stub.AppendMessages(  # restores a
                pb.AppendMessagesRequest(session_id=a, messages=[user("hi"), assistant("yo")]),
                timeout=10,
            )
            replies = list(
                stub.StreamMessages(
                    iter(
                        pb.AppendMessagesRequest(session_id=b, messages=[user(f"m{i}")])
                        for i in range(3)
                    ),
                    timeout=10,
                )
            )
            assert [r.last_seq for r in replies] == [1, 2, 3]
            stub.BuildModelInput(pb.BuildModelInputRequest(session_id=a), timeout=10)
            with pytest.raises(grpc.RpcError) as err:
                stub.GetSession(pb.GetSessionRequest(session_id="m-missing"), timeout=10)
            assert err.value.code() is grpc.StatusCode.NOT_FOUND
            health = health_pb2_grpc.HealthStub(ch)
            health.Check(health_pb2.HealthCheckRequest(service=SERVICE), timeout=5)
        after = scrape(server.metrics)

    def grew(name: str, **labels: str) -> float:
        return sample(after, name, **labels) - sample(before, name, **labels)

    ok = {"code": "OK"}
    assert grew("ctxwarden_rpcs_total", method=m("CreateSession"), **ok) == 2
    assert grew("ctxwarden_rpcs_total", method=m("AppendMessages"), **ok) == 1
    assert grew("ctxwarden_rpcs_total", method=m("StreamMessages"), **ok) == 1
    assert grew("ctxwarden_rpcs_total", method=m("BuildModelInput"), **ok) == 1
    assert grew("ctxwarden_rpcs_total", method=m("GetSession"), code="NOT_FOUND") == 1
    assert grew("ctxwarden_rpcs_total", method="grpc.health.v1.Health/Check", **ok) == 1
    # The histogram agrees with the counter and has cumulative buckets.
    create = {"method": m("CreateSession"), **ok}
    assert grew("ctxwarden_rpc_duration_seconds_count", **create) == 2
    assert grew("ctxwarden_rpc_duration_seconds_bucket", le="+Inf", **create) == 2
    assert sample(after, "ctxwarden_rpc_duration_seconds_sum", **create) > 0
    assert sample(after, "ctxwarden_rpcs_in_flight", method=m("CreateSession")) == 0
    stream = {"method": m("StreamMessages")}
    assert grew("ctxwarden_rpc_stream_messages_total", direction="received", **stream) == 3
    assert grew("ctxwarden_rpc_stream_messages_total", direction="sent", **stream) == 3
    # Hot sessions and restores come from the SessionManager.
    assert sample(after, "ctxwarden_hot_sessions_capacity") == 1
    assert sample(after, "ctxwarden_hot_sessions") == 1
    assert grew("ctxwarden_session_restores_total") >= 1
    # Every statement is timed; the pool is watched.
    assert grew("ctxwarden_db_query_duration_seconds_count", operation="INSERT") >= 3
    assert grew("ctxwarden_db_query_duration_seconds_count", operation="SELECT") >= 1
    assert grew("ctxwarden_db_pool_checkouts_total") >= 4
    assert sample(after, "ctxwarden_db_pool_size") > 0
    assert sample(after, "ctxwarden_db_pool_connections_in_use") >= 0
    assert sample(after, "ctxwarden_database_up") == 1
    if SERVICE_HOOKS_WIRED:
        assert grew("ctxwarden_messages_appended_total") == 5
        assert grew("ctxwarden_model_input_tokens_count") == 1
        assert grew("ctxwarden_token_estimate_error_ratio_count") == 1


def test_a_stale_copy_caught_up_counts_as_a_catch_up_not_a_restore(
    backend_url: str, tmp_path: Path
) -> None:
    """Two replicas over one database: what one appends, the other's copy catches up."""
    other = ServerProcess(backend_url, log_dir=tmp_path / "other")
    (tmp_path / "other").mkdir()
    other.start()
    try:
        with observed_server(backend_url, tmp_path) as server:
            sid = f"m-{uuid.uuid4().hex[:10]}"
            with (
                grpc.insecure_channel(server.target) as ch,
                grpc.insecure_channel(other.target) as och,
            ):
                stub, ostub = pb_grpc.ContextServiceStub(ch), pb_grpc.ContextServiceStub(och)
                stub.CreateSession(pb.CreateSessionRequest(session_id=sid), timeout=10)
                stub.BuildModelInput(pb.BuildModelInputRequest(session_id=sid), timeout=10)
                before = scrape(server.metrics)
                ostub.AppendMessages(
                    pb.AppendMessagesRequest(session_id=sid, messages=[user("hi")]), timeout=10
                )
                built = stub.BuildModelInput(pb.BuildModelInputRequest(session_id=sid), timeout=10)
                after = scrape(server.metrics)
    finally:
        other.stop()
    assert [m.seq for m in built.messages] == [1]  # the other replica's append
    caught = sample(after, "ctxwarden_session_catch_ups_total")
    assert caught - sample(before, "ctxwarden_session_catch_ups_total") == 1
    restored = sample(after, "ctxwarden_session_restores_total")
    assert restored == sample(before, "ctxwarden_session_restores_total")


def test_metrics_are_off_by_default(backend_url: str, tmp_path: Path) -> None:
    """Without --metrics-listen the server prints no metrics address."""
    server = ServerProcess(backend_url, log_dir=tmp_path)
    server.start()
    proc = server.proc
    assert proc is not None and proc.stdout is not None
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 0
    assert "metrics" not in proc.stdout.read()
    server.proc = None


def test_metrics_text_format(backend_url: str, tmp_path: Path) -> None:
    with observed_server(backend_url, tmp_path) as server:
        text = scrape_text(server.metrics)
    assert "# TYPE ctxwarden_rpc_duration_seconds histogram" in text
    assert "# TYPE ctxwarden_rpcs_total counter" in text
    assert "# TYPE ctxwarden_db_query_duration_seconds histogram" in text
    assert 'ctxwarden_build_info{version="' in text


def test_compaction_metrics(backend_url: str, tmp_path: Path) -> None:
    """Server-side (extractive) and agent-side compactions."""
    with observed_server(backend_url, tmp_path, "--summarizer", "extractive") as server:
        before = scrape(server.metrics)
        with grpc.insecure_channel(server.target) as ch:
            stub = pb_grpc.ContextServiceStub(ch)
            sids = []
            for _ in range(2):
                sid = f"c-{uuid.uuid4().hex[:10]}"
                stub.CreateSession(
                    pb.CreateSessionRequest(
                        session_id=sid,
                        session=ses_pb.Session(policy=ses_pb.ContextPolicy(keep_recent_tokens=200)),
                    ),
                    timeout=10,
                )
                for i in range(12):
                    stub.AppendMessages(
                        pb.AppendMessagesRequest(
                            session_id=sid,
                            messages=[
                                user(f"What is {i} squared? " * 5),
                                assistant(f"{i * i}. " * 20),
                            ],
                        ),
                        timeout=10,
                    )
                sids.append(sid)
            stub.Compact(pb.CompactRequest(session_id=sids[0]), timeout=30)
            plan = stub.PrepareCompaction(
                pb.PrepareCompactionRequest(session_id=sids[1]), timeout=10
            )
            stub.CommitCompaction(
                pb.CommitCompactionRequest(
                    session_id=sids[1],
                    plan_id=plan.plan_id,
                    summary="## Goal\nNumbers.",
                    turn_prefix_summary="prefix" if plan.split_turn else "",
                ),
                timeout=10,
            )
        after = scrape(server.metrics)

    def grew(name: str, **labels: str) -> float:
        return sample(after, name, **labels) - sample(before, name, **labels)

    assert grew("ctxwarden_rpcs_total", method=m("Compact"), code="OK") == 1
    assert grew("ctxwarden_rpcs_total", method=m("CommitCompaction"), code="OK") == 1
    if SERVICE_HOOKS_WIRED:
        compactions = "ctxwarden_compactions_total"
        assert grew(compactions, trigger="manual", summarizer="extractive") == 1
        assert grew(compactions, trigger="manual", summarizer="agent") == 1
        duration = "ctxwarden_summarizer_duration_seconds_count"
        assert grew(duration, summarizer="extractive", result="ok") == 1
        assert grew("ctxwarden_messages_appended_total") == 48
