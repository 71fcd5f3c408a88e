"""The render entry point, and rendering views that SessionContext built."""

from __future__ import annotations

import itertools

import pytest

from ctxwarden.core.context import SessionContext
from ctxwarden.core.messages import ContentBlock, Message, Role, StopReason
from ctxwarden.core.render import Format, Rendered, render, render_view
from ctxwarden.core.session import Checkpoint, Session, ToolDefinition
from ctxwarden.core.summary import SUMMARY_METADATA_KEY
from ctxwarden.core.tokens import HeuristicTokenizer
from ctxwarden.v1 import context_service_pb2
from tests.render.sdk import check_rules, validate
from tests.render.transcripts import PROVIDER_FORMATS, READ, body, user

IDS = itertools.count()


def test_format_numbers_match_the_api_enum() -> None:
    for fmt in Format:
        number = context_service_pb2.ModelInputFormat.Value(f"MODEL_INPUT_FORMAT_{fmt.name}")
        assert int(number) == int(fmt)


def test_native_renders_nothing() -> None:
    assert render(Format.NATIVE, "sys", (READ,), [user("hi")], model="m") == Rendered("")


def test_an_unknown_format_is_an_error() -> None:
    with pytest.raises(ValueError, match="7"):
        render(7, "", (), [], model="m")  # type: ignore[arg-type]


@pytest.mark.parametrize("fmt", PROVIDER_FORMATS, ids=lambda f: f.name)
def test_an_empty_view(fmt: Format) -> None:
    rendered = render(fmt, "", (), [], model="m")
    assert rendered.notices == ()
    validate(fmt, body(fmt, rendered))


def _append(ctx: SessionContext, *messages: Message) -> None:
    plan = ctx.plan_append(messages, now_us=1, new_message_id=(f"g{i}" for i in IDS))
    ctx.apply_append(plan)


@pytest.mark.parametrize("fmt", PROVIDER_FORMATS, ids=lambda f: f.name)
def test_a_compacted_view_with_a_synthetic_result(fmt: Format) -> None:
    session = Session(
        session_id="s",
        system_prompt="You are careful.",
        tools=(READ, ToolDefinition("ls")),
        model="claude-x",
    )
    checkpoint = Checkpoint(
        compaction_id="cmp-1",
        session_id="s",
        summary="we read a.txt",
        first_kept_seq=1,
        tokens_before=100,
        create_time_us=1,
    )
    ctx = SessionContext(session, checkpoint, (), HeuristicTokenizer())
    _append(
        ctx,
        Message(Role.USER, (ContentBlock.of_text("list files"),)),
        Message(
            Role.ASSISTANT,
            (ContentBlock.of_tool_call("t1", "ls", ""), ContentBlock.of_tool_call("t2", "read")),
            stop_reason=StopReason.TOOL_USE,
            model="claude-x",
        ),
        Message(Role.TOOL_RESULT, (ContentBlock.of_text("a.txt"),), tool_call_id="t1"),
        Message(Role.USER, (ContentBlock.of_text("and?"),)),
    )
    view = ctx.model_input()
    assert SUMMARY_METADATA_KEY in view.messages[0].metadata
    rendered = render_view(fmt, view)
    assert rendered == render(
        fmt, session.system_prompt, session.tools, view.messages, model="claude-x"
    )
    value = body(fmt, rendered)
    validate(fmt, value)
    check_rules(fmt, value)
    assert "we read a.txt" in rendered.json
    assert "No result provided" in rendered.json  # the synthetic result for t2
