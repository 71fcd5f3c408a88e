"""Hot sessions, read at scrape: how many, the capacity, and how copies were loaded."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector


class SessionCollector(Collector):
    def __init__(
        self,
        hot: Callable[[], int],
        capacity: int,
        restores: Callable[[], int],
        catch_ups: Callable[[], int],
    ) -> None:
        self.hot = hot
        self.capacity = capacity
        self.restores = restores
        self.catch_ups = catch_ups

    def collect(self) -> Iterable[Metric]:
        yield GaugeMetricFamily(
            "ctxwarden_hot_sessions", "Sessions held in memory now", value=self.hot()
        )
        yield GaugeMetricFamily(
            "ctxwarden_hot_sessions_capacity",
            "Most sessions held in memory (--max-hot-sessions)",
            value=self.capacity,
        )
        yield CounterMetricFamily(
            "ctxwarden_session_restores",
            "Sessions loaded from the database into memory (restart, eviction, other replica)",
            value=self.restores(),
        )
        yield CounterMetricFamily(
            "ctxwarden_session_catch_ups",
            "Stale in-memory sessions brought up to date from the appends another replica "
            "made (O(appended)) instead of restored",
            value=self.catch_ups(),
        )
