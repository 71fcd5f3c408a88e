"""The steps of a chunked compaction, after the first: each one's plan, made
from the terms stored with the step before and the running summary it left."""

from __future__ import annotations

from dataclasses import replace

from ctxwarden.core.compaction.chunks import (
    SummaryWindow,
    fit_file_lists,
    fit_prompt,
    fit_summary,
    fit_turn_prefix,
)
from ctxwarden.core.compaction.history_index import messages_between
from ctxwarden.core.compaction.planner import Plan
from ctxwarden.core.compaction.prompts import history_prompt, turn_prefix_prompt
from ctxwarden.core.compaction.serialize import serialize_messages
from ctxwarden.core.compaction.terms import PlanTerms
from ctxwarden.core.compaction.types import FileLists, SummaryPrompt
from ctxwarden.core.context import SessionContext
from ctxwarden.core.messages import Message


def after_step(terms: PlanTerms, answer: str, count: SummaryWindow) -> PlanTerms:
    """The terms of the next step once ``answer`` summarised this one."""
    running = fit_summary(answer.strip(), terms.chunk_max_tokens, count.count)
    return replace(terms, step=terms.step + 1, running_summary=running)


def step_plan(
    session_id: str,
    terms: PlanTerms,
    ctx: SessionContext,
    window: SummaryWindow,
    pinned_state: str,
) -> Plan:
    """The plan of step ``terms.step`` (from 1): its chunk's prompt with the
    running summary (the previous summary on step 1); the final step also has
    the split turn's prefix prompt."""
    k = terms.step
    lo = terms.chunk_seqs[k - 1]
    hi = terms.chunk_seqs[k] if k < len(terms.chunk_seqs) else terms.history_end_seq
    chunk = messages_between(ctx, lo, hi)
    running = terms.running_summary if k > 1 else terms.previous_summary
    files = FileLists(terms.read_files, terms.modified_files)
    shown = fit_file_lists(files, window)

    def make(text: str) -> SummaryPrompt:
        return history_prompt(
            text,
            previous_summary=running,
            pinned_state=pinned_state,
            files=shown,
            instructions=terms.instructions,
            max_tokens=terms.chunk_max_tokens,
        )

    prompt = fit_prompt(serialize_messages(chunk), window, make)
    final = k >= len(terms.chunk_seqs)
    prefix: tuple[Message, ...] = ()
    prefix_prompt = None
    if final and terms.split_turn:
        prefix = messages_between(ctx, terms.history_end_seq, terms.first_kept_seq)
        prefix_prompt = fit_turn_prefix(
            serialize_messages(prefix),
            window,
            lambda text, budget: turn_prefix_prompt(text, max_tokens=budget),
            terms.prefix_max_tokens,
        )
    return Plan(
        session_id=session_id,
        first_kept_seq=terms.first_kept_seq,
        split_turn=terms.split_turn,
        tokens_before=terms.tokens_before,
        previous_summary=running,
        history=chunk,
        turn_prefix=prefix,
        history_prompt=prompt,
        turn_prefix_prompt=prefix_prompt,
        files=files,
        base_compaction_id=terms.base_compaction_id,
        covered_digest=terms.covered_digest,
        at_seq=terms.at_seq,
        pinned_state=pinned_state,
        instructions=terms.instructions,
        context_window=terms.context_window,
        shown_files=shown,
        chunk_end_seq=0 if final else hi,
    )
