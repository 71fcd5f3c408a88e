"""History-only messages: stored, never seen by the model, never a cut point.

The properties insert history-only messages at random places of random
transcripts (between a tool call and its result too) and check that the view,
the token counts, the cut point and the summarised history are exactly those
of the transcript without them.
"""

from __future__ import annotations

import itertools
from dataclasses import replace
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from ctxwarden.core.compaction.cut import find_cut_point, is_cut_point
from ctxwarden.core.compaction.fileops import collect_file_ops
from ctxwarden.core.compaction.serialize import serialize_messages
from ctxwarden.core.compaction.types import FileLists, FileToolNames
from ctxwarden.core.context import SessionContext
from ctxwarden.core.messages import ContentBlock, Message, Role, StopReason, Visibility
from ctxwarden.core.rollback import trailing_failed_turn
from ctxwarden.core.session import Session
from ctxwarden.core.tokens import HeuristicTokenizer
from ctxwarden.core.validation import check_message

TOK = HeuristicTokenizer()


def hidden(role: Role = Role.USER, text: str = "", **fields: object) -> Message:
    content = (ContentBlock.of_text(text),) if text else ()
    return Message(role, content, visibility=Visibility.HISTORY_ONLY, **fields)  # type: ignore[arg-type]


def text(role: Role, body: str, **fields: object) -> Message:
    return Message(role, (ContentBlock.of_text(body),), **fields)  # type: ignore[arg-type]


# -- random transcripts ------------------------------------------------------------

STEP = st.one_of(
    st.tuples(st.just("user"), st.integers(1, 400)),
    st.tuples(st.just("assistant"), st.integers(1, 400), st.integers(0, 3), st.booleans()),
    st.tuples(st.just("failed"), st.integers(0, 2)),
)


def transcript(steps: list[tuple[Any, ...]]) -> list[Message]:
    """Visible messages: users, assistants with 0-3 calls (their results follow,
    unless the call is left pending at the very end), failed assistants."""
    out: list[Message] = []
    ids = itertools.count()
    for i, step in enumerate(steps):
        kind = step[0]
        if kind == "user":
            out.append(text(Role.USER, "u" * (4 * int(step[1]))))
        elif kind == "failed":
            calls = tuple(
                ContentBlock.of_tool_call(f"f{next(ids)}", "read") for _ in range(int(step[1]))
            )
            out.append(Message(Role.ASSISTANT, calls, stop_reason=StopReason.ERROR))
        else:
            _, size, n, answered = step
            calls = tuple(
                ContentBlock.of_tool_call(f"c{next(ids)}", "read", '{"path": "a.py"}')
                for _ in range(int(n))
            )
            body = (ContentBlock.of_text("a" * (4 * int(size))), *calls)
            out.append(Message(Role.ASSISTANT, body, stop_reason=StopReason.TOOL_USE))
            last = i == len(steps) - 1
            if answered or not last:
                for c in calls:
                    out.append(text(Role.TOOL_RESULT, "r" * 40, tool_call_id=c.tool_call_id))
    return out


def with_hidden(visible: list[Message], where: list[int]) -> list[Message]:
    """``visible`` with a history-only message inserted before each index of ``where``
    (a user, an assistant or a tool result, some with content, some metadata only)."""
    out: list[Message] = []
    kinds = itertools.cycle(
        [
            hidden(metadata={"framework": "event"}),
            hidden(Role.ASSISTANT, "never shown"),
            hidden(Role.TOOL_RESULT, "late output", tool_call_id="c0"),
            hidden(Role.USER, "a note"),
        ]
    )
    spots = sorted(where)
    for i, m in enumerate(visible):
        while spots and spots[0] <= i:
            spots.pop(0)
            out.append(next(kinds))
        out.append(m)
    out.extend(next(kinds) for _ in spots)
    return out


def context(messages: list[Message]) -> SessionContext:
    ctx = SessionContext(Session(session_id="s"), None, (), TOK)
    ctx.apply_append(
        ctx.plan_append(messages, now_us=1, new_message_id=(str(i) for i in itertools.count()))
    )
    return ctx


def visible_only(messages: list[Message]) -> list[Message]:
    return [m for m in messages if not m.history_only]


CASES = st.tuples(st.lists(STEP, min_size=1, max_size=25), st.lists(st.integers(0, 60), max_size=8))


