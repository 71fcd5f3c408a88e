"""``ctxwarden serve``'s lifecycle work: the retention schedule (--purge-interval),
idle eviction (--idle-evict-seconds) and their metrics."""

from __future__ import annotations

import asyncio
import contextlib

from prometheus_client import CollectorRegistry

from ctxwarden.config import Settings
from ctxwarden.observability.lifecycle_metrics import LifecycleMetrics
from ctxwarden.service.manager import SessionManager
from ctxwarden.service.retention import LifecycleSchedule, Retention

POLL_SECONDS = 1.0


def schedule_for(
    settings: Settings, manager: SessionManager, registry: CollectorRegistry | None
) -> LifecycleSchedule:
    metrics = LifecycleMetrics(registry)
    metrics.watch_evictions(lambda: manager.hot.evictions)
    return LifecycleSchedule(
        manager.hot,
        Retention(manager.store, settings.retention, metrics),
        purge_interval=settings.purge_interval_seconds,
        idle_evict_seconds=settings.idle_evict_seconds,
        clock=manager.runtime.clock,
    )


def start(
    settings: Settings, manager: SessionManager, registry: CollectorRegistry | None
) -> asyncio.Task[None] | None:
    """The schedule as a background task (None when nothing is scheduled)."""
    schedule = schedule_for(settings, manager, registry)
    if not schedule.active:
        return None
    return asyncio.create_task(schedule.run_forever(POLL_SECONDS), name="ctxwarden-lifecycle")


async def stop(task: asyncio.Task[None] | None) -> None:
    if task is None:
        return
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
