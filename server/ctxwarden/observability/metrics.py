"""Prometheus metrics on a dedicated registry, and the hooks the service layer calls.

``Metrics`` owns one ``CollectorRegistry`` (never the global one), so several
servers, or tests, can live in one process. ``app.serve`` creates one per
server and serves it over HTTP with ``start_metrics_server``.

The service layer records domain events through the ``ServiceMetrics`` it is
given (``SessionRuntime.metrics``; the default records nothing)::

    rt.metrics.observe_append(len(plan.new))
    rt.metrics.observe_model_input(view.tokens)
    rt.metrics.observe_compaction(checkpoint)
    summary, prefix = await rt.metrics.timed_summarize(summarizer.name, self._summarize(...))
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
    start_http_server,
)
from prometheus_client.gc_collector import GCCollector
from prometheus_client.process_collector import ProcessCollector

from ctxwarden import __version__
from ctxwarden.observability.anchor_metrics import AnchorMetrics
from ctxwarden.observability.background_metrics import BackgroundCompactionMetrics
from ctxwarden.observability.label_cache import LabelCache
from ctxwarden.observability.session_metrics import SessionCollector
from ctxwarden.observability.usage_metrics import UsageMetrics

if TYPE_CHECKING:
    from ctxwarden.core.cache_prefix import CachePrefix
    from ctxwarden.core.model_input import TokenBreakdown
    from ctxwarden.core.session import Checkpoint
    from ctxwarden.core.usage_ledger import TokenTotals
    from ctxwarden.observability.tracing import Tracing

log = logging.getLogger(__name__)
T = TypeVar("T")

RPC_BUCKETS = (
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
    60.0,
)  # fmt: skip
DB_BUCKETS = (
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
)  # fmt: skip
TOKEN_BUCKETS = tuple(float(2**i) for i in range(8, 22))  # 256 .. 2,097,152 tokens
RATIO_BUCKETS = (0.5, 0.75, 0.9, 0.95, 0.99, 1.0, 1.01, 1.05, 1.1, 1.25, 1.5, 2.0, 3.0)
SUMMARIZER_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0)


def disable_created_series() -> None:
    """Process-wide: no ``*_created`` samples (timestamps nobody graphs). Call before
    creating ``Metrics``; the server does, tests need not."""
    disable_created_metrics()  # type: ignore[no-untyped-call]


class Metrics:
    """Every ctxwarden metric, registered on one dedicated registry."""

    def __init__(self, registry: CollectorRegistry | None = None, *, process: bool = True) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry
        if process:
            ProcessCollector(registry=r)
            GCCollector(registry=r)
        Gauge("ctxwarden_build_info", "ctxwarden version", ["version"], registry=r).labels(
            __version__
        ).set(1)
        self._declare_rpc_metrics(r)
        self._declare_service_metrics(r)
        self._declare_db_metrics(r)
        self.background = BackgroundCompactionMetrics(r)
        self.anchors = AnchorMetrics(r)
        self.usage = UsageMetrics(r)

    def _declare_rpc_metrics(self, r: CollectorRegistry) -> None:
        """Recorded by the interceptor."""
        self.rpc_duration = Histogram(
            "ctxwarden_rpc_duration_seconds",
            "Time to handle an RPC, by full method name and gRPC status code",
            ["method", "code"],
            buckets=RPC_BUCKETS,
            registry=r,
        )
        self.rpcs = Counter(
            "ctxwarden_rpcs",
            "RPCs handled, by full method name and gRPC status code",
            ["method", "code"],
            registry=r,
        )
        self.rpcs_in_flight = Gauge(
            "ctxwarden_rpcs_in_flight", "RPCs being handled now", ["method"], registry=r
        )
        self.stream_messages = Counter(
            "ctxwarden_rpc_stream_messages",
            "Messages received and sent on streaming RPCs",
            ["method", "direction"],
            registry=r,
        )
        # The children every call records into, each looked up once.
        self.rpc_duration_by = LabelCache(self.rpc_duration)
        self.rpcs_by = LabelCache(self.rpcs)
        self.rpcs_in_flight_by = LabelCache(self.rpcs_in_flight)

    def _declare_service_metrics(self, r: CollectorRegistry) -> None:
        """Recorded through the service layer's hooks (``ServiceMetrics``)."""
        self.messages_appended = Counter(
            "ctxwarden_messages_appended",
            "Messages stored by AppendMessages and StreamMessages (duplicates not counted)",
            registry=r,
        )
        self.stream_merged = Counter(
            "ctxwarden_stream_requests_merged",
            "StreamMessages requests answered as part of a run of more than one (one write)",
            registry=r,
        )
        self.model_input_tokens = Histogram(
            "ctxwarden_model_input_tokens",
            "Total tokens of each input built by BuildModelInput",
            buckets=TOKEN_BUCKETS,
            registry=r,
        )
        self.estimate_error_ratio = Histogram(
            "ctxwarden_token_estimate_error_ratio",
            "TokenBreakdown.estimate_error_ratio of each built input (provider-reported "
            "tokens / local estimate; 1 = no calibration data)",
            buckets=RATIO_BUCKETS,
            registry=r,
        )
        self.compactions = Counter(
            "ctxwarden_compactions",
            "Compaction checkpoints committed, by trigger and summariser",
            ["trigger", "summarizer"],
            registry=r,
        )
        self.compaction_tokens_removed = Counter(
            "ctxwarden_compaction_tokens_removed",
            "tokens_before - tokens_after, summed over committed compactions",
            ["trigger"],
            registry=r,
        )
        self.summarizer_duration = Histogram(
            "ctxwarden_summarizer_duration_seconds",
            "Time the server-side summariser took per Compact, by result",
            ["summarizer", "result"],
            buckets=SUMMARIZER_BUCKETS,
            registry=r,
        )
        self.summarizer_failures = Counter(
            "ctxwarden_summarizer_failures",
            "Server-side summariser failures (unavailable: retrying may help; "
            "rejected: the provider refused the request; error: anything else)",
            ["summarizer", "reason"],
            registry=r,
        )

    def _declare_db_metrics(self, r: CollectorRegistry) -> None:
        """Recorded by the engine events (``instrument_engine``) and the health probe."""
        self.db_duration = Histogram(
            "ctxwarden_db_query_duration_seconds",
            "Time of each SQL statement, by operation",
            ["operation"],
            buckets=DB_BUCKETS,
            registry=r,
        )
        self.db_errors = Counter(
            "ctxwarden_db_errors", "SQL statements that failed, by operation", ["operation"],
            registry=r,
        )  # fmt: skip
        self.db_pool_in_use = Gauge(
            "ctxwarden_db_pool_connections_in_use",
            "Database connections checked out of the pool now",
            registry=r,
        )
        self.db_duration_by = LabelCache(self.db_duration)
        self.db_errors_by = LabelCache(self.db_errors)
        self.db_pool_checkouts = Counter(
            "ctxwarden_db_pool_checkouts", "Connections checked out of the pool", registry=r
        )
        self.db_pool_size = Gauge(
            "ctxwarden_db_pool_size",
            "Configured connections kept by the pool (overflow comes on top)",
            registry=r,
        )
        self.database_up = Gauge(
            "ctxwarden_database_up",
            "1 while the health probe reaches the database, 0 while it does not",
            registry=r,
        )
        self.database_up.set(1)

    def watch_sessions(
        self,
        hot: Callable[[], int],
        capacity: int,
        restores: Callable[[], int],
        catch_ups: Callable[[], int],
    ) -> None:
        """Export the hot-session count, its capacity and the restore and catch-up
        counters (read at scrape)."""
        self.registry.register(SessionCollector(hot, capacity, restores, catch_ups))

    def watch_pool(self, size: Callable[[], int]) -> None:
        self.db_pool_size.set_function(lambda: float(size()))


