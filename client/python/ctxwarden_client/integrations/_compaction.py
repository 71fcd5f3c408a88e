"""Agent-side compaction for the adapters: your LLM writes the summary
(``PrepareCompaction``, the summariser, ``CommitCompaction``)."""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from typing import Protocol, TypeVar

from .._sync_client import Client
from ..v1 import context_service_pb2 as pb

__all__ = ["Summarizer", "compact_with"]

_T = TypeVar("_T")

Summarizer = Callable[[str, str, int], "str | Awaitable[str]"]
"""``(system, prompt, max_tokens) -> summary``: your LLM, sync or async."""


class Run(Protocol):
    """Runs a blocking client call off the event loop (e.g. ``asyncio.to_thread``)."""

    def __call__(self, fn: Callable[[], _T], /) -> Awaitable[_T]: ...


async def _answer(summarizer: Summarizer, prompt: pb.SummaryPrompt) -> str:
    answer = summarizer(prompt.system, prompt.user, prompt.max_tokens)
    if inspect.isawaitable(answer):
        return await answer
    return answer


async def compact_with(
    client: Client,
    session_id: str,
    summarizer: Summarizer,
    run: Run,
) -> None:
    """Compacts ``session_id`` with a summary that ``summarizer`` writes."""
    plan = await run(lambda: client.prepare_compaction(session_id))
    summary = await _answer(summarizer, plan.history_prompt)
    prefix = ""
    if plan.split_turn:
        prefix = await _answer(summarizer, plan.turn_prefix_prompt)
    await run(
        lambda: client.commit_compaction(
            session_id, plan.plan_id, summary, turn_prefix_summary=prefix
        )
    )
