"""Building a checkpoint from a plan and the summariser's (or agent's) answer."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from ctxwarden import ids
from ctxwarden.core.context import SessionContext
from ctxwarden.core.errors import InvalidArgument
from ctxwarden.core.session import Checkpoint, CompactionTrigger

NO_EARLIER_HISTORY = "(no earlier history)"


def build_checkpoint(
    ctx: SessionContext,
    payload: dict[str, Any],
    summary: str,
    turn_prefix_summary: str,
    summarizer: str,
    trigger: CompactionTrigger,
) -> Checkpoint:
    """Build the checkpoint; trim the summary so it never pushes the rebuilt
    context over the threshold (nor past its own budget)."""
    if payload["has_history"] and not summary.strip():
        raise InvalidArgument(
            "summary is empty; send the LLM's answer to history_prompt",
            reason="MISSING_FIELD",
            field="summary",
        )
    if payload["split_turn"] and not turn_prefix_summary.strip():
        raise InvalidArgument(
            "turn_prefix_summary is required: the plan splits a turn; send the LLM's "
            "answer to turn_prefix_prompt",
            reason="MISSING_FIELD",
            field="turn_prefix_summary",
        )
    if not payload["has_history"]:
        summary = payload["previous_summary"] or NO_EARLIER_HISTORY
    else:
        summary, _ = ctx.trim_summary(summary.strip(), payload["history_max_tokens"])
    if payload["split_turn"]:
        turn_prefix_summary, _ = ctx.trim_summary(
            turn_prefix_summary.strip(), payload["prefix_max_tokens"]
        )
    else:
        turn_prefix_summary = ""
    checkpoint = Checkpoint(
        compaction_id=ids.new_id(),
        session_id=ctx.session.session_id,
        summary=summary,
        first_kept_seq=payload["first_kept_seq"],
        tokens_before=payload["tokens_before"],
        create_time_us=ids.now_us(),
        turn_prefix_summary=turn_prefix_summary,
        split_turn=payload["split_turn"],
        read_files=tuple(payload["read_files"]),
        modified_files=tuple(payload["modified_files"]),
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
