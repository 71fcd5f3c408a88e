"""Run a scenario through a policy and a summariser, as the server would.

In process and without a database: the session lives in a ``SessionContext``;
after each step whose input crosses the compaction threshold it is compacted
the way ``BuildModelInput(auto_compact)`` compacts it (a layered clearing
first when the policy asks for one, else plan, summarise, checkpoint), with
the same functions the service uses, so every checkpoint carries the loss
report a server would store.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any

from ctxwarden.core.anchor_report import AnchorLocation, LossReport
from ctxwarden.core.anchors import CATEGORIES, AnchorCategory
from ctxwarden.core.compaction.planner import plan_compaction
from ctxwarden.core.compaction.terms import PlanTerms
from ctxwarden.core.compaction.types import FileToolNames
from ctxwarden.core.context import SessionContext
from ctxwarden.core.errors import FailedPrecondition
from ctxwarden.core.session import Checkpoint, CompactionTrigger, ContextPolicy, Session
from ctxwarden.core.tokens import HeuristicTokenizer
from ctxwarden.evaluation.scenarios import Scenario
from ctxwarden.evaluation.summarizers import CountingSummarizer
from ctxwarden.service.checkpoint import build_checkpoint
from ctxwarden.service.layered import build_clearing
from ctxwarden.service.summarize import run_summarizer, summarizer_window


@dataclass(slots=True)
class RunResult:
    """One scenario through one policy and summariser."""

    scenario: str
    policy: str
    summarizer: str
    messages: int = 0
    compactions: int = 0
    clearings: int = 0
    tokens_before: int = 0
    """Summed over the checkpoints: the input's tokens before each."""
    tokens_after: int = 0
    summarizer_calls: int = 0
    summarizer_tokens_in: int = 0
    summarizer_tokens_out: int = 0
    prefix_invalidations: int = 0
    """Checkpoints that changed the input's prefix (each one a provider cache miss)."""
    tokens_recached: int = 0
    """Tokens of the input after each such change: what the next call sends uncached."""
    by_category: dict[AnchorCategory, list[int]] = field(
        default_factory=lambda: {c: [0] * len(AnchorLocation) for c in CATEGORIES}
    )
    """Anchor counts by location (AnchorLocation - 1), summed over the checkpoints."""

    def add(self, checkpoint: Checkpoint) -> None:
        if checkpoint.clearing_only:
            self.clearings += 1
        else:
            self.compactions += 1
        self.tokens_before += checkpoint.tokens_before
        self.tokens_after += checkpoint.tokens_after
        self.prefix_invalidations += 1
        self.tokens_recached += checkpoint.tokens_after
        report = checkpoint.loss_report or LossReport()
        for counts in report.categories:
            row = self.by_category[counts.category]
            for i, n in enumerate(counts.by_location):
                row[i] += n

    def total(self, category: AnchorCategory) -> int:
        return sum(self.by_category[category])

    def lost(self, category: AnchorCategory) -> int:
        return self.by_category[category][AnchorLocation.LOST - 1]

    def survival(self, category: AnchorCategory) -> float | None:
        total = self.total(category)
        return None if total == 0 else (total - self.lost(category)) / total


async def run(
    scenario: Scenario,
    policy_name: str,
    policy: ContextPolicy,
    summarizer: CountingSummarizer,
    instructions: str = "",
) -> RunResult:
    result = RunResult(scenario.name, policy_name, summarizer.label)
    session = Session(
        session_id=f"eval-{scenario.name}",
        system_prompt=scenario.system_prompt,
        pinned_state=scenario.pinned_state,
        policy=policy,
    )
    ctx = SessionContext(session, None, [], HeuristicTokenizer())
    ids = (f"m{i}" for i in itertools.count(1))
    calls_before = (summarizer.calls, summarizer.tokens_in, summarizer.tokens_out)
    window = await summarizer_window(summarizer, 0)
    for n, step in enumerate(scenario.steps, 1):
        ctx.apply_append(ctx.plan_append(step, now_us=n * 1000, new_message_id=ids))
        result.messages += len(step)
        if ctx.view_tokens() > ctx.threshold():
            checkpoint = await _compact(ctx, summarizer, window, instructions, n)
            if checkpoint is not None:
                ctx.apply_checkpoint(checkpoint)
                result.add(checkpoint)
    result.summarizer_calls = summarizer.calls - calls_before[0]
    result.summarizer_tokens_in = summarizer.tokens_in - calls_before[1]
    result.summarizer_tokens_out = summarizer.tokens_out - calls_before[2]
    return result


async def _compact(
    ctx: SessionContext,
    summarizer: CountingSummarizer,
    window: Any,
    instructions: str,
    n: int,
) -> Checkpoint | None:
    trigger = CompactionTrigger.THRESHOLD
    cleared = build_clearing(ctx, trigger, f"k{n}", n * 1000 + 1)
    if cleared is not None:
        return cleared
    try:
        plan = plan_compaction(
            session_id=ctx.session.session_id,
            active=ctx.active_messages,
            checkpoint=ctx.checkpoint,
            at_seq=ctx.session.last_seq,
            tokens_before=ctx.view_tokens(),
            keep_recent_tokens=ctx.policy.keep_recent_tokens,
            reserve_tokens=ctx.policy.reserve_tokens,
            summarizer_limit=summarizer.max_output_tokens,
            pinned_state=ctx.session.pinned_state,
            instructions=instructions,
            file_tools=FileToolNames(),
            window=window,
        )
    except FailedPrecondition:
        return None  # nothing to compact: the kept messages alone are over the threshold
    summary, prefix = await run_summarizer(
        summarizer, plan, ctx.session.pinned_state, instructions, window
    )
    terms = PlanTerms.of(plan, trigger)
    return build_checkpoint(ctx, terms, summary, prefix, summarizer.name, trigger)
