"""Building a checkpoint from a plan and the summariser's (or agent's) answer."""

from __future__ import annotations

from dataclasses import replace

from ctxwarden.core.anchors import span_anchor_steps
from ctxwarden.core.compaction.loss import assess_steps, reassess_steps, summarized_span
from ctxwarden.core.compaction.terms import PlanTerms
from ctxwarden.core.context import SessionContext
from ctxwarden.core.errors import InvalidArgument
from ctxwarden.core.reasons import ErrorReason
from ctxwarden.core.session import Checkpoint, CompactionTrigger, Session
from ctxwarden.core.stepwise import Steps, in_one_go
from ctxwarden.util import ids
from ctxwarden.util.loop_slices import in_slices

NO_EARLIER_HISTORY = "(no earlier history)"


def build_checkpoint_steps(
    ctx: SessionContext,
    terms: PlanTerms,
    summary: str,
    turn_prefix_summary: str,
    summarizer: str,
    trigger: CompactionTrigger,
    session: Session | None = None,
) -> Steps[Checkpoint]:
    """Build the checkpoint; trim the summary so it never pushes the rebuilt
    context over the threshold (nor past its own budget). In steps
    (core.stepwise): its loss report reads every message of the summarised span."""
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
    anchors = yield from span_anchor_steps(span)
    checkpoint = yield from assess_steps(ctx, checkpoint, after_session, span, anchors=anchors)
    after = ctx.tokens_with(checkpoint, session)  # session: with its new memory block
    threshold = ctx.threshold()
    if after > threshold:
        over = after - threshold
        room = max(ctx.tokenizer.count(checkpoint.summary) - over, 64)
        trimmed, changed = ctx.trim_summary(checkpoint.summary, room)
        if changed:
            checkpoint = replace(checkpoint, summary=trimmed)
            checkpoint = yield from reassess_steps(ctx, checkpoint, after_session, span, anchors)
            after = ctx.tokens_with(checkpoint, session)
    return replace(checkpoint, tokens_after=after)


build_checkpoint = in_one_go(build_checkpoint_steps)
"""``build_checkpoint_steps`` in one go."""


checkpoint_built = in_slices(build_checkpoint_steps)
"""``build_checkpoint_steps`` a slice at a time, for a caller on the event loop (it
holds the session's lock: no write changes ``ctx`` meanwhile). Not in a worker
thread, which would hold the GIL 5 ms at a time at every turn of the loop."""


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
