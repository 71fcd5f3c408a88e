"""Optional OpenTelemetry tracing: a span per RPC, child spans per SQL statement.

Nothing here imports OpenTelemetry until ``setup_tracing`` runs, and that only
when an endpoint is configured (``--otel-endpoint`` / ``OTEL_EXPORTER_OTLP_ENDPOINT``).
It needs ``opentelemetry-sdk`` and an OTLP exporter
(``opentelemetry-exporter-otlp-proto-grpc``, or ``-proto-http`` with
``OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf``); without them the server logs a
warning and runs untraced.

Incoming W3C ``traceparent`` metadata makes the RPC span a child of the caller's.
Spans carry method, status code and session id, never message content; a SQL
span carries the statement text (values are always bound parameters).
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Mapping
from typing import Any

from ctxwarden import __version__
from ctxwarden.observability import logging as obs_logging

log = logging.getLogger(__name__)

# gRPC codes a server span reports as an error (OpenTelemetry semantic conventions).
_SERVER_ERROR_CODES = frozenset({2, 4, 12, 13, 14, 15})
MAX_STATEMENT_CHARS = 2000


class Span:
    """A started span plus the context token that made it current (if any)."""

    __slots__ = ("_detach", "_span", "_token")

    def __init__(self, span: Any, token: Any, detach: Any) -> None:
        self._span = span
        self._token = token
        self._detach = detach

    def set_attribute(self, key: str, value: str | int | float | bool) -> None:
        self._span.set_attribute(key, value)

    def _close(self) -> None:
        if self._token is not None:
            with contextlib.suppress(Exception):  # detaching in another context
                self._detach(self._token)
            self._token = None
        self._span.end()

    def finish_ok(self) -> None:
        self._close()

    def finish_error(self, exc: BaseException) -> None:
        from opentelemetry.trace import Status, StatusCode

        self._span.record_exception(exc)
        self._span.set_status(Status(StatusCode.ERROR, type(exc).__name__))
        self._close()

    def finish_rpc(self, code_name: str, code_value: int) -> None:
        from opentelemetry.trace import Status, StatusCode

        self._span.set_attribute("rpc.grpc.status_code", code_value)
        if code_value in _SERVER_ERROR_CODES:
            self._span.set_status(Status(StatusCode.ERROR, code_name))
        self._close()


class Tracing:
    """A tracer over its own TracerProvider; ``shutdown`` flushes pending spans."""

    def __init__(self, provider: Any) -> None:
        from opentelemetry import context, propagate, trace

        self.provider = provider
        self.tracer = provider.get_tracer("ctxwarden", __version__)
        self._context = context
        self._propagate = propagate
        self._trace = trace
        obs_logging.set_trace_id_source(self.current_ids)

    def current_ids(self) -> tuple[str, str] | None:
        span_context = self._trace.get_current_span().get_span_context()
        if not span_context.is_valid:
            return None
        return f"{span_context.trace_id:032x}", f"{span_context.span_id:016x}"

    def _start(self, name: str, kind: Any, attributes: Mapping[str, Any], parent: Any) -> Span:
        span = self.tracer.start_span(name, context=parent, kind=kind, attributes=dict(attributes))
        token = self._context.attach(self._trace.set_span_in_context(span, parent))
        return Span(span, token, self._context.detach)

    def start_rpc(self, method: str, metadata: Mapping[str, str]) -> Span:
        """The server span of one RPC, made current; parented by incoming traceparent."""
        service, _, name = method.rpartition("/")
        parent = self._propagate.extract(dict(metadata))
        attributes = {"rpc.system": "grpc", "rpc.service": service, "rpc.method": name}
        return self._start(method, self._trace.SpanKind.SERVER, attributes, parent)

    def start_internal(self, name: str, attributes: Mapping[str, Any]) -> Span:
        return self._start(name, self._trace.SpanKind.INTERNAL, attributes, None)

    def start_db(self, operation: str, statement: str, system: str) -> Span | None:
        """A client span for one SQL statement inside the current span (an RPC's);
        None outside any span, so background probes do not start traces of their own."""
        if not self._trace.get_current_span().get_span_context().is_valid:
            return None
        span = self.tracer.start_span(
            f"{operation} {system}",
            kind=self._trace.SpanKind.CLIENT,
            attributes={
                "db.system": system,
                "db.system.name": system,
                "db.operation.name": operation,
                "db.query.text": statement[:MAX_STATEMENT_CHARS],
            },
        )
        return Span(span, None, None)

    def shutdown(self) -> None:
        obs_logging.set_trace_id_source(None)
        try:
            self.provider.shutdown()
        except Exception:
            log.warning("flushing traces failed", exc_info=True)


def _exporter(endpoint: str) -> Any:
    protocol = os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc").strip().lower()
    if protocol.startswith("http"):
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import (  # type: ignore[import-not-found,unused-ignore]
            OTLPSpanExporter,
        )

        url = endpoint.rstrip("/")
        if not url.endswith("/v1/traces"):
            url += "/v1/traces"
        return OTLPSpanExporter(endpoint=url)
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
        OTLPSpanExporter as GrpcSpanExporter,
    )

    if "://" not in endpoint:
        endpoint = "http://" + endpoint
    return GrpcSpanExporter(endpoint=endpoint, insecure=endpoint.startswith("http://"))


def setup_tracing(endpoint: str, *, exporter: Any = None, batch: bool = True) -> Tracing | None:
    """Tracing to an OTLP ``endpoint`` (or to ``exporter``, for tests), or None when
    the OpenTelemetry SDK or exporter is not installed."""
    try:
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
    except ImportError:
        log.warning(
            "tracing is configured (%s) but opentelemetry-sdk is not installed; "
            "running without tracing (pip install 'ctxwarden[otel]')",
            endpoint,
        )
        return None
    if exporter is None:
        try:
            exporter = _exporter(endpoint)
        except ImportError:
            log.warning(
                "tracing is configured (%s) but no OTLP exporter is installed; running "
                "without tracing (pip install opentelemetry-exporter-otlp-proto-grpc)",
                endpoint,
            )
            return None
    attributes: dict[str, Any] = {"service.version": __version__}
    if not os.environ.get("OTEL_SERVICE_NAME"):
        attributes["service.name"] = "ctxwarden"
    provider = TracerProvider(resource=Resource.create(attributes))
    processor = BatchSpanProcessor(exporter) if batch else SimpleSpanProcessor(exporter)
    provider.add_span_processor(processor)
    log.info("tracing to %s", endpoint or type(exporter).__name__)
    return Tracing(provider)
