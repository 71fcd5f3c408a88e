"""Property tests of layered clearing (core.clearing) on a SessionContext."""

from __future__ import annotations

import itertools
from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from ctxwarden.core.clearing import is_cleared, plan_clearing
from ctxwarden.core.context import SessionContext
from ctxwarden.core.messages import ContentBlock, Message, Role, StopReason
from ctxwarden.core.session import CLEARING_SUMMARIZER, Checkpoint, ContextPolicy, Session
from ctxwarden.core.tokens import HeuristicTokenizer
from ctxwarden.core.view import TOOL_OUTPUT_STUBBED, make_stub

# A turn: a user message or not, then a tool call whose result has this many characters.
TURNS = st.lists(st.tuples(st.booleans(), st.integers(0, 3000)), min_size=1, max_size=25)


def _context(at_least: int, keep: int) -> SessionContext:
    policy = ContextPolicy(clear_tool_results_at_least=at_least, clear_tool_results_keep=keep)
    return SessionContext(Session(session_id="s", policy=policy), None, [], HeuristicTokenizer())


def _append(ctx: SessionContext, turns: list[tuple[bool, int]], start: int) -> None:
    ids = (str(i) for i in itertools.count(start * 1000))
    for i, (with_user, size) in enumerate(turns, start):
        msgs = [Message(Role.USER, (ContentBlock.of_text(f"step {i}"),))] if with_user else []
        call = ContentBlock.of_tool_call(f"c{i}", "read", '{"path": "a.py"}')
        msgs.append(Message(Role.ASSISTANT, (call,), stop_reason=StopReason.TOOL_USE))
        msgs.append(
            Message(
                Role.TOOL_RESULT,
                (ContentBlock.of_text("x" * size),),
                tool_call_id=f"c{i}",
                tool_name="read",
            )
        )
        ctx.apply_append(ctx.plan_append(msgs, now_us=1_000_000 + i, new_message_id=ids))


def _clear(ctx: SessionContext, n: int) -> Checkpoint | None:
    policy = ctx.policy
    decided = plan_clearing(
        ctx.entries,
        cleared_through=ctx.cleared_through,
        keep=policy.clear_tool_results_keep,
        at_least=policy.clear_tool_results_at_least,
        stub_tokens=lambda m: make_stub(m, ctx.profile).token_count,
    )
    if decided is None:
        return None
    checkpoint = Checkpoint(
        compaction_id=f"k{n}",
        session_id="s",
        summary="",
        first_kept_seq=ctx.first_kept_seq,
        tokens_before=ctx.view_tokens(),
        create_time_us=n,
        summarizer=CLEARING_SUMMARIZER,
        at_seq=ctx.session.last_seq,
        tool_results_cleared_through=decided.through_seq,
        tool_results_cleared=decided.results,
        tool_result_tokens_cleared=decided.tokens_freed,
    )
    return replace(checkpoint, tokens_after=ctx.tokens_with(checkpoint))


@settings(max_examples=40, deadline=None)
@given(
    first=TURNS,
    later=TURNS,
    at_least=st.integers(1, 3000),
    keep=st.integers(1, 4),
)
def test_clearing_frees_enough_keeps_the_newest_and_then_only_grows(
    first: list[tuple[bool, int]], later: list[tuple[bool, int]], at_least: int, keep: int
) -> None:
    ctx = _context(at_least, keep)
    _append(ctx, first, 0)
    before = ctx.model_input()
    checkpoint = _clear(ctx, 1)
    results = [m for m in ctx.active_messages if m.role is Role.TOOL_RESULT]
    if checkpoint is None:
        # Declined only when clearing all but the newest `keep` frees too little.
        old = results[: max(len(results) - keep, 0)]
        freed = sum(
            e.token_count - make_stub(e.original, ctx.profile).token_count
            for e in ctx.entries
            if e.original in old
        )
        assert freed < at_least
        return
    # One step frees at least the configured amount, exactly as the input shrinks.
    assert checkpoint.tool_result_tokens_cleared >= at_least
    assert checkpoint.clearing_only and checkpoint.summary == ""
    ctx.apply_checkpoint(checkpoint)
    after = ctx.model_input()
    assert before.tokens.total_tokens - after.tokens.total_tokens == (
        checkpoint.tool_result_tokens_cleared
    )
    # The newest `keep` results stay whole; every older one is a stub.
    through = checkpoint.tool_results_cleared_through
    assert [is_cleared(m, through) for m in results] == [
        i < len(results) - keep for i in range(len(results))
    ]
    stubbed = {n.seq for n in after.notices if n.code == TOOL_OUTPUT_STUBBED}
    assert stubbed == {m.seq for m in results[: len(results) - keep]}
    assert not any(m.metadata for m in after.messages)  # no summary message without a summary
    # Nothing more to clear right away: the next clearing needs new results.
    assert _clear(ctx, 2) is None
    # Between clearings the input only grows at the end...
    _append(ctx, later, len(first))
    grown = ctx.model_input()
    assert grown.messages[: len(after.messages)] == after.messages
    # ...and a restore (checkpoint + kept messages) shows the same input.
    restored = SessionContext(
        ctx.session, checkpoint, ctx.active_messages, HeuristicTokenizer()
    ).model_input()
    assert restored.messages == grown.messages and restored.digests == grown.digests
