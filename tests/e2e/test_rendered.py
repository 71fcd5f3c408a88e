"""BuildModelInput(format=...): provider-native JSON through the server, valid
for each provider's official SDK types, and growing only at the end."""

from __future__ import annotations

import json
import re

import pytest

from ctxwarden.core.render import Format
from ctxwarden.v1 import context_service_pb2 as pb
from ctxwarden.v1 import message_pb2 as m
from ctxwarden.v1 import session_pb2 as ses
from tests.e2e.conftest import NewSession, Stub
from tests.e2e.test_messages import append
from tests.render.sdk import validate
from tests.support.builders import assistant, result, user

FORMATS = {
    pb.MODEL_INPUT_FORMAT_OPENAI_CHAT: ("messages", Format.OPENAI_CHAT),
    pb.MODEL_INPUT_FORMAT_OPENAI_RESPONSES: ("input", Format.OPENAI_RESPONSES),
    pb.MODEL_INPUT_FORMAT_ANTHROPIC_MESSAGES: ("messages", Format.ANTHROPIC_MESSAGES),
    pb.MODEL_INPUT_FORMAT_GEMINI: ("contents", Format.GEMINI),
}


def _array_prefix(rendered: str, key: str) -> str:
    """The serialised message array without cache_control markers or closing brackets."""
    body = json.loads(rendered)
    for item in body[key]:
        _strip_cache_control(item)
    text = json.dumps(body[key], ensure_ascii=False, separators=(",", ":"))
    return re.sub(r"[\]\}]+$", "", text)


def _strip_cache_control(value: object) -> None:
    if isinstance(value, dict):
        value.pop("cache_control", None)
        for v in value.values():
            _strip_cache_control(v)
    elif isinstance(value, list):
        for v in value:
            _strip_cache_control(v)


@pytest.mark.parametrize("fmt", list(FORMATS))
def test_rendered_json_is_valid_and_grows_at_the_end(
    stub: Stub, new_session: NewSession, fmt: pb.ModelInputFormat.ValueType
) -> None:
    key, local = FORMATS[fmt]
    sid = new_session(
        system_prompt="You are terse.",
        model="claude-sonnet-4-5",
        tools=[
            ses.ToolDefinition(
                name="read",
                description="Read a file",
                parameters_json='{"type":"object","properties":{"path":{"type":"string"}}}',
            )
        ],
    ).session_id
    previous = ""
    for i in range(4):
        append(stub, sid, user(f"question {i}"))
        append(
            stub,
            sid,
            assistant(f"looking {i}", [(f"c{i}", "read", {"path": f"f{i}"})]),
            result(f"c{i}", f"content {i}", name="read"),
            assistant(f"answer {i}"),
        )
        mi = stub.BuildModelInput(pb.BuildModelInputRequest(session_id=sid, format=fmt))
        body = json.loads(mi.rendered_json)
        validate(local, body)
        current = _array_prefix(mi.rendered_json, key)
        assert current.startswith(previous), f"turn {i} rewrote earlier bytes"
        previous = current
    native = stub.BuildModelInput(pb.BuildModelInputRequest(session_id=sid))
    assert native.rendered_json == ""


def test_thinking_from_another_model_is_dropped_with_a_notice(
    stub: Stub, new_session: NewSession
) -> None:
    sid = new_session(model="claude-sonnet-4-5").session_id
    thought = m.Message(
        role=m.ROLE_ASSISTANT,
        model="gpt-5",
        content=[
            m.ContentBlock(thinking=m.ThinkingContent(thinking="hmm", signature="sig")),
            m.ContentBlock(text=m.TextContent(text="hi")),
        ],
        stop_reason=m.STOP_REASON_STOP,
    )
    append(stub, sid, user("q"), thought)
    mi = stub.BuildModelInput(
        pb.BuildModelInputRequest(session_id=sid, format=pb.MODEL_INPUT_FORMAT_ANTHROPIC_MESSAGES)
    )
    assert "THINKING_DROPPED" in [n.code for n in mi.notices]
    assert '"thinking"' not in mi.rendered_json
