"""Metrics of the background compaction scheduler (``service.background_compaction``)."""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

BACKGROUND_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0)


class BackgroundCompactionMetrics:
    """Declared on a server's registry by ``Metrics``."""

    def __init__(self, r: CollectorRegistry) -> None:
        self._count_attempts(r)
        self._gauge_levels(r)
        self.after_idle = Counter(
            "ctxwarden_background_compactions_after_idle",
            "Background compactions queued because the session was idle for its cache "
            "lifetime (the provider's prompt cache had expired anyway)",
            registry=r,
        )
        self.duration = Histogram(
            "ctxwarden_background_compaction_duration_seconds",
            "Time of each background compaction attempt (summariser and commit), by result",
            ["result"],
            buckets=BACKGROUND_BUCKETS,
            registry=r,
        )

    def _count_attempts(self, r: CollectorRegistry) -> None:
        """The counters of attempts and their outcomes."""
        self.started = Counter(
            "ctxwarden_background_compactions_started",
            "Background compaction attempts started (a retry is a new attempt)",
            registry=r,
        )
        self.succeeded = Counter(
            "ctxwarden_background_compactions_succeeded",
            "Background compactions that committed a checkpoint",
            registry=r,
        )
        self.failed = Counter(
            "ctxwarden_background_compactions_failed",
            "Background compactions given up (retries exhausted or the summariser "
            "rejected the request); the session is compacted again when it grows",
            registry=r,
        )
        self.retried = Counter(
            "ctxwarden_background_compactions_retried",
            "Failed background compaction attempts scheduled for a retry with backoff",
            registry=r,
        )
        self.superseded = Counter(
            "ctxwarden_background_compactions_superseded",
            "Background compactions with nothing left to do (another compaction, a "
            "rollback or a deletion came first)",
            registry=r,
        )

    def _gauge_levels(self, r: CollectorRegistry) -> None:
        """The gauges of what is running, queued, pending and waiting now."""
        self.in_flight = Gauge(
            "ctxwarden_background_compactions_in_flight",
            "Background compactions summarising or committing now",
            registry=r,
        )
        self.queued = Gauge(
            "ctxwarden_background_compactions_queued",
            "Sessions waiting for a background compaction slot (retries waiting "
            "out their backoff not included)",
            registry=r,
        )
        self.pending = Gauge(
            "ctxwarden_background_compactions_pending",
            "Sessions with a background compaction queued, running or waiting out a "
            "retry's backoff (0: none to come until a session grows again)",
            registry=r,
        )
        self.waiting_for_idle = Gauge(
            "ctxwarden_background_compactions_waiting_for_idle",
            "Sessions past the soft threshold waiting for an idle gap as long as their "
            "policy's cache_lifetime_seconds before they are compacted",
            registry=r,
        )


class BackgroundRecorder:
    """Records into the metrics ``target()`` returns at each call (None: nothing),
    so metrics installed after the scheduler was built are still used."""

    def __init__(self, target: Callable[[], BackgroundCompactionMetrics | None]) -> None:
        self._target = target

    def started(self) -> None:
        m = self._target()
        if m is not None:
            m.started.inc()

    def finished(self, result: str, seconds: float) -> None:
        """``result``: succeeded, failed, superseded, retry or cancelled."""
        m = self._target()
        if m is None:
            return
        m.duration.labels(result).observe(seconds)
        if result == "succeeded":
            m.succeeded.inc()
        elif result == "failed":
            m.failed.inc()
        elif result == "superseded":
            m.superseded.inc()

    def gave_up(self) -> None:
        m = self._target()
        if m is not None:
            m.failed.inc()

    def retried(self) -> None:
        m = self._target()
        if m is not None:
            m.retried.inc()

    def superseded(self) -> None:
        m = self._target()
        if m is not None:
            m.superseded.inc()

    def levels(self, in_flight: int, queued: int, waiting: int, pending: int) -> None:
        m = self._target()
        if m is not None:
            m.in_flight.set(in_flight)
            m.queued.set(queued)
            m.waiting_for_idle.set(waiting)
            m.pending.set(pending)

    def after_idle(self) -> None:
        m = self._target()
        if m is not None:
            m.after_idle.inc()