@settings(max_examples=150, deadline=None)
@given(CASES)
def test_the_view_and_tokens_are_those_without_the_history_only_messages(
    case: tuple[list[tuple[Any, ...]], list[int]],
) -> None:
    steps, where = case
    plain = transcript(steps)
    mixed = with_hidden(plain, where)
    a, b = context(plain), context(mixed)
    va, vb = a.model_input(), b.model_input()
    assert [m.text for m in vb.messages] == [m.text for m in va.messages]
    assert not any(m.history_only for m in vb.messages)
    assert [n.code for n in vb.notices] == [n.code for n in va.notices]
    assert vb.tokens.total_tokens == va.tokens.total_tokens
    assert b.context_tokens == a.context_tokens
    assert all(m.token_count == 0 for m in b.active_messages if m.history_only)
    assert len(b.active_messages) == len(mixed)  # stored all the same


@settings(max_examples=200, deadline=None)
@given(CASES, st.integers(0, 3000))
def test_cut_points_are_those_without_the_history_only_messages(
    case: tuple[list[tuple[Any, ...]], list[int]], keep: int
) -> None:
    steps, where = case
    plain = transcript(steps)
    mixed = with_hidden(plain, where)
    counted_plain = context(plain).active_messages
    counted = context(mixed).active_messages
    cut, cut_plain = find_cut_point(counted, keep), find_cut_point(counted_plain, keep)
    if cut_plain.first_kept_index == 0:
        # Nothing of the visible history is summarised; only history-only
        # messages may lie before the cut.
        assert all(m.history_only for m in counted[: cut.first_kept_index])
        return
    assert is_cut_point(counted[cut.first_kept_index])
    kept = counted[cut.first_kept_index :]
    assert [m.text for m in visible_only(kept)] == [
        m.text for m in counted_plain[cut_plain.first_kept_index :]
    ]
    assert cut.split_turn == cut_plain.split_turn
    # The kept tail shows the model exactly what the plain kept tail shows.
    tail, tail_plain = (
        context([replace(m, seq=0) for m in kept]),
        context([replace(m, seq=0) for m in counted_plain[cut_plain.first_kept_index :]]),
    )
    assert [n.code for n in tail.model_input().notices] == [
        n.code for n in tail_plain.model_input().notices
    ]
    summarised = counted[: cut.first_kept_index]
    summarised_plain = counted_plain[: cut_plain.first_kept_index]
    assert serialize_messages(summarised) == serialize_messages(summarised_plain)
    tools = FileToolNames()
    assert collect_file_ops(summarised, FileLists(), tools) == collect_file_ops(
        summarised_plain, FileLists(), tools
    )


def test_history_only_between_a_call_and_its_result_keeps_them_together() -> None:
    call = ContentBlock.of_tool_call("c1", "read")
    msgs = [
        text(Role.USER, "q"),
        Message(Role.ASSISTANT, (call,), stop_reason=StopReason.TOOL_USE),
        hidden(Role.USER, "framework bookkeeping"),
        text(Role.TOOL_RESULT, "out", tool_call_id="c1"),
    ]
    view = context(msgs).model_input()
    assert [m.role for m in view.messages] == [Role.USER, Role.ASSISTANT, Role.TOOL_RESULT]
    assert view.notices == ()


def test_a_history_only_tool_result_answers_nothing_and_a_call_in_one_calls_nothing() -> None:
    msgs = [
        text(Role.USER, "q"),
        Message(
            Role.ASSISTANT,
            (ContentBlock.of_tool_call("c1", "read"),),
            stop_reason=StopReason.TOOL_USE,
        ),
        hidden(Role.TOOL_RESULT, "not the answer", tool_call_id="c1"),
        hidden(Role.ASSISTANT, "", tool_call_id=""),
    ]
    ctx = context(msgs)
    view = ctx.model_input()
    # The call is still open: the view closes it with a synthetic result.
    assert [n.code for n in view.notices] == ["SYNTHETIC_TOOL_RESULT"]
    # ... and the real result may still come.
    ctx.apply_append(
        ctx.plan_append(
            [text(Role.TOOL_RESULT, "real", tool_call_id="c1")], now_us=2, new_message_id=iter("z")
        )
    )
    assert ctx.model_input().notices == ()


def test_history_only_messages_may_be_empty_and_are_never_rolled_back_as_failures() -> None:
    check_message(hidden(metadata={"k": "v"}), "messages[0]")
    check_message(hidden(Role.TOOL_RESULT), "messages[0]")  # no tool_call_id needed
    failed = Message(Role.ASSISTANT, (), stop_reason=StopReason.ERROR, seq=2)
    active = [text(Role.USER, "q", seq=1), failed, hidden(seq=3)]
    assert trailing_failed_turn(active) == [2]
