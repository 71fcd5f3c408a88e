"""The supervisor's main loop of ``serve --workers N`` (the supervisor: workers.py)."""

from __future__ import annotations

import logging
import signal
import sys
import time
from collections.abc import Iterable
from dataclasses import replace
from types import FrameType

from prometheus_client import CollectorRegistry
from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from ctxwarden.app.worker_link import SERVING
from ctxwarden.app.workers import START_TIMEOUT, Supervisor, reserve_port
from ctxwarden.config import Settings
from ctxwarden.observability.logging import configure_logging
from ctxwarden.observability.metrics import MetricsServer, start_metrics_server
from ctxwarden.observability.worker_metrics import WorkersCollector
from ctxwarden.util import listen

log = logging.getLogger("ctxwarden")

POLL_SECONDS = 0.25


class SupervisorCollector(Collector):
    def __init__(self, sup: Supervisor) -> None:
        self.sup = sup

    def collect(self) -> Iterable[Metric]:
        yield GaugeMetricFamily(
            "ctxwarden_workers", "worker processes configured (--workers)", value=self.sup.count
        )
        yield GaugeMetricFamily(
            "ctxwarden_workers_serving",
            "workers whose health is SERVING",
            value=sum(1 for v in self.sup.board[:] if v == SERVING),
        )
        yield CounterMetricFamily(
            "ctxwarden_worker_restarts",
            "workers restarted after they died",
            value=sum(s.restarts for s in self.sup.slots),
        )


def _metrics(sup: Supervisor) -> MetricsServer | None:
    if not sup.settings.metrics_listen:
        return None
    registry = CollectorRegistry(auto_describe=False)
    registry.register(WorkersCollector(sup.metrics_addresses))
    registry.register(SupervisorCollector(sup))
    return start_metrics_server(sup.settings.metrics_listen, registry)


def _start_all(sup: Supervisor) -> int | None:
    """Start every worker and wait until all listen; a fatal exit code otherwise."""
    for slot in sup.slots:
        sup.start(slot)
    deadline = time.monotonic() + START_TIMEOUT
    while not sup.all_ready():
        if sup.stopping:
            return 0
        if time.monotonic() > deadline:
            log.error("workers did not all start within %.0f s", START_TIMEOUT)
            return 1
        code = sup.step(POLL_SECONDS)
        if code is not None:
            return code
    return None


def run(sup: Supervisor) -> int:
    try:
        configure_logging(sup.settings.log_level, sup.settings.log_format)
        address = listen.parse(sup.settings.listen)
        held = reserve_port(address)
    except (ValueError, listen.ListenError) as exc:
        print(f"ctxwarden: {exc}", file=sys.stderr)
        return 2
    bound = address.bound(held.getsockname()[1])
    sup.settings = replace(sup.settings, listen=bound)

    def on_signal(signum: int, frame: FrameType | None) -> None:
        sup.stopping = True

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, on_signal)
    metrics: MetricsServer | None = None
    try:
        code = _start_all(sup)
        if code is not None:
            return code
        try:
            metrics = _metrics(sup)
        except (OSError, ValueError) as exc:
            print(f"ctxwarden: cannot serve metrics on {sup.settings.metrics_listen}: {exc}")
            return 2
        _announce(sup, bound, metrics)
        while not sup.stopping:
            code = sup.step(POLL_SECONDS)
            if code is not None:
                return code
        log.info("shutting down %d workers: each drains its calls", sup.count)
        return 0
    finally:
        sup.stop(sup.settings.shutdown_grace_seconds)
        if metrics is not None:
            metrics.close()
        held.close()


def _announce(sup: Supervisor, bound: str, metrics: MetricsServer | None) -> None:
    # The same lines, in the same order, as a single server prints.
    print(f"ctxwarden listening on {bound}", flush=True)
    if metrics is not None:
        print(f"ctxwarden metrics on {metrics.address}", flush=True)
    console = sup.slots[0].console
    if console:
        print(f"ctxwarden console on {console}", flush=True)
    pids = ", ".join(str(s.process.pid) for s in sup.slots if s.process is not None)
    log.info("serving on %s with %d workers (pids %s)", bound, sup.count, pids)


def run_workers(settings: Settings, count: int) -> int:
    """``serve --workers N``: supervise N workers until a signal or a fatal start."""
    return run(Supervisor(settings, count))
