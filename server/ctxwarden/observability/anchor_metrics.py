"""Metrics of compactions' loss reports (core.anchor_report): how many anchors
of each category compacted spans held, where they survived, and each
compaction's survival share per category."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram

from ctxwarden.core.anchor_report import AnchorLocation, LossReport

SURVIVAL_BUCKETS = (0.0, 0.1, 0.25, 0.5, 0.75, 0.9, 0.95, 0.99, 1.0)


class AnchorMetrics:
    """Declared on a server's registry by ``Metrics``; recorded by ``observe_compaction``."""

    def __init__(self, r: CollectorRegistry) -> None:
        self.anchors = Counter(
            "ctxwarden_compaction_anchors",
            "Anchors of compacted spans, by category and where they survived "
            "(summary, pinned_state, file_lists, kept_messages, memory_block, "
            "reinjected, or lost)",
            ["category", "location"],
            registry=r,
        )
        self.survival = Histogram(
            "ctxwarden_compaction_anchor_survival",
            "Share of a compacted span's anchors of a category that survived, per "
            "compaction (only compactions whose span held anchors of the category)",
            ["category"],
            buckets=SURVIVAL_BUCKETS,
            registry=r,
        )

    def observe(self, report: LossReport) -> None:
        for counts in report.categories:
            if not counts.total:
                continue
            label = counts.category.label
            for location in AnchorLocation:
                n = counts.count(location)
                if n:
                    self.anchors.labels(label, location.label).inc(n)
            self.survival.labels(label).observe(counts.survival)
