"""Running the server-side summariser on a plan, and the window its prompts must fit."""

from __future__ import annotations

import asyncio

from ctxwarden.core.compaction.chunks import SummaryWindow, fit_summary
from ctxwarden.core.compaction.planner import Plan
from ctxwarden.core.compaction.prompts import history_prompt
from ctxwarden.core.compaction.types import (
    FileLists,
    SteppedSummarizer,
    Summarizer,
    SummarizerError,
    SummaryRequest,
)
from ctxwarden.core.errors import FailedPrecondition, Unavailable
from ctxwarden.core.models import HEURISTIC, lookup_model
from ctxwarden.core.reasons import ErrorReason
from ctxwarden.service.tokenizer_access import tokenizer_for
from ctxwarden.util.loop_slices import finished


async def summarizer_window(summarizer: Summarizer, configured: int) -> SummaryWindow | None:
    """The window of an LLM summariser: ``configured`` (--summarizer-context-window)
    or its model's window from the model table, measured with the model's
    tokenizer. None for a summariser without a model (extractive) and no
    configured window: it reads messages, not a prompt."""
    model = getattr(summarizer, "model", "")
    if not isinstance(model, str) or not model:
        if configured <= 0:
            return None
        return SummaryWindow(configured, (await tokenizer_for(HEURISTIC)).count)
    info = lookup_model(model)
    tokenizer = await tokenizer_for(info.tokenizer)
    return SummaryWindow(configured if configured > 0 else info.context_window, tokenizer.count)


async def summary_of(summarizer: Summarizer, request: SummaryRequest) -> str:
    """The summariser's answer to ``request``. One that computes without I/O (the
    extractive one) never lets the loop run while it awaits: its steps are run a
    slice at a time instead (a long history, or many chunks one after the other)."""
    if isinstance(summarizer, SteppedSummarizer):
        return await finished(summarizer.summary_steps(request))
    return await summarizer.summarize(request)


async def run_summarizer(
    summarizer: Summarizer, plan: Plan, pinned: str, instructions: str, window: SummaryWindow | None
) -> tuple[str, str]:
    """The history summary and the turn-prefix summary of ``plan`` (each "" when
    the plan has no such prompt); a chunked plan's chunks go one after the
    other, each prompt updating the running summary."""
    jobs = []
    if plan.history_prompt is not None:
        jobs.append(_history(summarizer, plan, pinned, instructions, window))
    if plan.turn_prefix_prompt is not None:
        jobs.append(
            summary_of(
                summarizer,
                SummaryRequest(
                    plan.turn_prefix_prompt,
                    plan.turn_prefix,
                    "",
                    pinned,
                    FileLists().read,
                    (),
                    instructions,
                    turn_prefix=True,
                ),
            )
        )
    try:
        results = await asyncio.gather(*jobs)
    except SummarizerError as exc:
        # A transient provider failure may pass (UNAVAILABLE: retry later);
        # a rejected request will not (FAILED_PRECONDITION: fix the config).
        error = Unavailable if exc.retryable else FailedPrecondition
        raise error(
            f"the summariser failed; nothing was changed: {exc}",
            reason=ErrorReason.SUMMARIZER_FAILED,
            metadata={"retryable": str(exc.retryable).lower()},
        ) from exc
    history = results[0] if plan.history_prompt is not None else ""
    prefix = results[-1] if plan.turn_prefix_prompt is not None else ""
    return history, prefix


async def _history(
    summarizer: Summarizer,
    plan: Plan,
    pinned: str,
    instructions: str,
    window: SummaryWindow | None,
) -> str:
    files = plan.files
    chunks = plan.chunks
    assert plan.history_prompt is not None
    if chunks is None or window is None:
        return await summary_of(
            summarizer,
            SummaryRequest(
                plan.history_prompt,
                plan.history,
                plan.previous_summary,
                pinned,
                files.read,
                files.modified,
                instructions,
            ),
        )
    shown = plan.shown_files or files
    bounds = (*chunks.starts, len(plan.history))
    running = plan.previous_summary
    for k, conversation in enumerate(chunks.conversations):
        prompt = history_prompt(
            conversation,
            previous_summary=running,
            pinned_state=pinned,
            files=shown,
            instructions=instructions,
            max_tokens=chunks.max_tokens,
        )
        answer = await summary_of(
            summarizer,
            SummaryRequest(
                prompt,
                plan.history[bounds[k] : bounds[k + 1]],
                running,
                pinned,
                files.read,
                files.modified,
                instructions,
            ),
        )
        running = fit_summary(answer.strip(), chunks.max_tokens, window.count)
    return running
