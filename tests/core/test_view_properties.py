"""Property tests: random operations on a SessionContext keep the view well formed."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxwarden.core.context import SessionContext
from ctxwarden.core.errors import FailedPrecondition
from ctxwarden.core.messages import ContentBlock, Message, MessageState, Role, StopReason
from ctxwarden.core.session import ContextPolicy, Session, ToolDefinition
from ctxwarden.core.tokens import HeuristicTokenizer, count_message
from ctxwarden.core.view import (
    FAILED_MESSAGE_OMITTED,
    ORPHANED_TOOL_RESULT_OMITTED,
    SYNTHETIC_METADATA_KEY,
    SYNTHETIC_TOOL_RESULT,
    TOOL_OUTPUT_TRUNCATED,
    build_view,
)

SESSIONS = {
    "defaults": Session(session_id="s"),
    # Small tool-output limits so truncation happens; a system prompt and tools
    # so the fixed costs are not zero.
    "tight": Session(
        session_id="s",
        system_prompt="You are a careful agent.",
        tools=(ToolDefinition("grep", "search files", '{"type":"object"}'),),
        policy=ContextPolicy(tool_output_max_bytes=24, tool_output_max_lines=2),
    ),
}

OK_STOPS = [StopReason.UNSPECIFIED, StopReason.STOP, StopReason.LENGTH, StopReason.TOOL_USE]
FAILED_STOPS = [StopReason.ERROR, StopReason.ABORTED]

TEXT = st.lists(
    st.sampled_from(["a", "bc", "é", "😀", "\n", "line\n", "x" * 10]), min_size=1, max_size=8
).map("".join)

OPS = st.one_of(
    st.tuples(st.just("user"), TEXT),
    st.tuples(st.just("assistant"), st.integers(0, 3), st.sampled_from(OK_STOPS)),
    st.tuples(st.just("failed"), st.integers(0, 3), st.sampled_from(FAILED_STOPS)),
    st.tuples(
        st.just("result"),
        st.sampled_from(["open", "answered", "unknown"]),
        st.integers(0, 99),
        TEXT,
    ),
    # several results in one request (any one bad result rejects the whole request)
    st.tuples(
        st.just("results"),
        st.lists(st.tuples(st.sampled_from(["open", "answered", "unknown"]), st.integers(0, 99))),
    ),
    # an assistant message and some of its results in a single request
    st.tuples(st.just("turn"), st.integers(1, 3), st.integers(0, 3), TEXT),
    st.tuples(st.just("rollback"), st.none() | st.integers(0, 10_000)),
)


@dataclass
class Harness:
    ctx: SessionContext
    ids: Iterator[str] = field(default_factory=lambda: iter(str(i) for i in itertools.count()))
    clock: Iterator[int] = field(default_factory=lambda: itertools.count(1_000_000, 1000))
    call_counter: Iterator[int] = field(default_factory=itertools.count)
    rolled_back: set[int] = field(default_factory=set)

    # -- model of which calls are open/answered, computed from public state

    def calls(self) -> tuple[list[str], list[str]]:
        active = self.ctx.active_messages
        answered = {m.tool_call_id for m in active if m.role is Role.TOOL_RESULT}
        all_calls = [
            c.tool_call_id for m in active if m.role is Role.ASSISTANT for c in m.tool_calls
        ]
        return (
            [c for c in all_calls if c not in answered],
            [c for c in all_calls if c in answered],
        )

    def new_call(self) -> str:
        return f"call-{next(self.call_counter)}"

    def pick(self, kind: str, index: int) -> tuple[str, str | None] | None:
        """A call id of the wanted kind and the error reason plan_append must give."""
        open_calls, answered = self.calls()
        if kind == "unknown":
            # Stored; the view leaves it out (ORPHANED_TOOL_RESULT_OMITTED).
            return f"unknown-{next(self.call_counter)}", None
        pool = open_calls if kind == "open" else answered
        if not pool:
            return None
        reason = None if kind == "open" else "TOOL_CALL_ALREADY_ANSWERED"
        return pool[index % len(pool)], reason

    # -- operations

    def append(self, messages: list[Message], expect_error: str | None = None) -> None:
        ctx = self.ctx
        before = ctx.model_input()
        before_active = ctx.active_messages
        before_session = ctx.session
        now = next(self.clock)
        if expect_error is not None:
            with pytest.raises(FailedPrecondition) as err:
                ctx.plan_append(messages, now_us=now, new_message_id=self.ids)
            assert err.value.reason == expect_error
            assert ctx.model_input() == before
            assert ctx.session == before_session
            return
        plan = ctx.plan_append(messages, now_us=now, new_message_id=self.ids)
        # planning changes nothing
        assert ctx.model_input() == before
        assert ctx.active_messages == before_active
        assert ctx.session == before_session
        last = before_session.last_seq
        assert [m.seq for m in plan.new] == list(range(last + 1, last + 1 + len(messages)))
        assert plan.last_seq == last + len(messages)
        assert all(m.message_id and m.create_time_us == now for m in plan.new)
        assert all(m.token_count == count_message(m, ctx.tokenizer) for m in plan.new)
        ctx.apply_append(plan)
        assert plan.context_tokens == ctx.context_tokens
        assert ctx.session.last_seq == plan.last_seq
        assert ctx.active_messages == [*before_active, *plan.new]

    def tool_calls(self, n: int) -> tuple[ContentBlock, ...]:
        return tuple(
            ContentBlock.of_tool_call(c, "tool", '{"q": 1}')
            for c in (self.new_call() for _ in range(n))
        )

    def run(self, op: tuple) -> None:  # type: ignore[type-arg]
        kind = op[0]
        if kind == "user":
            self.append([Message(Role.USER, (ContentBlock.of_text(op[1]),))])
        elif kind in ("assistant", "failed"):
            _, n, stop = op
            text = () if kind == "failed" else (ContentBlock.of_text("thinking aloud"),)
            self.append(
                [
                    Message(
                        Role.ASSISTANT,
                        (*text, *self.tool_calls(n)),
                        stop_reason=stop,
                        error_message="boom" if kind == "failed" else "",
                    )
                ]
            )
        elif kind == "result":
            _, which, index, text = op
            picked = self.pick(which, index)
            if picked is not None:
                self.append([tool_result(picked[0], text)], picked[1])
        elif kind == "results":
            msgs: list[Message] = []
            error: str | None = None
            used: set[str] = set()
            for which, index in op[1]:
                picked = self.pick(which, index)
                if picked is None:
                    continue
                call_id, reason = picked
                if call_id in used and reason is None:
                    reason = "TOOL_CALL_ALREADY_ANSWERED"
                used.add(call_id)
                msgs.append(tool_result(call_id, "r" * index))
                if error is None:
                    error = reason
            if msgs:
                self.append(msgs, error)
        elif kind == "turn":
            _, n, k, text = op
            calls = self.tool_calls(n)
            msgs = [Message(Role.ASSISTANT, calls, stop_reason=StopReason.TOOL_USE)]
            msgs += [tool_result(c.tool_call_id, text) for c in calls[:k]]
            self.append(msgs)
        elif kind == "rollback":
            self.rollback(op[1])
        else:  # pragma: no cover
            raise AssertionError(kind)

    def rollback(self, raw: int | None) -> None:
        ctx = self.ctx
        to_seq = None if raw is None else raw % (ctx.session.last_seq + 1)
        before = ctx.model_input()
        active = ctx.active_messages
        seqs = ctx.plan_rollback(to_seq)
        assert ctx.model_input() == before
        assert seqs == sorted(seqs)
        assert set(seqs) <= {m.seq for m in active}
        by_seq = {m.seq: m for m in active}
        if to_seq is None:
            # only failed assistant messages and tool results
            assert all(by_seq[s].failed or by_seq[s].role is Role.TOOL_RESULT for s in seqs)
            # within the trailing run: what stays after the first removed message
            # is a tool result answering a call of a successful (kept) message
            if seqs:
                failed_calls = {
                    c.tool_call_id for s in seqs if by_seq[s].failed for c in by_seq[s].tool_calls
                }
                for m in active:
                    if m.seq >= seqs[0] and m.seq not in seqs:
                        assert m.role is Role.TOOL_RESULT
                        assert m.tool_call_id not in failed_calls
        else:
            assert seqs == [m.seq for m in active if m.seq > to_seq]
        ctx.apply_rollback(seqs, 0, next(self.clock))
        self.rolled_back.update(seqs)
        assert [m.seq for m in ctx.active_messages] == [m.seq for m in active if m.seq not in seqs]
        assert ctx.plan_rollback(to_seq) == []


def tool_result(call_id: str, text: str) -> Message:
    return Message(
        Role.TOOL_RESULT, (ContentBlock.of_text(text),), tool_call_id=call_id, tool_name="tool"
    )


def is_synthetic(m: Message) -> bool:
    return m.metadata.get(SYNTHETIC_METADATA_KEY) == "true"


def expected_view_seqs(active: list[Message]) -> list[int]:
    """Stored messages that should be in the view, computed independently."""
    call_owner: dict[str, Message] = {}
    for m in active:
        for c in m.tool_calls:
            call_owner[c.tool_call_id] = m
    out = []
    for m in active:
        if m.failed:
            continue
        if m.role is Role.TOOL_RESULT:
            owner = call_owner.get(m.tool_call_id)
            if owner is None or owner.failed:
                continue
            # a user or (successful) assistant message after the call closes it
            closed = any(
                owner.seq < o.seq < m.seq and o.role is not Role.TOOL_RESULT and not o.failed
                for o in active
            )
            if closed:
                continue
        out.append(m.seq)
    return out


def check_invariants(h: Harness) -> None:
    ctx = h.ctx
    mi = ctx.model_input()
    assert ctx.model_input() == mi  # deterministic
    # The view resumed from earlier calls equals one built from scratch.
    fresh = build_view(ctx.entries, ctx.synthetic_tokens, ctx.policy.keep_tool_results, None)
    summary = 1 if ctx.checkpoint is not None else 0
    assert len(mi.messages) == summary + len(fresh.messages)
    assert mi.messages[summary:] == fresh.messages
    assert mi.notices == fresh.notices
    assert mi.tokens.message_tokens == fresh.message_tokens
    msgs = mi.messages
    active = ctx.active_messages
    by_seq = {m.seq: m for m in active}

    # synthetic messages are the only unsaved ones
    stored = [m for m in msgs if not is_synthetic(m)]
    synthetic = [m for m in msgs if is_synthetic(m)]
    assert all(m.seq == 0 for m in synthetic)
    assert all(m.seq > 0 for m in stored)

    # no rolled-back or failed message; only active ones
    for m in stored:
        assert m.seq not in h.rolled_back
        assert m.seq in by_seq
        assert not m.failed
        assert m.state is MessageState.ACTIVE
    assert all(m.seq not in h.rolled_back for m in active)

    # stored messages in strictly increasing seq order
    seqs = [m.seq for m in stored]
    assert all(a < b for a, b in itertools.pairwise(seqs))
    assert seqs == expected_view_seqs(active)

    # every tool result sits in the run right after the assistant holding its call,
    # and every call in the view has exactly one result
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

    # synthetic results are error results for unanswered calls
    for m in synthetic:
        assert m.is_error
        assert m.text == "No result provided"
        assert m.token_count == ctx.synthetic_tokens

    # tokens
    t = mi.tokens
    assert t.total_tokens == t.system_tokens + t.tools_tokens + t.summary_tokens + t.message_tokens
    assert (t.system_tokens, t.tools_tokens, t.summary_tokens) == (
        ctx.system_tokens,
        ctx.tools_tokens,
        0,
    )
    entry_tokens = {e.message.seq: e.token_count for e in ctx.entries}
    assert t.message_tokens == (
        sum(entry_tokens[m.seq] for m in stored) + ctx.synthetic_tokens * len(synthetic)
    )
    assert ctx.context_tokens == ctx.fixed_tokens + sum(entry_tokens.values())
    assert t.estimated
    assert mi.last_seq == ctx.session.last_seq

    # notices account for every change
    counts = {code: 0 for code in (FAILED_MESSAGE_OMITTED, ORPHANED_TOOL_RESULT_OMITTED)}
    for n in mi.notices:
        if n.code in counts:
            counts[n.code] += 1
    assert counts[FAILED_MESSAGE_OMITTED] == sum(1 for m in active if m.failed)
    assert counts[ORPHANED_TOOL_RESULT_OMITTED] == sum(
        1 for m in active if m.role is Role.TOOL_RESULT and m.seq not in seqs
    )
    assert sum(1 for n in mi.notices if n.code == SYNTHETIC_TOOL_RESULT) == len(synthetic)
    truncated = {n.seq for n in mi.notices if n.code == TOOL_OUTPUT_TRUNCATED}
    for m in stored:
        if m.seq in truncated:
            assert m.text != by_seq[m.seq].text
            assert f"seq {m.seq}" in m.text
        else:
            assert m == by_seq[m.seq]


@pytest.mark.parametrize("session_name", sorted(SESSIONS))
@settings(max_examples=200, deadline=None)
@given(ops=st.lists(OPS, min_size=4, max_size=40))
def test_random_operations_keep_the_view_well_formed(
    session_name: str,
    ops: list[tuple],  # type: ignore[type-arg]
) -> None:
    h = Harness(SessionContext(SESSIONS[session_name], None, (), HeuristicTokenizer()))
    check_invariants(h)
    for op in ops:
        h.run(op)
        check_invariants(h)


@settings(max_examples=200, deadline=None)
@given(ops=st.lists(OPS, min_size=4, max_size=40))
def test_rebuilding_from_kept_messages_gives_the_same_view(ops: list[tuple]) -> None:  # type: ignore[type-arg]
    """A context restored from its active messages (as after a restart) sees the same input."""
    session = SESSIONS["tight"]
    h = Harness(SessionContext(session, None, (), HeuristicTokenizer()))
    for op in ops:
        h.run(op)
    restored = SessionContext(h.ctx.session, None, h.ctx.active_messages, HeuristicTokenizer())
    assert restored.model_input() == h.ctx.model_input()
    assert restored.context_tokens == h.ctx.context_tokens


def test_plan_without_apply_leaves_context_unchanged() -> None:
    ctx = SessionContext(Session(session_id="s"), None, (), HeuristicTokenizer())
    ids = iter(str(i) for i in itertools.count())
    plan = ctx.plan_append(
        [
            Message(Role.USER, (ContentBlock.of_text("hi"),)),
            Message(
                Role.ASSISTANT,
                (ContentBlock.of_tool_call("c1", "t"),),
                stop_reason=StopReason.TOOL_USE,
            ),
        ],
        now_us=1,
        new_message_id=ids,
    )
    ctx.apply_append(plan)
    before = ctx.model_input()
    for _ in range(3):
        ctx.plan_append([tool_result("c1", "out")], now_us=2, new_message_id=ids)
    assert ctx.model_input() == before
    # the call is still open: its result is still accepted exactly once
    plan = ctx.plan_append([tool_result("c1", "out")], now_us=3, new_message_id=ids)
    ctx.apply_append(plan)
    with pytest.raises(FailedPrecondition) as err:
        ctx.plan_append([tool_result("c1", "again")], now_us=4, new_message_id=ids)
    assert err.value.reason == "TOOL_CALL_ALREADY_ANSWERED"


def test_rollback_without_to_seq_is_idempotent() -> None:
    ctx = SessionContext(Session(session_id="s"), None, (), HeuristicTokenizer())
    ids = iter(str(i) for i in itertools.count())
    msgs = [
        Message(Role.USER, (ContentBlock.of_text("hi"),)),
        Message(
            Role.ASSISTANT,
            (ContentBlock.of_tool_call("c1", "t"),),
            stop_reason=StopReason.ERROR,
            error_message="overloaded",
        ),
        tool_result("c1", "out"),
        Message(Role.ASSISTANT, (), stop_reason=StopReason.ABORTED),
    ]
    ctx.apply_append(ctx.plan_append(msgs, now_us=1, new_message_id=ids))
    seqs = ctx.plan_rollback(None)
    assert seqs == [2, 3, 4]
    ctx.apply_rollback(seqs, 1, 2)
    assert ctx.plan_rollback(None) == []
    assert [m.seq for m in ctx.active_messages] == [1]
    assert ctx.session.consecutive_failures == 1
    # the rolled-back call is gone: a late result for it is stored, not shown
    ctx.apply_append(ctx.plan_append([tool_result("c1", "late")], now_us=3, new_message_id=ids))
    view = ctx.model_input()
    assert [m.seq for m in view.messages] == [1]
    assert [n.code for n in view.notices] == ["ORPHANED_TOOL_RESULT_OMITTED"]
