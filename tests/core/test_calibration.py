"""Token estimates calibrated against provider-reported usage."""

from __future__ import annotations

import itertools

import pytest

from ctxwarden.core.calibration import Calibration
from ctxwarden.core.context import SessionContext
from ctxwarden.core.messages import ContentBlock, Message, Role, StopReason, Usage
from ctxwarden.core.model_input import TokenCountMethod
from ctxwarden.core.session import Checkpoint, Session
from ctxwarden.core.tokens import HeuristicTokenizer

TOK = HeuristicTokenizer()


def _append(ctx: SessionContext, *messages: Message, ids: itertools.count[int]) -> None:
    plan = ctx.plan_append(messages, now_us=1, new_message_id=(str(next(ids)) for _ in messages))
    ctx.apply_append(plan)


@pytest.mark.parametrize("factor", [0.7, 1.0, 1.3, 2.2])
def test_estimate_converges_to_reported_usage(factor: float) -> None:
    """The provider bills ``factor`` x our count; after a few turns our estimate
    of the next request is within 2% of what the provider then reports."""
    ctx = SessionContext(Session(session_id="s", system_prompt="sys " * 50), None, (), TOK)
    ids = itertools.count()
    errors = []
    for turn in range(8):
        _append(ctx, Message(Role.USER, (ContentBlock.of_text(f"question {turn} " * 40),)), ids=ids)
        view = ctx.model_input()
        raw = (
            view.tokens.system_tokens
            + view.tokens.tools_tokens
            + view.tokens.summary_tokens
            + view.tokens.message_tokens
        )
        reported = round(raw * factor)  # what the provider bills for this request
        errors.append(abs(view.tokens.total_tokens - reported) / reported)
        answer = Message(Role.ASSISTANT, (ContentBlock.of_text(f"answer {turn} " * 30),))
        out = round(TOK.count(answer.text) * factor)
        _append(
            ctx,
            Message(
                Role.ASSISTANT,
                answer.content,
                stop_reason=StopReason.STOP,
                usage=Usage(input_tokens=reported, output_tokens=out),
            ),
            ids=ids,
        )
    assert all(e < 0.02 for e in errors[3:]), errors
    mi = ctx.model_input()
    assert mi.tokens.estimate_error_ratio == pytest.approx(factor, rel=0.02)
    assert mi.tokens.method in (TokenCountMethod.ANCHORED, TokenCountMethod.ESTIMATED)
    if factor > 1:
        assert mi.tokens.anchored_total_tokens > 0


def test_uncalibrated_session_reports_plain_counts() -> None:
    ctx = SessionContext(Session(session_id="s"), None, (), TOK)
    _append(ctx, Message(Role.USER, (ContentBlock.of_text("x" * 400),)), ids=itertools.count())
    t = ctx.model_input().tokens
    assert (t.total_tokens, t.estimate_error_ratio, t.anchored_total_tokens) == (100, 1.0, 0)
    assert t.method == TokenCountMethod.ESTIMATED  # heuristic: never exact


def test_usage_from_before_a_checkpoint_anchors_nothing() -> None:
    ids = itertools.count()
    ctx = SessionContext(Session(session_id="s"), None, (), TOK)
    _append(
        ctx,
        Message(Role.USER, (ContentBlock.of_text("q" * 40),)),
        Message(
            Role.ASSISTANT,
            (ContentBlock.of_text("a" * 40),),
            stop_reason=StopReason.STOP,
            usage=Usage(input_tokens=90_000, output_tokens=10),
        ),
        Message(Role.USER, (ContentBlock.of_text("q2" * 40),)),
        ids=ids,
    )
    assert ctx.model_input().tokens.anchored_total_tokens > 90_000
    ctx.apply_checkpoint(Checkpoint("c", "s", "sum", 3, 100, 1, at_seq=3))
    assert ctx.model_input().tokens.anchored_total_tokens == 0


def test_failed_messages_and_outliers_do_not_derail_the_ratio() -> None:
    cal = Calibration()
    cal = cal.observe(1000, 1000)
    assert cal == Calibration(1.0, 1)
    cal = cal.observe(10**9, 1000)  # absurd claim: clamped to 4x
    assert cal.ratio == pytest.approx(2.5)
    assert Calibration().observe(0, 100) == Calibration()
    assert Calibration().observe(100, 0) == Calibration()
