"""Property tests: random agent transcripts compacted again and again through SessionContext.

Compactions are committed the way the service commits them (plan, a summary from
the "summariser", a checkpoint, ``apply_checkpoint``). After every step the view
must stay well formed; after every compaction the cut must be valid and, over the
whole chain, every message must be summarised exactly once or still be kept.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from ctxwarden.core.compaction.cut import find_cut_point
from ctxwarden.core.compaction.planner import TRIMMED_MARKER, Plan, plan_compaction
from ctxwarden.core.compaction.types import FileToolNames
from ctxwarden.core.context import SessionContext
from ctxwarden.core.errors import FailedPrecondition
from ctxwarden.core.messages import ContentBlock, Message, Role, StopReason
from ctxwarden.core.session import Checkpoint, ContextPolicy, Session, ToolDefinition
from ctxwarden.core.summary import SUMMARY_METADATA_KEY, summary_message
from ctxwarden.core.tokens import HeuristicTokenizer, count_message
from ctxwarden.core.view import SYNTHETIC_METADATA_KEY

TOK = HeuristicTokenizer()

CONTEXT_WINDOW = 3000
RESERVE = 500
SESSION = Session(
    session_id="s",
    system_prompt="You are a careful coding agent.",
    tools=(ToolDefinition("read", "read a file", '{"type":"object"}'),),
    pinned_state="task: refactor",
    policy=ContextPolicy(
        context_window=CONTEXT_WINDOW, reserve_tokens=RESERVE, keep_recent_tokens=800
    ),
)

SIZES = st.sampled_from([1, 2, 5, 20, 60, 150, 400, 900])
TOOLS = ["read", "write", "edit", "grep"]

RESULTS = st.lists(SIZES, max_size=3)
COMPACT = st.tuples(
    st.just("compact"), st.integers(0, 2500) | st.integers(0, 300), st.integers(1, 200)
)

OPS = st.one_of(
    st.tuples(st.just("user"), SIZES),
    st.tuples(st.just("user"), SIZES),
    # text size, sizes of the results of 0-3 calls, how many results arrive now
    # (None: all; the rest stay pending until the next non-compaction step)
    st.tuples(st.just("assistant"), SIZES, RESULTS, st.just(None)),
    st.tuples(st.just("assistant"), SIZES, RESULTS, st.just(None)),
    st.tuples(st.just("assistant"), SIZES, RESULTS, st.sampled_from([None, 0, 1, 2])),
    st.tuples(st.just("failed"), SIZES, st.integers(0, 1)),
    st.tuples(st.just("rollback")),
    COMPACT,
    COMPACT,
    # a compaction while the newest assistant message still waits for results
    st.tuples(
        st.just("pending+compact"),
        SIZES,
        st.lists(SIZES, min_size=1, max_size=3),
        st.integers(0, 2),
        st.integers(0, 600),
        st.integers(1, 200),
    ),
)


def text_of(size: int, tag: str) -> str:
    """About ``size`` tokens of text (heuristic tokenizer: 4 characters a token)."""
    return (tag + " ").ljust(4 * size, "x")


def is_summary(m: Message) -> bool:
    return SUMMARY_METADATA_KEY in m.metadata


def is_synthetic(m: Message) -> bool:
    return m.metadata.get(SYNTHETIC_METADATA_KEY) == "true"


@dataclass
class Run:
    ctx: SessionContext = field(default_factory=lambda: SessionContext(SESSION, None, (), TOK))
    ids: Iterator[str] = field(default_factory=lambda: (f"m{i}" for i in itertools.count()))
    clock: Iterator[int] = field(default_factory=lambda: itertools.count(1_000, 10))
    calls: Iterator[int] = field(default_factory=itertools.count)
    appended: list[int] = field(default_factory=list)
    rolled_back: set[int] = field(default_factory=set)
    covered: Counter[int] = field(default_factory=Counter)
    pending: list[tuple[str, str, int]] = field(default_factory=list)
    compactions: int = 0

    # -- steps --------------------------------------------------------------------------

    def append(self, *messages: Message) -> None:
        now = next(self.clock)
        plan = self.ctx.plan_append(messages, now_us=now, new_message_id=self.ids)
        self.ctx.apply_append(plan)
        self.appended.extend(m.seq for m in plan.new)

    def flush(self) -> None:
        """The results of pending calls arrive (they must still be accepted)."""
        if self.pending:
            self.append(*(tool_result(c, name, size) for c, name, size in self.pending))
            self.pending = []

    def step(self, op: tuple) -> None:  # type: ignore[type-arg]
        kind = op[0]
        if kind == "user":
            self.flush()
            self.append(Message(Role.USER, (ContentBlock.of_text(text_of(op[1], "user")),)))
        elif kind == "assistant":
            self.flush()
            _, size, result_sizes, answered_now = op
            calls = []
            for result_size in result_sizes:
                n = next(self.calls)
                name = TOOLS[n % len(TOOLS)]
                calls.append((f"call-{n}", name, result_size))
            blocks = tuple(
                ContentBlock.of_tool_call(c, name, f'{{"path": "f{int(c[5:]) % 7}.py"}}')
                for c, name, _ in calls
            )
            self.append(
                Message(
                    Role.ASSISTANT,
                    (ContentBlock.of_text(text_of(size, "assistant")), *blocks),
                    stop_reason=StopReason.TOOL_USE if calls else StopReason.STOP,
                )
            )
            k = len(calls) if answered_now is None else min(answered_now, len(calls) - 1)
            if calls and k < len(calls):
                self.pending = calls[k:]
            if k > 0:
                self.append(*(tool_result(c, name, s) for c, name, s in calls[:k]))
        elif kind == "failed":
            self.flush()
            _, size, n_calls = op
            blocks = tuple(
                ContentBlock.of_tool_call(f"fail-{next(self.calls)}", "write", '{"path": "z"}')
                for _ in range(n_calls)
            )
            self.append(
                Message(
                    Role.ASSISTANT,
                    (ContentBlock.of_text(text_of(size, "partial")), *blocks),
                    stop_reason=StopReason.ERROR,
                    error_message="overloaded",
                )
            )
        elif kind == "rollback":
            seqs = self.ctx.plan_rollback(None)
            event(f"rollback: removed {bool(seqs)}")
            self.ctx.apply_rollback(seqs, 0, next(self.clock))
            self.rolled_back.update(seqs)
        elif kind == "compact":
            self.compact(op[1], op[2])
        elif kind == "pending+compact":
            _, size, result_sizes, answered_now, keep, summary_chars = op
            self.step(("assistant", size, result_sizes, answered_now))
            self.compact(keep, summary_chars)
        else:  # pragma: no cover
            raise AssertionError(kind)

    def plan(self, keep: int) -> Plan:
        ctx = self.ctx
        return plan_compaction(
            session_id=ctx.session.session_id,
            active=ctx.active_messages,
            checkpoint=ctx.checkpoint,
            at_seq=ctx.session.last_seq,
            tokens_before=ctx.view_tokens(),
            keep_recent_tokens=keep,
            reserve_tokens=ctx.policy.reserve_tokens,
            summarizer_limit=0,
            pinned_state=ctx.session.pinned_state,
            instructions="",
            file_tools=FileToolNames(),
        )

    def compact(self, keep: int, summary_chars: int) -> None:
        ctx = self.ctx
        active = ctx.active_messages
        if find_cut_point(active, keep).first_kept_index == 0:
            with pytest.raises(FailedPrecondition) as err:
                self.plan(keep)
            assert err.value.reason == "NOTHING_TO_COMPACT"
            event("compaction: nothing to compact")
            return
        plan = self.plan(keep)
        self.compactions += 1
        event(f"compaction: round {min(self.compactions, 3)}")
        event(f"compaction: split turn {plan.split_turn}, history {bool(plan.history)}")
        event(f"compaction: pending calls {pending_call_seq(active) is not None}")
        n = self.compactions
        checkpoint = Checkpoint(
            compaction_id=f"c{n}",
            session_id=ctx.session.session_id,
            summary="S" * summary_chars
            if plan.history_prompt
            else (plan.previous_summary or "(no earlier history)"),
            first_kept_seq=plan.first_kept_seq,
            tokens_before=plan.tokens_before,
            create_time_us=n,
            turn_prefix_summary="P" if plan.split_turn else "",
            split_turn=plan.split_turn,
            read_files=plan.files.read,
            modified_files=plan.files.modified,
            at_seq=ctx.session.last_seq,
        )
        check_plan(plan, active, ctx.checkpoint)
        predicted = ctx.tokens_with(checkpoint)
        kept_alone = kept_tail_upper_bound(ctx, checkpoint, active)
        ctx.apply_checkpoint(checkpoint)
        # tokens_with predicts the rebuilt context exactly
        assert ctx.view_tokens() == predicted
        assert ctx.session.context_tokens == ctx.context_tokens
        # the rebuilt context fits whenever the kept tail (with the summary) fits
        event(f"compaction: kept tail fits {kept_alone <= ctx.threshold()}")
        if kept_alone <= ctx.threshold():
            assert ctx.view_tokens() <= ctx.threshold(), (kept_alone, ctx.view_tokens())
        for m in (*plan.history, *plan.turn_prefix):
            self.covered[m.seq] += 1
        self.check_after_compaction(plan, active)

    # -- properties ---------------------------------------------------------------------

    def check_after_compaction(self, plan: Plan, before: list[Message]) -> None:
        ctx = self.ctx
        kept = ctx.active_messages
        # the plan partitions the active messages: history, turn prefix, kept tail
        assert [m.seq for m in (*plan.history, *plan.turn_prefix, *kept)] == [m.seq for m in before]
        assert kept, "a compaction always keeps something"
        assert kept[0].seq == plan.first_kept_seq == ctx.first_kept_seq
        # the kept tail starts at a valid cut point
        assert kept[0].role in (Role.USER, Role.ASSISTANT)
        # every tool result in the kept tail has its call before it in the kept tail
        seen_calls: set[str] = set()
        for m in kept:
            if m.role is Role.TOOL_RESULT:
                assert m.tool_call_id in seen_calls, f"result seq {m.seq} lost its call"
            seen_calls.update(c.tool_call_id for c in m.tool_calls)
        # pending calls and everything after them are kept
        opened = pending_call_seq(before)
        if opened is not None:
            assert plan.first_kept_seq <= opened
        # no stored message before the cut is left in the input
        mi = ctx.model_input()
        assert is_summary(mi.messages[0]) and mi.messages[0].seq == 0
        assert mi.messages[0].metadata[SUMMARY_METADATA_KEY] == ctx.checkpoint.compaction_id  # type: ignore[union-attr]
        for m in mi.messages[1:]:
            assert not is_summary(m)
            assert is_synthetic(m) or m.seq >= plan.first_kept_seq
        # over the chain: summarised exactly once, or kept; never both, never neither
        kept_seqs = {m.seq for m in kept}
        for s in self.appended:
            if s in self.rolled_back:
                assert s not in kept_seqs and self.covered[s] == 0
                continue
            assert self.covered[s] <= 1, f"seq {s} summarised {self.covered[s]} times"
            assert (self.covered[s] == 1) != (s in kept_seqs), (
                f"seq {s}: summarised {self.covered[s]}x, kept {s in kept_seqs}"
            )

    def check_view(self) -> None:
        ctx = self.ctx
        mi = ctx.model_input()
        msgs = list(mi.messages)
        if ctx.checkpoint is not None:
            assert msgs and is_summary(msgs[0])
            msgs = msgs[1:]
        active = {m.seq: m for m in ctx.active_messages}
        stored = [m for m in msgs if not is_synthetic(m)]
        assert all(m.seq in active and not m.failed for m in stored)
        assert all(a.seq < b.seq for a, b in itertools.pairwise(stored))
        assert all(m.seq >= ctx.first_kept_seq for m in stored)
        # every tool call has exactly one result, right after its assistant message
        i = 0
        while i < len(msgs):
            m = msgs[i]
            assert m.role is not Role.TOOL_RESULT, f"tool result at {i} outside a run"
            i += 1
            if m.role is Role.ASSISTANT:
                run = []
                while i < len(msgs) and msgs[i].role is Role.TOOL_RESULT:
                    run.append(msgs[i].tool_call_id)
                    i += 1
                assert sorted(run) == sorted(c.tool_call_id for c in m.tool_calls)
        t = mi.tokens
        assert t.total_tokens == t.system_tokens + t.tools_tokens + t.summary_tokens + (
            t.message_tokens
        )
        # the rebuilt context from the checkpoint and the kept messages is identical
        restored = SessionContext(ctx.session, ctx.checkpoint, ctx.active_messages, TOK)
        assert restored.model_input() == mi


def tool_result(call_id: str, name: str, size: int) -> Message:
    return Message(
        Role.TOOL_RESULT,
        (ContentBlock.of_text(text_of(size, "output")),),
        tool_call_id=call_id,
        tool_name=name,
    )


def pending_call_seq(active: list[Message]) -> int | None:
    """Seq of the newest successful assistant message whose calls still wait for a
    result, when nothing but tool results and failed messages came after it."""
    answered = {m.tool_call_id for m in active if m.role is Role.TOOL_RESULT}
    for m in reversed(active):
        if m.role is Role.TOOL_RESULT or m.failed:
            continue
        if m.role is Role.ASSISTANT and any(c.tool_call_id not in answered for c in m.tool_calls):
            return m.seq
        return None
    return None


def kept_tail_upper_bound(
    ctx: SessionContext, checkpoint: Checkpoint, active: list[Message]
) -> int:
    """System, tools, the new summary and every kept message (plus a synthetic result
    per unanswered call): at least what the rebuilt view costs."""
    kept = [m for m in active if m.seq >= checkpoint.first_kept_seq]
    entry = {e.message.seq: e.token_count for e in ctx.entries}
    answered = {m.tool_call_id for m in kept if m.role is Role.TOOL_RESULT}
    unanswered = sum(
        1 for m in kept if not m.failed for c in m.tool_calls if c.tool_call_id not in answered
    )
    summary = count_message(summary_message(checkpoint, ctx.session.pinned_state), TOK)
    return (
        ctx.system_tokens
        + ctx.tools_tokens
        + summary
        + sum(entry[m.seq] for m in kept)
        + unanswered * ctx.synthetic_tokens
    )


def check_plan(plan: Plan, active: list[Message], previous: Checkpoint | None) -> None:
    assert plan.history or plan.turn_prefix
    assert (plan.history_prompt is None) == (not plan.history)
    assert (plan.turn_prefix_prompt is None) == (not plan.split_turn)
    assert plan.split_turn == bool(plan.turn_prefix)
    if plan.split_turn:
        assert plan.turn_prefix[0].role is Role.USER
        assert all(m.role is not Role.USER for m in plan.turn_prefix[1:])
    assert plan.previous_summary == (previous.carried_summary if previous else "")
    if plan.history_prompt is not None and previous is not None:
        assert f"<previous-summary>\n{previous.carried_summary}\n</previous-summary>" in (
            plan.history_prompt.user
        )
    if previous is not None:
        assert set(previous.read_files) <= set(plan.files.read) | set(plan.files.modified)
        assert set(previous.modified_files) <= set(plan.files.modified)
    assert not set(plan.files.read) & set(plan.files.modified)
    assert all(m.seq <= plan.at_seq for m in active)


@settings(max_examples=150, deadline=None)
@given(ops=st.lists(OPS, min_size=5, max_size=70))
def test_compaction_chains_keep_every_message_exactly_once(ops: list[tuple]) -> None:  # type: ignore[type-arg]
    run = Run()
    for op in ops:
        run.step(op)
        run.check_view()
    # a final compaction at a tiny budget, then the pending results arrive
    run.compact(0, 10)
    run.check_view()
    run.flush()
    run.check_view()


# -- trim_summary ------------------------------------------------------------------------------

MARKER_TOKENS = TOK.count(TRIMMED_MARKER.strip())


@settings(max_examples=150, deadline=None)
@given(
    text=st.lists(
        st.sampled_from(["a", "b", " ", "\n", "é", "😀", "word ", "## Goal\n", "x" * 50]),
        max_size=200,
    ).map("".join),
    budget=st.integers(MARKER_TOKENS, 600),
)
def test_trim_summary_fits_its_budget(text: str, budget: int) -> None:
    ctx = SessionContext(SESSION, None, (), TOK)
    out, trimmed = ctx.trim_summary(text, budget)
    assert TOK.count(out) <= budget
    if TOK.count(text) <= budget:
        assert (out, trimmed) == (text, False)
        return
    assert trimmed
    assert TRIMMED_MARKER.strip() in out
    if out != TRIMMED_MARKER.strip():
        assert out.endswith(TRIMMED_MARKER)
        kept = out.removesuffix(TRIMMED_MARKER)
        assert text.startswith(kept)
        assert len(kept) < len(text)


@settings(max_examples=50, deadline=None)
@given(
    summary=st.integers(0, 4000),
    keep=st.integers(0, 300),
)
def test_tokens_with_equals_the_rebuilt_context(summary: int, keep: int) -> None:
    ctx = SessionContext(SESSION, None, (), TOK)
    ids = (f"x{i}" for i in itertools.count())
    msgs = []
    for i in range(6):
        msgs.append(Message(Role.USER, (ContentBlock.of_text(text_of(30, f"u{i}")),)))
        msgs.append(
            Message(
                Role.ASSISTANT,
                (ContentBlock.of_tool_call(f"c{i}", "read", '{"path": "a"}'),),
                stop_reason=StopReason.TOOL_USE,
            )
        )
        msgs.append(tool_result(f"c{i}", "read", 40))
    ctx.apply_append(ctx.plan_append(msgs, now_us=1, new_message_id=ids))
    cut = find_cut_point(ctx.active_messages, keep)
    first = ctx.active_messages[cut.first_kept_index].seq
    checkpoint = Checkpoint(
        compaction_id="c1",
        session_id="s",
        summary="S" * summary,
        first_kept_seq=first,
        tokens_before=ctx.view_tokens(),
        create_time_us=1,
        turn_prefix_summary="P" if cut.split_turn else "",
        split_turn=cut.split_turn,
        read_files=("a",),
    )
    predicted = ctx.tokens_with(checkpoint)
    before = ctx.model_input()
    assert ctx.model_input() == before  # tokens_with changes nothing
    ctx.apply_checkpoint(checkpoint)
    assert ctx.view_tokens() == predicted
