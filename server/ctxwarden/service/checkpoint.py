"""Building a checkpoint from a plan and the summariser's (or agent's) answer."""

from __future__ import annotations

from dataclasses import replace

from ctxwarden import ids
from ctxwarden.core.compaction.terms import PlanTerms
from ctxwarden.core.context import SessionContext
from ctxwarden.core.errors import InvalidArgument
from ctxwarden.core.reasons import ErrorReason
from ctxwarden.core.session import Checkpoint, CompactionTrigger

NO_EARLIER_HISTORY = "(no earlier history)"


def build_checkpoint(
    ctx: SessionContext,
    terms: PlanTerms,
    summary: str,
    turn_prefix_summary: str,
    summarizer: str,
    trigger: CompactionTrigger,
) -> Checkpoint:
    """Build the checkpoint; trim the summary so it never pushes the rebuilt
    context over the threshold (nor past its own budget)."""
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
        turn_prefix_summary, _ = ctx.trim_summary(
            turn_prefix_summary.strip(), terms.prefix_max_tokens
        )
    else:
        turn_prefix_summary = ""
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
    )
    after = ctx.tokens_with(checkpoint)
    threshold = ctx.threshold()
    if after > threshold:
        over = after - threshold
        room = max(ctx.tokenizer.count(checkpoint.summary) - over, 64)
        trimmed, changed = ctx.trim_summary(checkpoint.summary, room)
        if changed:
            checkpoint = replace(checkpoint, summary=trimmed)
            after = ctx.tokens_with(checkpoint)
    return replace(checkpoint, tokens_after=after)
