"""``/metrics`` of ``serve --workers N``: every worker's metrics as one scrape.

Each worker serves its own registry on a private loopback port; the supervisor's
collector reads them all at scrape time. Counters, histograms and summaries are
summed across workers (a restarted worker's counters start again from 0, which
Prometheus treats as a counter reset); gauges keep one series a worker, labelled
``worker``, since a sum of e.g. resident memory and of a 0/1 state mean different
things.
"""

from __future__ import annotations

import logging
import urllib.request
from collections.abc import Callable, Iterable, Mapping

from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector

log = logging.getLogger("ctxwarden")

SUMMED = ("counter", "histogram", "summary", "gaugehistogram")
FETCH_TIMEOUT = 2.0


def fetch(address: str) -> str:
    with urllib.request.urlopen(f"http://{address}/metrics", timeout=FETCH_TIMEOUT) as reply:
        text: str = reply.read().decode()
        return text


def merge(texts: Mapping[int, str]) -> list[Metric]:
    """One family per name out of each worker's exposition text."""
    families: dict[str, Metric] = {}
    sums: dict[str, dict[tuple[str, tuple[tuple[str, str], ...]], float]] = {}
    for worker, text in sorted(texts.items()):
        for family in text_string_to_metric_families(text):
            merged = families.setdefault(
                family.name, Metric(family.name, family.documentation, family.type, family.unit)
            )
            summed = family.type in SUMMED
            for sample in family.samples:
                if summed:
                    key = (sample.name, tuple(sorted(sample.labels.items())))
                    bucket = sums.setdefault(family.name, {})
                    bucket[key] = bucket.get(key, 0.0) + sample.value
                else:
                    tagged = {**sample.labels, "worker": str(worker)}
                    merged.add_sample(sample.name, tagged, sample.value)
    for name, bucket in sums.items():
        for (sample_name, pairs), value in bucket.items():
            families[name].add_sample(sample_name, dict(pairs), value)
    return list(families.values())


class WorkersCollector(Collector):
    """Collects ``addresses()`` (worker index -> its private metrics address)."""

    def __init__(self, addresses: Callable[[], Mapping[int, str]]) -> None:
        self._addresses = addresses

    def collect(self) -> Iterable[Metric]:
        texts: dict[int, str] = {}
        for worker, address in sorted(self._addresses().items()):
            try:
                texts[worker] = fetch(address)
            except OSError as exc:  # a worker restarting: the others still count
                log.warning("metrics of worker %d (%s) unavailable: %s", worker, address, exc)
        return merge(texts)
