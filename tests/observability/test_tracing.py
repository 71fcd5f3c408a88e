"""OpenTelemetry: the server exports a span per RPC with child spans per SQL statement
to an OTLP collector (a fake one here, speaking the real OTLP/gRPC protocol)."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc
import pytest

from ctxwarden.v1 import context_service_pb2 as pb
from ctxwarden.v1 import context_service_pb2_grpc as pb_grpc
from tests.observability.conftest import SERVICE
from tests.support.server import ServerProcess

pytest.importorskip("opentelemetry.sdk")
pytest.importorskip("opentelemetry.exporter.otlp.proto.grpc")
from opentelemetry.proto.collector.trace.v1 import (
    trace_service_pb2,
    trace_service_pb2_grpc,
)
from opentelemetry.proto.trace.v1 import trace_pb2


class FakeCollector(trace_service_pb2_grpc.TraceServiceServicer):
    def __init__(self) -> None:
        self.spans: list[tuple[dict[str, Any], trace_pb2.Span]] = []
        self.lock = threading.Lock()

    def Export(
        self, request: trace_service_pb2.ExportTraceServiceRequest, context: Any
    ) -> trace_service_pb2.ExportTraceServiceResponse:
        with self.lock:
            for rs in request.resource_spans:
                resource = {a.key: a.value.string_value for a in rs.resource.attributes}
                for ss in rs.scope_spans:
                    for span in ss.spans:
                        self.spans.append((resource, span))
        return trace_service_pb2.ExportTraceServiceResponse()


@pytest.fixture
def collector() -> Iterator[tuple[FakeCollector, int]]:
    fake = FakeCollector()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    # opentelemetry-proto's generated grpc module has no annotations.
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(fake, server)  # type: ignore[no-untyped-call]
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield fake, port
    finally:
        server.stop(0)


def _attrs(span: trace_pb2.Span) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for a in span.attributes:
        kind = a.value.WhichOneof("value")
        out[a.key] = getattr(a.value, kind) if kind else None
    return out


def test_spans_per_rpc_and_statement(
    backend_url: str,
    tmp_path: Path,
    collector: tuple[FakeCollector, int],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake, port = collector
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "100")
    server = ServerProcess(
        backend_url, log_dir=tmp_path, extra_args=["--otel-endpoint", f"http://127.0.0.1:{port}"]
    )
    server.start()
    trace_id = uuid.uuid4().hex
    parent_id = uuid.uuid4().hex[:16]
    sid = f"tr-{uuid.uuid4().hex[:10]}"
    try:
        with grpc.insecure_channel(server.target) as ch:
            stub = pb_grpc.ContextServiceStub(ch)
            stub.CreateSession(
                pb.CreateSessionRequest(session_id=sid),
                metadata=(("traceparent", f"00-{trace_id}-{parent_id}-01"),),
                timeout=10,
            )
            with pytest.raises(grpc.RpcError):
                stub.GetSession(pb.GetSessionRequest(session_id=sid + "-nope"), timeout=10)
    finally:
        assert server.stop() == 0  # shutdown flushes the span processor
    spans = [s for _, s in fake.spans]
    resource = fake.spans[0][0]
    assert resource["service.name"] == "ctxwarden"
    by_name = {s.name: s for s in spans}
    create = by_name[f"{SERVICE}/CreateSession"]
    assert create.kind == trace_pb2.Span.SPAN_KIND_SERVER
    assert create.trace_id.hex() == trace_id  # continues the caller's trace
    assert create.parent_span_id.hex() == parent_id
    attrs = _attrs(create)
    assert attrs["rpc.system"] == "grpc"
    assert attrs["rpc.method"] == "CreateSession"
    assert attrs["rpc.grpc.status_code"] == 0
    assert attrs["ctxwarden.session_id"] == sid
    children = [s for s in spans if s.parent_span_id == create.span_id]
    assert children, "no SQL spans under the RPC span"
    for child in children:
        assert child.kind == trace_pb2.Span.SPAN_KIND_CLIENT
        assert child.trace_id == create.trace_id
        assert _attrs(child)["db.system.name"] in ("sqlite", "mysql")
    assert any(_attrs(c)["db.operation.name"] == "INSERT" for c in children)
    assert all(sid not in _attrs(c)["db.query.text"] for c in children)  # values are bound
    missing = by_name[f"{SERVICE}/GetSession"]
    assert _attrs(missing)["rpc.grpc.status_code"] == grpc.StatusCode.NOT_FOUND.value[0]
    assert missing.trace_id != create.trace_id  # a new trace without traceparent
