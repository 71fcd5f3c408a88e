"""Metrics of the session lifecycle: retention purges and hot-session evictions.

Registered on a server's own registry next to ``Metrics``; the service layer
records through a ``LifecycleMetrics`` (without a registry every hook is a no-op).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping

from prometheus_client import CollectorRegistry, Counter, Gauge
from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.registry import Collector


class LifecycleMetrics:
    def __init__(
        self, registry: CollectorRegistry | None = None, wall: Callable[[], float] = time.time
    ) -> None:
        self.registry = registry
        self.wall = wall
        if registry is None:
            return
        self.purged = Counter(
            "ctxwarden_retention_purged",
            "Rows removed by retention rules: sessions (archived_sessions, deleted_sessions) "
            "or idempotency records (idempotency_records), by rule and tenant",
            ["rule", "tenant"],
            registry=registry,
        )
        self.runs = Counter(
            "ctxwarden_retention_runs",
            "Scheduled retention runs (--purge-interval), by result (ok, failed)",
            ["result"],
            registry=registry,
        )
        self.failures = Counter(
            "ctxwarden_retention_failures",
            "Scheduled retention runs that failed (the server log has the error)",
            registry=registry,
        )
        self.last_run = Gauge(
            "ctxwarden_retention_last_run_timestamp_seconds",
            "When the last scheduled retention run finished (Unix time; 0: none yet)",
            registry=registry,
        )
        self.last_success = Gauge(
            "ctxwarden_retention_last_success_timestamp_seconds",
            "When the last successful scheduled retention run finished (Unix time)",
            registry=registry,
        )

    def observe_purged(self, rule: str, tenant: str, rows: int) -> None:
        if self.registry is not None and rows > 0:
            self.purged.labels(rule, tenant).inc(rows)

    def observe_run(self, ok: bool) -> None:
        if self.registry is None:
            return
        now = self.wall()
        self.last_run.set(now)
        self.runs.labels("ok" if ok else "failed").inc()
        if ok:
            self.last_success.set(now)
        else:
            self.failures.inc()

    def watch_evictions(self, evictions: Callable[[], Mapping[str, int]]) -> None:
        """Export hot-session evictions by cause (``evictions`` is read at scrape)."""
        if self.registry is not None:
            self.registry.register(_EvictionCollector(evictions))


class _EvictionCollector(Collector):
    def __init__(self, evictions: Callable[[], Mapping[str, int]]) -> None:
        self.evictions = evictions

    def collect(self) -> Iterable[Metric]:
        family = CounterMetricFamily(
            "ctxwarden_hot_session_evictions",
            "Sessions whose in-memory copy was dropped, by cause (lru, idle, archived, "
            "deleted, stale)",
            labels=["cause"],
        )
        for cause, n in sorted(self.evictions().items()):
            family.add_metric([cause], n)
        yield family
