"""A checkpoint's loss report and preserved anchors, from the session it compacts.

Pure: everything comes from the hot ``SessionContext`` and the checkpoint
about to be committed. The span is what the checkpoint takes out of the
model's sight: the messages before its ``first_kept_seq`` that were still
kept (a summarising compaction), or the tool results it newly stubs (a
clearing). The anchors of the span (core.anchors) are looked for in what the
model sees afterwards (core.anchor_report).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import replace

from ctxwarden.core.anchor_report import (
    DEFAULT_PRESERVE_TOKENS,
    AnchorLocation,
    Indexes,
    LossReport,
    TargetIndex,
    Targets,
    build_report,
    place_steps,
    preserve,
    shortfalls,
)
from ctxwarden.core.anchors import CATEGORIES, Anchor, AnchorCategory, span_anchor_steps
from ctxwarden.core.clearing import is_cleared
from ctxwarden.core.context import SessionContext
from ctxwarden.core.errors import FailedPrecondition
from ctxwarden.core.messages import ContentKind, Message, Role
from ctxwarden.core.reasons import ErrorReason
from ctxwarden.core.session import Checkpoint, ContextPolicy, Session
from ctxwarden.core.stepwise import Steps, in_one_go


def preserved_categories(policy: ContextPolicy) -> tuple[AnchorCategory, ...]:
    return tuple(c for c in CATEGORIES if policy.preserve_lost_anchors & (1 << c))


def category_mask(categories: Sequence[AnchorCategory]) -> int:
    mask = 0
    for c in categories:
        mask |= 1 << c
    return mask


def shown_text(m: Message) -> str:
    """A message's text as the model sees it, tool calls as ``name(arguments)``."""
    parts = [b.text for b in m.content if b.kind is ContentKind.TEXT and b.text]
    parts += [f"{c.tool_name}({c.arguments_json})" for c in m.tool_calls]
    return "\n".join(parts)


def summarized_span(ctx: SessionContext, first_kept_seq: int) -> list[Message]:
    """The kept messages a summarising compaction to ``first_kept_seq`` takes out."""
    return [m for m in ctx.active_messages if m.seq < first_kept_seq]


def cleared_span(ctx: SessionContext, through_seq: int) -> list[Message]:
    """The tool results a clearing through ``through_seq`` newly stubs."""
    return [
        m
        for m in ctx.active_messages
        if m.role is Role.TOOL_RESULT
        and is_cleared(m, through_seq)
        and not is_cleared(m, ctx.cleared_through)
    ]


def kept_text(ctx: SessionContext, checkpoint: Checkpoint) -> str:
    """The kept messages as the view shows them under ``checkpoint`` (a stubbed
    tool result shows nothing of its output)."""
    through = checkpoint.tool_results_cleared_through
    parts = []
    for e in ctx.entries:
        m = e.original
        if m.seq < checkpoint.first_kept_seq or m.history_only or m.failed:
            continue
        if is_cleared(m, through):
            continue
        parts.append(shown_text(e.message))
    return "\n\n".join(parts)


def _indexes(
    ctx: SessionContext, checkpoint: Checkpoint, session: Session
) -> dict[AnchorLocation, TargetIndex]:
    files = (*checkpoint.read_files, *checkpoint.modified_files)
    return dict(
        Targets(
            summary=checkpoint.carried_summary,
            pinned_state=session.pinned_state,
            file_lists=files,
            memory_block=session.memory.text if session.memory else "",
            kept_messages=kept_text(ctx, checkpoint),
            reinjected=checkpoint.preserved_anchors,
        ).indexes()
    )


