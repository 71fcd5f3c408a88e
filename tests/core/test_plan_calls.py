"""Planning an append reads the session's tool-call index without copying it:
the plan's changes stay aside until the append is installed."""

from __future__ import annotations

import itertools

import pytest

from ctxwarden.core.append import AppendPlan
from ctxwarden.core.context import SessionContext
from ctxwarden.core.errors import FailedPrecondition
from ctxwarden.core.messages import Message
from tests.core.test_context import append, call, new_ctx, tool_result

_IDS = itertools.count()


def _plan(ctx: SessionContext, *messages: Message) -> AppendPlan:
    return ctx.plan_append(messages, now_us=1, new_message_id=(f"p{i}" for i in _IDS))


def test_a_plan_that_is_not_installed_leaves_the_calls_as_committed() -> None:
    ctx = new_ctx()
    append(ctx, call("c1"))
    _plan(ctx, tool_result("c1"))  # planned, never written (a lost compare-and-set)
    assert ctx.open_calls() == [("c1", "t")]
    plan = _plan(ctx, tool_result("c1"))  # the retry is not "already answered"
    ctx.apply_append(plan)
    assert ctx.open_calls() == []


def test_a_call_made_and_answered_in_one_request_and_a_second_answer_refused() -> None:
    ctx = new_ctx()
    plan = _plan(ctx, call("c2"), tool_result("c2"))
    assert [m.tool_name for m in plan.new] == ["", "t"]  # the result takes the call's name
    assert ctx.open_calls() == []  # nothing installed yet
    with pytest.raises(FailedPrecondition):
        _plan(ctx, call("c3"), tool_result("c3"), tool_result("c3"))
