"""Retention use case: apply the rules (or count what they would remove), and
the schedule ``ctxwarden serve --purge-interval`` runs them on, together with
idle eviction (``--idle-evict-seconds``).

Both take their time from injected clocks: ``now_us`` (wall clock, the rules'
cutoffs) and ``clock`` (monotonic seconds, the schedule), so tests move time by
hand and call ``LifecycleSchedule.tick`` instead of sleeping.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from ctxwarden.core.retention import Cutoff, RetentionRules, RuleKind
from ctxwarden.observability.lifecycle_metrics import LifecycleMetrics
from ctxwarden.service.hot import HotSessions
from ctxwarden.store import retention as statements
from ctxwarden.store.repository import Store
from ctxwarden.util import ids

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class PurgeReport:
    """Rows removed (or, in a dry run, that would be) by (rule, tenant)."""

    dry_run: bool
    cutoffs: tuple[Cutoff, ...]
    counts: dict[tuple[RuleKind, str], int] = field(default_factory=dict)

    def total(self, kind: RuleKind) -> int:
        return sum(n for (k, _), n in self.counts.items() if k is kind)


class Retention:
    def __init__(
        self,
        store: Store,
        rules: RetentionRules,
        metrics: LifecycleMetrics | None = None,
        now_us: Callable[[], int] = ids.now_us,
    ) -> None:
        self.store = store
        self.rules = rules
        self.metrics = metrics if metrics is not None else LifecycleMetrics()
        self.now_us = now_us

    async def run(self, *, dry_run: bool = False) -> PurgeReport:
        """Apply every rule once, in rule order (each in batches of its own)."""
        cutoffs = tuple(self.rules.cutoffs(self.now_us()))
        report = PurgeReport(dry_run, cutoffs)
        for cut in cutoffs:
            if dry_run:
                done = await statements.count(self.store.engine, cut)
            else:
                done = await statements.apply(self.store.gate, cut)
            for tenant, n in done.items():
                key = (cut.kind, tenant)
                report.counts[key] = report.counts.get(key, 0) + n
                if not dry_run:
                    self.metrics.observe_purged(cut.kind.value, tenant, n)
        return report


class LifecycleSchedule:
    """What the server does by the clock: evict idle sessions, run retention."""

    def __init__(
        self,
        hot: HotSessions,
        retention: Retention | None,
        *,
        purge_interval: float = 0.0,
        idle_evict_seconds: float = 0.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """``purge_interval`` seconds between retention runs (0: none; the first
        one interval after start); ``idle_evict_seconds`` (0: no idle eviction)."""
        self.hot = hot
        self.retention = retention if purge_interval > 0 else None
        self.purge_interval = purge_interval
        self.idle_evict_seconds = idle_evict_seconds
        self.clock = clock
        self.next_purge = clock() + purge_interval
        self.last_report: PurgeReport | None = None

    @property
    def active(self) -> bool:
        return self.retention is not None or self.idle_evict_seconds > 0

    async def tick(self) -> None:
        """Do what is due now (never raises: a failed purge is logged and counted)."""
        if self.idle_evict_seconds > 0:
            self.hot.evict_idle(self.idle_evict_seconds)
        if self.retention is None or self.clock() < self.next_purge:
            return
        try:
            self.last_report = await self.retention.run()
        except Exception:
            log.exception("scheduled retention run failed; next try in %ss", self.purge_interval)
            self.retention.metrics.observe_run(False)
        else:
            self.retention.metrics.observe_run(True)
            log.info("retention run: %s", _summary(self.last_report))
        self.next_purge = self.clock() + self.purge_interval

    async def run_forever(self, poll_seconds: float = 1.0) -> None:
        while True:
            await asyncio.sleep(poll_seconds)
            await self.tick()


def _summary(report: PurgeReport) -> str:
    return ", ".join(f"{kind.value}={report.total(kind)}" for kind in RuleKind)
