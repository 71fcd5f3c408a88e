"""Running the server-side summariser on a plan, and the window its prompts must fit."""

from __future__ import annotations

import asyncio

from ctxwarden.core.compaction.chunks import SummaryWindow
from ctxwarden.core.compaction.planner import Plan
from ctxwarden.core.compaction.types import (
    FileLists,
    Summarizer,
    SummarizerError,
    SummaryRequest,
)
from ctxwarden.core.errors import FailedPrecondition, Unavailable
from ctxwarden.core.models import HEURISTIC, lookup_model
from ctxwarden.core.reasons import ErrorReason
from ctxwarden.service.tokenizer_access import tokenizer_for


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


async def run_summarizer(
    summarizer: Summarizer, plan: Plan, pinned: str, instructions: str, *, progress: str = ""
) -> tuple[str, str]:
    """The history summary and the turn-prefix summary of ``plan`` (each "" when
    the plan has no such prompt). ``progress`` is added to a failure's message."""
    files = plan.files
    jobs = []
    if plan.history_prompt is not None:
        jobs.append(
            summarizer.summarize(
                SummaryRequest(
                    plan.history_prompt,
                    plan.history,
                    plan.previous_summary,
                    pinned,
                    files.read,
                    files.modified,
                    instructions,
                )
            )
        )
    if plan.turn_prefix_prompt is not None:
        jobs.append(
            summarizer.summarize(
                SummaryRequest(
                    plan.turn_prefix_prompt,
                    plan.turn_prefix,
                    "",
                    pinned,
                    FileLists().read,
                    (),
                    instructions,
                    turn_prefix=True,
                )
            )
        )
    try:
        results = await asyncio.gather(*jobs)
    except SummarizerError as exc:
        # A transient provider failure may pass (UNAVAILABLE: retry later);
        # a rejected request will not (FAILED_PRECONDITION: fix the config).
        error = Unavailable if exc.retryable else FailedPrecondition
        raise error(
            f"the summariser failed; {progress or 'nothing was changed'}: {exc}",
            reason=ErrorReason.SUMMARIZER_FAILED,
            metadata={"retryable": str(exc.retryable).lower()},
        ) from exc
    history = results[0] if plan.history_prompt is not None else ""
    prefix = results[-1] if plan.turn_prefix_prompt is not None else ""
    return history, prefix
