"""Properties over random views: valid for the SDKs, deterministic, cache-friendly."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ctxwarden.core.messages import ContentKind, Message, Role
from ctxwarden.core.render import Format, render
from ctxwarden.core.render._common import dumps
from ctxwarden.core.session import ToolDefinition
from tests.render.sdk import check_rules, validate
from tests.render.transcripts import (
    PROVIDER_FORMATS,
    array_json,
    body,
    flatten,
    render_models,
    system_prompts,
    tool_sets,
    transcripts,
)

SETTINGS = settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

Steps = list[list[Message]]


def _originals(messages: Sequence[Message]) -> set[str]:
    ids = {b.tool_call_id for m in messages for b in m.tool_calls}
    return ids | {m.tool_call_id for m in messages if m.role is Role.TOOL_RESULT}


def _rendered_ids(value: object) -> list[str]:
    """Every tool-call id in a rendered body."""
    if isinstance(value, list):
        return [i for v in value for i in _rendered_ids(v)]
    if not isinstance(value, dict) or value.get("type") == "reasoning":
        return []  # a Responses reasoning item's id is the provider's item id
    found = [
        v
        for k, v in value.items()
        if k in ("id", "tool_call_id", "call_id", "tool_use_id") and isinstance(v, str)
    ]
    return found + [i for v in value.values() for i in _rendered_ids(v)]


@pytest.mark.parametrize("fmt", PROVIDER_FORMATS, ids=lambda f: f.name)
@SETTINGS
@given(
    data=transcripts(),
    system=system_prompts,
    tools=tool_sets,
    model=render_models,
)
def test_random_views_validate_against_the_sdk(
    fmt: Format,
    data: tuple[Steps, bool],
    system: str,
    tools: tuple[ToolDefinition, ...],
    model: str,
) -> None:
    steps, with_summary = data
    messages = flatten(steps, with_summary)
    rendered = render(fmt, system, tools, messages, model=model)
    value = body(fmt, rendered)
    validate(fmt, value)
    check_rules(fmt, value)
    # Every id in the output maps back to an id of the input.
    originals = _originals(messages)
    for rendered_id in _rendered_ids(value):
        assert rendered.tool_id_map.get(rendered_id, rendered_id) in originals
    # Determinism: same input, same bytes; and the bytes are the canonical form.
    assert render(fmt, system, tools, messages, model=model) == rendered
    assert dumps(value) == rendered.json


def _assert_grows_at_end(fmt: Format, before: str, after: str) -> None:
    if fmt in (Format.OPENAI_CHAT, Format.OPENAI_RESPONSES):
        # One message or item per input piece: only whole items are appended.
        head = before[:-1]
        assert after.startswith(head), (before, after)
        if before != "[]":
            assert after[len(head)] in ",]", (before, after)
    else:
        # Anthropic and Gemini merge same-role neighbours: the last message may
        # grow by blocks at its end, so all closing brackets come off.
        assert after.startswith(before.rstrip("]}")), (before, after)


@pytest.mark.parametrize("fmt", PROVIDER_FORMATS, ids=lambda f: f.name)
@SETTINGS
@given(
    data=transcripts(),
    system=system_prompts,
    tools=tool_sets,
    model=render_models,
)
def test_a_growing_transcript_only_grows_at_the_end(
    fmt: Format,
    data: tuple[Steps, bool],
    system: str,
    tools: tuple[ToolDefinition, ...],
    model: str,
) -> None:
    """Prompt caches hit: render(n) minus its closing bracket(s) is a byte prefix
    of render(n+1), with cache_control keys removed."""
    steps, with_summary = data
    previous = array_json(fmt, render(fmt, system, tools, flatten([], with_summary), model=model))
    for n in range(1, len(steps) + 1):
        current = array_json(
            fmt, render(fmt, system, tools, flatten(steps[:n], with_summary), model=model)
        )
        _assert_grows_at_end(fmt, previous, current)
        previous = current


@pytest.mark.parametrize("fmt", PROVIDER_FORMATS, ids=lambda f: f.name)
@SETTINGS
@given(data=transcripts(), model=render_models)
def test_the_system_prompt_and_tools_do_not_depend_on_the_messages(
    fmt: Format, data: tuple[Steps, bool], model: str
) -> None:
    steps, with_summary = data
    tools = (ToolDefinition("read", "Read", '{"type":"object"}'),)
    a = body(fmt, render(fmt, "S", tools, flatten(steps[:1], with_summary), model=model))
    b = body(fmt, render(fmt, "S", tools, flatten(steps, with_summary), model=model))
    for key in a:
        if key not in ("messages", "input", "contents"):
            assert a[key] == b[key]


@given(st.data())
@settings(max_examples=20, deadline=None)
def test_images_survive_in_every_format(data: st.DataObject) -> None:
    """Every image of the input reaches the output (in Chat, moved or not)."""
    steps, with_summary = data.draw(transcripts())
    messages = flatten(steps, with_summary)
    images = sum(1 for m in messages for b in m.content if b.kind is ContentKind.IMAGE)
    for fmt in PROVIDER_FORMATS:
        rendered = render(fmt, "", (), messages, model="m")
        text = rendered.json
        shown = (
            text.count('"image_url"') // (2 if fmt is Format.OPENAI_CHAT else 1)
            + text.count('"type":"image"')
            + text.count('"inlineData"')
            + text.count("[image omitted:")
        )
        assert shown == images, fmt
