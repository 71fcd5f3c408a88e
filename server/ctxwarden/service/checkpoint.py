"""Building a checkpoint from a plan and the summariser's (or agent's) answer."""

from __future__ import annotations

import asyncio
from dataclasses import replace

from ctxwarden.core.anchors import Anchor, span_anchor_steps, span_anchors
from ctxwarden.core.compaction.loss import assess, reassess, summarized_span
from ctxwarden.core.compaction.terms import PlanTerms
from ctxwarden.core.context import SessionContext
from ctxwarden.core.errors import InvalidArgument
from ctxwarden.core.reasons import ErrorReason
from ctxwarden.core.session import Checkpoint, CompactionTrigger, Session
from ctxwarden.util import ids
from ctxwarden.util.loop_slices import finished

NO_EARLIER_HISTORY = "(no earlier history)"
BIG_CONTEXT = 2000
"""Kept messages past which a checkpoint is built off the loop in one go (its loss
report reads every message of the span): see ``checkpoint_built``."""


def build_checkpoint(
    ctx: SessionContext,
    terms: PlanTerms,
    summary: str,
    turn_prefix_summary: str,
    summarizer: str,
    trigger: CompactionTrigger,
    session: Session | None = None,
    anchors: tuple[Anchor, ...] | None = None,
) -> Checkpoint:
    """Build the checkpoint; trim the summary so it never pushes the rebuilt
    context over the threshold (nor past its own budget). ``anchors``: those of
    the summarised span, when the caller found them already."""
    summary, turn_prefix_summary = _summaries(ctx, terms, summary, turn_prefix_summary)
    checkpoint = Checkpoint(
        compaction_id=ids.new_id(),
        session_id=ctx.session.session_id,
        summary=summary,
        first_kept_seq=terms.first_kept_seq,
        tokens_before=terms.tokens_before,
        create_time_us=ids.now_us(),
        turn_prefix_summary=turn_prefix_summary,
        split_turn=terms.split_turn,
        read_files=terms.read_files,
        modified_files=terms.modified_files,
        summarizer=summarizer,
        trigger=trigger,
        at_seq=ctx.session.last_seq,
        tool_results_cleared_through=ctx.cleared_through,  # an earlier clearing stays
    )
    # The loss report (core.compaction.loss), and the lost anchors the policy puts
    # back, before the trim below: their tokens count against the threshold too.
    after_session = session or ctx.session
    span = summarized_span(ctx, terms.first_kept_seq)
    if anchors is None:
        anchors = span_anchors(span)
    checkpoint = assess(ctx, checkpoint, after_session, span, anchors=anchors)
    after = ctx.tokens_with(checkpoint, session)  # session: with its new memory block
    threshold = ctx.threshold()
    if after > threshold:
        over = after - threshold
        room = max(ctx.tokenizer.count(checkpoint.summary) - over, 64)
        trimmed, changed = ctx.trim_summary(checkpoint.summary, room)
        if changed:
            checkpoint = replace(checkpoint, summary=trimmed)
            checkpoint = reassess(ctx, checkpoint, after_session, span, anchors)
            after = ctx.tokens_with(checkpoint, session)
    return replace(checkpoint, tokens_after=after)


async def checkpoint_built(
    ctx: SessionContext,
    terms: PlanTerms,
    summary: str,
    turn_prefix_summary: str,
    summarizer: str,
    trigger: CompactionTrigger,
    session: Session | None = None,
) -> Checkpoint:
    """``build_checkpoint`` for a caller on the event loop (which holds the
    session's lock, so nothing changes ``ctx`` meanwhile). For a big context the
    anchors of the summarised span, most of the work, are found a slice at a
    time on the loop, and the rest is built in a worker thread."""
    args = (ctx, terms, summary, turn_prefix_summary, summarizer, trigger, session)
    if len(ctx.entries) <= BIG_CONTEXT:
        return build_checkpoint(*args)
    span = summarized_span(ctx, terms.first_kept_seq)
    anchors = await finished(span_anchor_steps(span))
    return await asyncio.to_thread(build_checkpoint, *args, anchors)


def _summaries(
    ctx: SessionContext, terms: PlanTerms, summary: str, turn_prefix_summary: str
) -> tuple[str, str]:
    """The summary and turn-prefix summary the plan asks for, each cut to its
    budget (INVALID_ARGUMENT when one the plan needs is empty)."""
    if terms.has_history and not summary.strip():
        raise InvalidArgument(
            "summary is empty; send the LLM's answer to history_prompt",
            reason=ErrorReason.MISSING_FIELD,
            field="summary",
        )
    if terms.split_turn and not turn_prefix_summary.strip():
        raise InvalidArgument(
            "turn_prefix_summary is required: the plan splits a turn; send the LLM's "
            "answer to turn_prefix_prompt",
            reason=ErrorReason.MISSING_FIELD,
            field="turn_prefix_summary",
        )
    if not terms.has_history:
        summary = terms.previous_summary or NO_EARLIER_HISTORY
    else:
        summary, _ = ctx.trim_summary(summary.strip(), terms.history_max_tokens)
    if terms.split_turn:
        prefix, _ = ctx.trim_summary(turn_prefix_summary.strip(), terms.prefix_max_tokens)
    else:
        prefix = ""
    return summary, prefix
