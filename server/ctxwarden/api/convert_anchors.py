"""Protobuf <-> domain conversion of anchors and loss reports (core.anchors,
core.anchor_report): the domain enums use the wire numbers."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

from ctxwarden.core.anchor_report import AnchorLocation, LossReport
from ctxwarden.core.anchors import CATEGORIES, Anchor, AnchorCategory
from ctxwarden.core.compaction.loss import category_mask, preserved_categories
from ctxwarden.core.errors import InvalidArgument
from ctxwarden.core.reasons import ErrorReason
from ctxwarden.core.session import ContextPolicy
from ctxwarden.v1 import context_service_pb2 as svc_pb
from ctxwarden.v1 import session_pb2 as ses_pb

MAX_PLAN_ANCHORS = 1000
"""CompactionPlan.anchors lists at most this many."""


def anchor_to_pb(a: Anchor) -> svc_pb.Anchor:
    return svc_pb.Anchor(category=int(a.category), text=a.text, seq=a.seq)  # type: ignore[arg-type]


def report_to_pb(r: LossReport) -> svc_pb.CompactionLossReport:
    return svc_pb.CompactionLossReport(
        categories=[
            svc_pb.AnchorCategoryCount(
                category=int(c.category),  # type: ignore[arg-type]
                total=c.total,
                summary=c.count(AnchorLocation.SUMMARY),
                pinned_state=c.count(AnchorLocation.PINNED_STATE),
                file_lists=c.count(AnchorLocation.FILE_LISTS),
                kept_messages=c.count(AnchorLocation.KEPT_MESSAGES),
                memory_block=c.count(AnchorLocation.MEMORY_BLOCK),
                reinjected=c.count(AnchorLocation.REINJECTED),
                lost=c.lost,
                survival=c.survival,
            )
            for c in r.categories
        ],
        lost_anchors=[anchor_to_pb(a) for a in r.lost],
        lost_anchors_omitted=r.lost_omitted,
        span_from_seq=r.span_from_seq,
        span_to_seq=r.span_to_seq,
    )


def plan_anchors(found: Sequence[Anchor]) -> tuple[list[svc_pb.Anchor], int]:
    """CompactionPlan.anchors and anchors_omitted, of the anchors of what the plan
    summarises (found by the service)."""
    shown = found[:MAX_PLAN_ANCHORS]
    return [anchor_to_pb(a) for a in shown], len(found) - len(shown)


def _category(value: int, field: str, reason: ErrorReason) -> AnchorCategory:
    if value not in {int(c) for c in CATEGORIES}:
        raise InvalidArgument(f"{field} {value} is no anchor category", reason=reason, field=field)
    return AnchorCategory(value)


def min_survival_from_pb(
    entries: Iterable[svc_pb.AnchorSurvival],
) -> dict[AnchorCategory, float]:
    out: dict[AnchorCategory, float] = {}
    reason = ErrorReason.INVALID_ANCHOR_SURVIVAL
    for i, e in enumerate(entries):
        field = f"min_anchor_survival[{i}]"
        category = _category(int(e.category), f"{field}.category", reason)
        if not (math.isfinite(e.min_fraction) and 0.0 <= e.min_fraction <= 1.0):
            raise InvalidArgument(
                f"{field}.min_fraction must be between 0 and 1",
                reason=reason,
                field=f"{field}.min_fraction",
            )
        if category in out:
            raise InvalidArgument(
                f"{field} names {category.label} a second time",
                reason=reason,
                field=f"{field}.category",
            )
        out[category] = e.min_fraction
    return out


def preservation_from_pb(p: ses_pb.AnchorPreservation) -> tuple[int, int]:
    """(ContextPolicy.preserve_lost_anchors, its max_tokens) of the proto."""
    field = "policy.preserve_lost_anchors"
    if p.max_tokens < 0:
        raise InvalidArgument(
            f"{field}.max_tokens must be >= 0 (0 means the default)",
            reason=ErrorReason.INVALID_POLICY,
            field=f"{field}.max_tokens",
        )
    categories: Sequence[AnchorCategory] = [
        _category(int(c), f"{field}.categories", ErrorReason.INVALID_POLICY) for c in p.categories
    ]
    mask = category_mask(categories)
    return mask, int(p.max_tokens) if mask else 0


def preservation_to_pb(policy: ContextPolicy) -> ses_pb.AnchorPreservation | None:
    categories = preserved_categories(policy)
    if not categories:
        return None
    return ses_pb.AnchorPreservation(
        categories=[int(c) for c in categories],  # type: ignore[misc]
        max_tokens=policy.preserve_lost_anchors_max_tokens,
    )
