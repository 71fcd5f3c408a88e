"""Work that grows with a session is done in steps (core.stepwise), and no step
does more than a bounded share of it: the service runs such work on the event
loop a slice at a time, so a step is the most one call can hold the loop for
between two looks at the clock.

Measured here in units that do not depend on the machine: texts counted by the
tokenizer, or messages read, between two steps. Before compaction planning, the
extractive summariser and the anchors of a span were written in steps, a plan of
the whole history was a single step (every text of it counted at once)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import TypeVar, overload

from hypothesis import given, settings
from hypothesis import strategies as st

from ctxwarden.core.anchor_search import Targets, place, place_steps
from ctxwarden.core.anchors import ANCHOR_EVERY, span_anchor_steps, span_anchors
from ctxwarden.core.cache_prefix import BYTES_EVERY, CacheBreak, compare, compare_steps
from ctxwarden.core.clearing import plan_clearing_steps
from ctxwarden.core.compaction.chunks import SummaryWindow
from ctxwarden.core.compaction.extractive import (
    build_extractive_summary,
    extractive_summary_steps,
)
from ctxwarden.core.compaction.planner import Plan, plan_compaction_steps
from ctxwarden.core.compaction.types import FileToolNames, SummaryPrompt, SummaryRequest
from ctxwarden.core.context import SessionContext
from ctxwarden.core.messages import Message
from ctxwarden.core.stepwise import EVERY, Steps, finish
from tests.core.test_cache_prefix import shape
from tests.core.test_compaction_planner import TOK, answer, append, call, new_ctx, result, user

T = TypeVar("T")

MESSAGES = 2000
TEXTS_PER_STEP = 2 * EVERY + 8
"""Most texts one step may count: a chunk's serialised parts up to the next step,
and the few prompts measured when a chunk is done."""


@dataclass
class Counted:
    """A tokenizer's ``count`` that tells how many texts it counted."""

    texts: int = 0

    def count(self, text: str) -> int:
        self.texts += 1
        return TOK.count(text)


def run_counting(steps: Steps[T], units: Callable[[], int]) -> tuple[T, list[int]]:
    """Run ``steps`` to the end; the result and the ``units`` of work each step did."""
    per_step: list[int] = []
    before = units()
    while True:
        try:
            next(steps)
        except StopIteration as done:
            per_step.append(units() - before)
            return done.value, per_step
        per_step.append(units() - before)
        before = units()


def history(ctx: SessionContext, n: int) -> None:
    """``n`` messages of agent turns: ask, call, result, answer."""
    batch: list[Message] = []
    for i in range(n):
        turn, step = divmod(i, 4)
        if step == 0:
            batch.append(user(f"turn {turn}: please fix src/app_{turn}.py, see #{turn}"))
        elif step == 1:
            batch.append(call("", (f"c{turn}", "read", f'{{"path": "src/app_{turn}.py"}}')))
        elif step == 2:
            batch.append(result(f"c{turn}", f"def f_{turn}(x):\n    return x * {turn}", "read"))
        else:
            batch.append(answer(f"Fixed src/app_{turn}.py."))
        if len(batch) == 500:
            append(ctx, *batch)
            batch = []
    if batch:
        append(ctx, *batch)


def planning(ctx: SessionContext, window: SummaryWindow | None) -> Steps[Plan]:
    return plan_compaction_steps(
        session_id="s",
        active=ctx.active_messages,
        checkpoint=None,
        at_seq=ctx.session.last_seq,
        tokens_before=ctx.view_tokens(),
        keep_recent_tokens=200,
        reserve_tokens=ctx.policy.reserve_tokens,
        summarizer_limit=0,
        pinned_state="",
        instructions="",
        file_tools=FileToolNames(),
        window=window,
    )


def long_ctx(n: int = MESSAGES) -> SessionContext:
    ctx = new_ctx(context_window=10_000_000)
    history(ctx, n)
    return ctx


def test_a_chunked_plan_counts_a_bounded_number_of_texts_per_step() -> None:
    ctx = long_ctx()
    counted = Counted()
    window = SummaryWindow(4096, counted.count)
    plan, per_step = run_counting(planning(ctx, window), lambda: counted.texts)
    assert plan.chunks is not None and len(plan.chunks.starts) >= 5
    assert counted.texts >= MESSAGES  # every message's text was counted ...
    assert max(per_step) <= TEXTS_PER_STEP, per_step  # ... a bounded number per step
    assert plan == finish(planning(ctx, SummaryWindow(4096, TOK.count)))