# -- hooks for the service layer -----------------------------------------------------


def _failure_reason(exc: BaseException) -> str:
    from ctxwarden.core.errors import FailedPrecondition, Unavailable

    if isinstance(exc, asyncio.CancelledError):
        return "cancelled"
    if isinstance(exc, Unavailable):
        return "unavailable"
    if isinstance(exc, FailedPrecondition):
        return "rejected"
    return "error"


class ServiceMetrics:
    """Hook points for the service layer, recording into one server's ``Metrics``
    (and spans into its ``Tracing``); without them every hook is a no-op.

    Every method is safe to call from anywhere and never raises because of
    metrics (except ``timed_summarize``, which re-raises the call's own error).
    """

    def __init__(self, target: Metrics | None = None, tracing: Tracing | None = None) -> None:
        self._m = target
        self._tracing = tracing

    def install(self, target: Metrics | None, tracing: Tracing | None = None) -> None:
        self._m = target
        self._tracing = tracing

    def uninstall(self, target: Metrics | None = None) -> None:
        """Stop recording (only if ``target`` is still the installed one, when given)."""
        if target is None or self._m is target:
            self._m = None
            self._tracing = None

    def background(self) -> BackgroundCompactionMetrics | None:
        """The background compaction metrics to record into (None: none)."""
        return self._m.background if self._m is not None else None

    def observe_append(self, messages: int) -> None:
        """Messages newly stored by one append (call after it committed)."""
        m = self._m
        if m is not None and messages > 0:
            m.messages_appended.inc(messages)

    def observe_merged(self, requests: int) -> None:
        """A run of ``requests`` streamed requests written as one (after it committed)."""
        m = self._m
        if m is not None and requests > 1:
            m.stream_merged.inc(requests)

    def observe_usage(self, source: str, totals: TokenTotals, cost: float, currency: str) -> None:
        """Usage newly counted in a ledger (call after the write committed)."""
        m = self._m
        if m is not None:
            m.usage.observe(source, totals, cost, currency)

    def observe_cache_prefix(self, prefix: CachePrefix) -> None:
        """A live input counted in the cache ledger."""
        m = self._m
        if m is not None:
            m.usage.observe_prefix(prefix)

    def observe_db(self, operation: str, seconds: float, ok: bool) -> None:
        """A statement run outside the engine's events (the append group commit)."""
        m = self._m
        if m is None:
            return
        m.db_duration_by(operation).observe(seconds)
        if not ok:
            m.db_errors_by(operation).inc()

    def observe_model_input(self, tokens: TokenBreakdown) -> None:
        """One input built by BuildModelInput (its TokenBreakdown)."""
        m = self._m
        if m is None:
            return
        m.model_input_tokens.observe(tokens.total_tokens)
        ratio = tokens.estimate_error_ratio
        if ratio > 0:
            m.estimate_error_ratio.observe(ratio)

    def observe_compaction(self, checkpoint: Checkpoint) -> None:
        """A committed compaction checkpoint (server-side or agent-side)."""
        m = self._m
        if m is None:
            return
        trigger = checkpoint.trigger.name.lower()
        m.compactions.labels(trigger, checkpoint.summarizer or "unknown").inc()
        removed = checkpoint.tokens_before - checkpoint.tokens_after
        if removed > 0:
            m.compaction_tokens_removed.labels(trigger).inc(removed)
        if checkpoint.loss_report is not None:
            m.anchors.observe(checkpoint.loss_report)

    async def timed_summarize(self, summarizer: str, call: Awaitable[T]) -> T:
        """Await the server-side summariser call, recording its latency and failures
        (and a ``summarize`` span when tracing is on)."""
        m = self._m
        tracing = self._tracing
        if m is None and tracing is None:
            return await call
        span = (
            tracing.start_internal("ctxwarden.summarize", {"summarizer": summarizer})
            if tracing
            else None
        )
        start = time.perf_counter()
        try:
            result = await call
        except BaseException as exc:
            reason = _failure_reason(exc)
            if m is not None:
                m.summarizer_duration.labels(summarizer, reason).observe(
                    time.perf_counter() - start
                )
                if reason != "cancelled":
                    m.summarizer_failures.labels(summarizer, reason).inc()
            if span is not None:
                span.finish_error(exc)
            raise
        if m is not None:
            m.summarizer_duration.labels(summarizer, "ok").observe(time.perf_counter() - start)
        if span is not None:
            span.finish_ok()
        return result


# -- the HTTP endpoint -----------------------------------------------------------------


def parse_listen(listen: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:9100`` for IPv6; port 0 picks a free one)."""
    host, sep, port = listen.strip().rpartition(":")
    if not sep or not port.isdigit() or not host:
        raise ValueError(f"metrics address {listen!r} is not HOST:PORT")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    value = int(port)
    if not 0 <= value <= 65535:
        raise ValueError(f"metrics port {value} is out of range")
    return host, value


@dataclass
class MetricsServer:
    host: str
    port: int
    _httpd: Any
    _thread: Any

    @property
    def address(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)


def start_metrics_server(listen: str, registry: CollectorRegistry) -> MetricsServer:
    """Serve ``registry`` in Prometheus text format (``GET /metrics``) from a thread."""
    host, port = parse_listen(listen)
    httpd, thread = start_http_server(port, addr=host, registry=registry)
    return MetricsServer(host, int(httpd.server_port), httpd, thread)