def assess_steps(
    ctx: SessionContext,
    checkpoint: Checkpoint,
    session: Session,
    span: Sequence[Message],
    *,
    anchors: Sequence[Anchor] | None = None,
) -> Steps[Checkpoint]:
    """``checkpoint`` with its preserved anchors (the policy's
    preserve_lost_anchors, and the previous checkpoint's that the new summary
    does not hold) and its loss report. ``session``: as it is after the
    compaction (its new memory block). In steps (core.stepwise): the span may be
    the whole of a long session."""
    found = (yield from span_anchor_steps(span)) if anchors is None else anchors
    indexes = _indexes(ctx, replace(checkpoint, preserved_anchors=""), session)
    policy = session.policy
    previous = ctx.checkpoint.preserved_anchors if ctx.checkpoint else ""
    categories = preserved_categories(policy)
    preserved = ""
    # A first clearing has no summary message to show preserved anchors in.
    if checkpoint.summary and (categories or previous):
        budget = policy.preserve_lost_anchors_max_tokens or DEFAULT_PRESERVE_TOKENS
        where = yield from place_steps(found, indexes)
        lost = [a for a, loc in zip(found, where, strict=True) if loc is AnchorLocation.LOST]
        preserved = preserve(
            lost,
            categories,
            budget if categories else 0,
            ctx.tokenizer.count,
            previous=previous,
            summary=indexes[AnchorLocation.SUMMARY],
        )
    checkpoint = replace(checkpoint, preserved_anchors=preserved)
    return (yield from with_report_steps(checkpoint, found, span, indexes))


assess = in_one_go(assess_steps)


def with_report_steps(
    checkpoint: Checkpoint,
    anchors: Sequence[Anchor],
    span: Sequence[Message],
    indexes: Indexes,
) -> Steps[Checkpoint]:
    """``checkpoint`` with the loss report of ``anchors`` against ``indexes``,
    its summary and preserved anchors taken from ``checkpoint`` itself."""
    current = dict(indexes)
    current[AnchorLocation.SUMMARY] = TargetIndex.of(checkpoint.carried_summary)
    current[AnchorLocation.REINJECTED] = TargetIndex.of(checkpoint.preserved_anchors)
    seqs = (span[0].seq, span[-1].seq) if span else (0, 0)
    where = yield from place_steps(anchors, current)
    return replace(checkpoint, loss_report=build_report(anchors, where, seqs))


with_report = in_one_go(with_report_steps)


def reassess_steps(
    ctx: SessionContext,
    checkpoint: Checkpoint,
    session: Session,
    span: Sequence[Message],
    anchors: Sequence[Anchor],
) -> Steps[Checkpoint]:
    """The report again after the summary changed (a trim), preserved anchors kept."""
    indexes = _indexes(ctx, checkpoint, session)
    return (yield from with_report_steps(checkpoint, anchors, span, indexes))


reassess = in_one_go(reassess_steps)


MAX_MISSING_NAMED = 5
"""A refusal's message names at most this many missing anchors per category."""


def require_survival(
    report: LossReport | None, minimum: Mapping[AnchorCategory, float] | None
) -> None:
    """FAILED_PRECONDITION ANCHORS_LOST when a category's survival is below its minimum.

    The message and the ErrorInfo metadata name each such category, its
    survival and minimum (``<category>_survival``, ``<category>_required``) and
    the anchors missing (``<category>_missing``: a JSON array of their texts, as
    many as the report lists)."""
    if report is None or not minimum:
        return
    short = shortfalls(report, minimum)
    if not short:
        return
    parts: list[str] = []
    metadata: dict[str, str] = {"categories": ",".join(c.label for c, _, _ in short)}
    for category, got, required in short:
        missing = [a.text for a in report.lost if a.category is category]
        counts = report.counts(category)
        named = ", ".join(repr(t) for t in missing[:MAX_MISSING_NAMED])
        more = counts.lost - min(len(missing), MAX_MISSING_NAMED)
        parts.append(
            f"{category.label}: {counts.total - counts.lost} of {counts.total} survive "
            f"({got:.2f} < {required:.2f}); missing {named}"
            + (f" and {more} more" if more > 0 else "")
        )
        metadata[f"{category.label}_survival"] = f"{got:.4f}"
        metadata[f"{category.label}_required"] = f"{required:.4f}"
        metadata[f"{category.label}_missing"] = json.dumps(missing, ensure_ascii=False)
    raise FailedPrecondition(
        "the summary loses too many anchors (min_anchor_survival): "
        + "; ".join(parts)
        + ". Summarise again keeping them and commit the same plan again",
        reason=ErrorReason.ANCHORS_LOST,
        metadata=metadata,
    )
