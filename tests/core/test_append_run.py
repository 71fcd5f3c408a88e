"""Planning a run of requests in one pass (core.append.planned_run) gives exactly
the plans of planning each request on the session the previous one left."""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxwarden.core.append import AppendPlan, planned_run
from ctxwarden.core.context import SessionContext
from ctxwarden.core.errors import CtxwardenError
from ctxwarden.core.messages import ContentBlock, Message, Role, StopReason, Usage, Visibility
from ctxwarden.core.session import Session
from tests.core.test_context import TOK, call, tool_result, user

CALL_IDS = ("c1", "c2", "c3")
MESSAGE_IDS = ("", "", "m1", "m2", "m3")


def _ids() -> Iterator[str]:
    return (f"gen-{i}" for i in itertools.count())


def _assistant(text: str, prompt: int, calls: Sequence[str]) -> Message:
    blocks = (ContentBlock.of_text(text), *(ContentBlock.of_tool_call(c, "t") for c in calls))
    return Message(
        Role.ASSISTANT,
        blocks,
        stop_reason=StopReason.TOOL_USE if calls else StopReason.STOP,
        usage=Usage(input_tokens=prompt, output_tokens=5) if prompt else None,
    )


@st.composite
def messages(draw: st.DrawFn) -> Message:
    kind = draw(st.sampled_from(["user", "assistant", "call", "result", "history"]))
    text = draw(st.text("abc de\n", min_size=1, max_size=30))
    if kind == "user":
        msg = user(text)
    elif kind == "assistant":
        msg = _assistant(text, draw(st.sampled_from([0, 7, 40, 300])), ())
    elif kind == "call":
        picked = draw(st.lists(st.sampled_from(CALL_IDS), min_size=1, max_size=2, unique=True))
        msg = _assistant(text, draw(st.sampled_from([0, 25])), picked)
    elif kind == "result":
        msg = tool_result(draw(st.sampled_from(CALL_IDS)), text * draw(st.integers(1, 40)))
    else:
        msg = Message(Role.USER, (ContentBlock.of_text(text),), visibility=Visibility.HISTORY_ONLY)
    return Message(
        msg.role,
        msg.content,
        message_id=draw(st.sampled_from(MESSAGE_IDS)),
        stop_reason=msg.stop_reason,
        usage=msg.usage,
        tool_call_id=msg.tool_call_id,
        visibility=msg.visibility,
    )


REQUESTS = st.lists(st.lists(messages(), min_size=1, max_size=4), min_size=1, max_size=5)


def _ctx(history: Sequence[Message]) -> SessionContext:
    ctx = SessionContext(Session(session_id="s"), None, (), TOK)
    if history:
        ctx.apply_append(ctx.plan_append(history, now_us=1, new_message_id=_ids()))
    return ctx


def _sequential(
    ctx: SessionContext, requests: Sequence[Sequence[Message]]
) -> tuple[list[AppendPlan], str | None]:
    """Plan, install, plan the next...: the plans until the first error, and its text."""
    ids = _ids()
    plans: list[AppendPlan] = []
    for request in requests:
        try:
            plan = ctx.plan_append(request, now_us=9, new_message_id=ids)
        except CtxwardenError as exc:
            return plans, str(exc)
        ctx.apply_append(plan)
        plans.append(plan)
    return plans, None


def _state(ctx: SessionContext) -> tuple[object, ...]:
    return (ctx.session, ctx.context_tokens, ctx.open_calls(), ctx.active_messages)


@settings(max_examples=300, deadline=None)
@given(history=st.lists(messages(), max_size=4), requests=REQUESTS)
def test_a_run_plans_as_request_after_request(
    history: list[Message], requests: list[list[Message]]
) -> None:
    try:
        one_by_one = _ctx(history)
    except CtxwardenError:
        return  # an invalid history: nothing to compare against
    expected, error = _sequential(one_by_one, requests)
    merged = _ctx(history)
    if error is not None:
        with pytest.raises(CtxwardenError) as info:
            planned_run(merged, requests, 9, _ids(), {})
        assert str(info.value) == error
        # The requests before the failing one plan alone as they did.
        requests = requests[: len(expected)]
    plans = planned_run(merged, requests, 9, _ids(), {})
    assert plans == expected
    for plan in plans:
        merged.apply_append(plan)
    assert _state(merged) == _state(one_by_one)


def test_a_result_answers_a_call_made_earlier_in_the_run_and_a_second_is_refused() -> None:
    ctx = _ctx([])
    plans = planned_run(ctx, [[call("c1")], [tool_result("c1")]], 1, _ids(), {})
    assert [p.last_seq for p in plans] == [1, 2]
    assert plans[1].new[0].tool_name == "t"
    assert plans[1].session.version == plans[0].session.version + 1
    with pytest.raises(CtxwardenError, match="already has a result"):
        planned_run(ctx, [[call("c1")], [tool_result("c1")], [tool_result("c1")]], 1, _ids(), {})


def test_a_message_id_sent_again_later_in_the_run_is_the_earlier_message() -> None:
    ctx = _ctx([])
    plans = planned_run(ctx, [[user("a", "x")], [user("a", "x"), user("b")]], 1, _ids(), {})
    assert plans[1].messages[0] == plans[0].new[0]
    assert [m.seq for m in plans[1].new] == [2]
