"""The loss report of each committed checkpoint is recorded per category:
anchors by where they survived, and the survival share per compaction."""

from __future__ import annotations

from ctxwarden.core.anchor_report import AnchorLocation, build_report
from ctxwarden.core.anchors import Anchor, AnchorCategory
from ctxwarden.core.session import Checkpoint
from ctxwarden.observability.metrics import Metrics, ServiceMetrics


def test_observe_compaction_records_anchor_survival() -> None:
    m = Metrics(process=False)
    hooks = ServiceMetrics(m)
    anchors = [
        Anchor(AnchorCategory.CONSTRAINT, "Never push.", "never push", 1),
        Anchor(AnchorCategory.CONSTRAINT, "Always lint.", "always lint", 2),
        Anchor(AnchorCategory.FILE_PATH, "a.py", "a.py", 3),
    ]
    where = [AnchorLocation.SUMMARY, AnchorLocation.LOST, AnchorLocation.FILE_LISTS]
    checkpoint = Checkpoint("c", "s", "sum", 4, 100, 0, loss_report=build_report(anchors, where))
    hooks.observe_compaction(checkpoint)
    hooks.observe_compaction(Checkpoint("d", "s", "sum", 4, 100, 0))  # no report: no anchors

    def sample(name: str, **labels: str) -> float:
        return m.registry.get_sample_value(name, labels) or 0.0

    anchors_total = "ctxwarden_compaction_anchors_total"
    assert sample(anchors_total, category="constraint", location="summary") == 1
    assert sample(anchors_total, category="constraint", location="lost") == 1
    assert sample(anchors_total, category="file_path", location="file_lists") == 1
    assert sample(anchors_total, category="url", location="lost") == 0
    survival = "ctxwarden_compaction_anchor_survival"
    assert sample(f"{survival}_count", category="constraint") == 1
    assert sample(f"{survival}_sum", category="constraint") == 0.5
    assert sample(f"{survival}_bucket", category="constraint", le="0.5") == 1
    assert sample(f"{survival}_bucket", category="constraint", le="0.25") == 0
    assert sample(f"{survival}_count", category="url") == 0
