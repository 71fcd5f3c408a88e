"""The anchor enums use the wire numbers (api/convert_anchors.py relies on it),
and the stored reports keep their format."""

from __future__ import annotations

import json

from ctxwarden.api.convert_anchors import min_survival_from_pb, preservation_from_pb, report_to_pb
from ctxwarden.core.anchor_report import AnchorLocation, build_report, report_dumps
from ctxwarden.core.anchors import Anchor, AnchorCategory
from ctxwarden.v1 import context_service_pb2 as pb
from ctxwarden.v1 import session_pb2 as ses


def test_categories_and_locations_are_the_proto_numbers() -> None:
    assert {c.name: int(c) for c in AnchorCategory} == {
        n.removeprefix("ANCHOR_CATEGORY_"): v
        for n, v in ses.AnchorCategory.items()
        if v != ses.ANCHOR_CATEGORY_UNSPECIFIED
    }
    assert {loc.name: int(loc) for loc in AnchorLocation} == {
        n.removeprefix("ANCHOR_LOCATION_"): v
        for n, v in pb.AnchorLocation.items()
        if v != pb.ANCHOR_LOCATION_UNSPECIFIED
    }


def test_report_to_pb_and_the_stored_format() -> None:
    a = Anchor(AnchorCategory.URL, "https://x.io", "https://x.io", 3)
    b = Anchor(AnchorCategory.URL, "https://y.io", "https://y.io", 4)
    report = build_report([a, b], [AnchorLocation.KEPT_MESSAGES, AnchorLocation.LOST], (3, 9))
    out = report_to_pb(report)
    (url,) = [c for c in out.categories if c.category == ses.ANCHOR_CATEGORY_URL]
    assert (url.total, url.kept_messages, url.lost, url.survival) == (2, 1, 1, 0.5)
    assert len(out.categories) == 7 and (out.span_from_seq, out.span_to_seq) == (3, 9)
    assert [x.text for x in out.lost_anchors] == ["https://y.io"]
    assert json.loads(report_dumps(report)) == {
        "counts": {"url": [0, 0, 0, 1, 0, 0, 1]},
        "lost": [["url", 4, "https://y.io", "https://y.io"]],
        "omitted": 0,
        "span": [3, 9],
    }


def test_policy_and_request_conversions() -> None:
    keep = ses.AnchorPreservation(
        categories=[ses.ANCHOR_CATEGORY_CONSTRAINT, ses.ANCHOR_CATEGORY_OPEN_TASK]
    )
    assert preservation_from_pb(keep) == ((1 << 5) | (1 << 6), 0)
    assert preservation_from_pb(ses.AnchorPreservation(max_tokens=9)) == (0, 0)
    got = min_survival_from_pb(
        [pb.AnchorSurvival(category=ses.ANCHOR_CATEGORY_URL, min_fraction=1)]
    )
    assert got == {AnchorCategory.URL: 1.0}