class Reading(Sequence[T]):
    """Items (messages, anchors) that count how many were read, by index or by
    iteration."""

    def __init__(self, messages: Sequence[T]) -> None:
        self._messages = messages
        self.read = 0

    def __len__(self) -> int:
        return len(self._messages)

    @overload
    def __getitem__(self, i: int) -> T: ...
    @overload
    def __getitem__(self, i: slice) -> Sequence[T]: ...
    def __getitem__(self, i: int | slice) -> T | Sequence[T]:
        if isinstance(i, slice):
            return self._messages[i]  # a copy: the planner reads it on its own
        self.read += 1
        return self._messages[i]

    def __iter__(self) -> Iterator[T]:
        for m in self._messages:
            self.read += 1
            yield m


def test_a_plan_in_one_prompt_is_made_in_steps_all_along_the_history() -> None:
    """Without a window the whole history is serialised into one prompt: its file
    operations and its text are each gathered in steps of ``EVERY`` messages."""
    ctx = long_ctx()
    plan, per_step = run_counting(planning(ctx, None), lambda: 0)
    assert plan.history_prompt is not None and plan.chunks is None
    assert len(per_step) >= 2 * (len(plan.history) // EVERY)


@settings(max_examples=40, deadline=None)
@given(n=st.integers(min_value=0, max_value=400))
def test_span_anchors_read_at_most_a_step_of_messages_at_a_time(n: int) -> None:
    ctx = long_ctx(n)
    messages = Reading(ctx.active_messages)
    found, per_step = run_counting(span_anchor_steps(iter(messages)), lambda: messages.read)
    assert max(per_step) <= ANCHOR_EVERY
    assert found == span_anchors(ctx.active_messages)
    assert (n == 0) or found  # the history has paths, issues and tool calls


def test_the_extractive_summary_reads_a_bounded_number_of_messages_per_step() -> None:
    ctx = long_ctx()
    messages = Reading(ctx.active_messages)
    prompt = SummaryPrompt(system="", user="", max_tokens=2000)
    request = SummaryRequest(prompt, messages, "", "", (), (), "")
    summary, per_step = run_counting(extractive_summary_steps(request), lambda: messages.read)
    assert max(per_step) <= EVERY
    assert len(per_step) >= MESSAGES // EVERY
    assert summary == build_extractive_summary(
        SummaryRequest(prompt, tuple(ctx.active_messages), "", "", (), (), "")
    )


def test_a_view_built_ahead_in_steps_is_the_view_built_at_once() -> None:
    """A session only appended to has no view yet: a fork at its end builds it
    ahead (``view_steps``) before starting from it."""
    ahead = long_ctx(1000)
    at_once = SessionContext(ahead.session, None, ahead.active_messages, TOK)
    assert ahead.view_behind() == len(ahead.entries) == 1000
    assert len(list(ahead.view_steps(step=100))) == 10
    assert ahead.view_behind() == 0
    assert ahead.model_input(100) == at_once.model_input(100)
    assert ahead.model_input(100).digests == at_once.model_input(100).digests
    history(ahead, 8)  # then it grows again: only the new messages are behind
    assert ahead.view_behind() == 8


def test_a_clearing_stubs_a_bounded_number_of_tool_results_per_step() -> None:
    ctx = long_ctx()
    stubbed = Counted()

    def stub_tokens(m: Message) -> int:
        stubbed.count("[cleared]")
        return 1  # a stub far smaller than the result: the clearing is worth it

    decided, per_step = run_counting(
        plan_clearing_steps(
            ctx.entries, cleared_through=0, keep=2, at_least=1, stub_tokens=stub_tokens
        ),
        lambda: stubbed.texts,
    )
    assert decided is not None and decided.results == MESSAGES // 4 - 2
    assert stubbed.texts == decided.results and max(per_step) <= EVERY


def test_the_cache_ledger_measures_a_bounded_number_of_messages_per_step() -> None:
    """A first input measures every kept message; so does one whose messages are
    compared one by one (no fingerprints in common)."""
    kept = long_ctx().active_messages
    first = shape(kept)
    messages = Reading(kept)
    counted = replace(first, kept=messages)
    (report, measured), per_step = run_counting(compare_steps(None, counted), lambda: messages.read)
    assert messages.read == MESSAGES and max(per_step) <= BYTES_EVERY
    at_once, whole = compare(None, first)
    assert report == at_once and measured.kept_bytes == whole.kept_bytes > 0
    compared = Reading(kept)
    again = replace(shape(kept, digests=False), kept=compared)
    (shared, _), per_step = run_counting(compare_steps(first, again), lambda: compared.read)
    assert shared.reason is CacheBreak.NONE and shared.shared_tokens > 0
    assert max(per_step) <= 2 * EVERY + 2  # two messages read per comparison


def test_anchors_are_placed_a_bounded_number_at_a_time() -> None:
    found = span_anchors(long_ctx().active_messages)
    placed = Reading(found)
    targets = Targets(summary="src/app_1.py was fixed", kept_messages="see #3")
    where, per_step = run_counting(place_steps(placed, targets), lambda: placed.read)
    assert len(where) == len(found) > 10 * EVERY
    assert max(per_step) <= EVERY
    assert where == place(found, targets)
