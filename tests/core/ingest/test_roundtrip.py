"""render(ingest_items(render(conversation))) == render(conversation), per format."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings

from ctxwarden.core.ingest import ingest_items
from ctxwarden.core.messages import Message
from ctxwarden.core.render import Format, render
from ctxwarden.core.session import ToolDefinition
from tests.render.sdk import ARRAY_KEY
from tests.render.transcripts import (
    PROVIDER_FORMATS,
    flatten,
    render_models,
    tool_sets,
    transcripts,
    without_cache_control,
)

SETTINGS = settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def _array(
    fmt: Format, messages: Sequence[Message], model: str, tools: Sequence[ToolDefinition] = ()
) -> list[Any]:
    body = json.loads(render(fmt, "", tools, messages, model=model).json)
    value = body[ARRAY_KEY[fmt]]
    assert isinstance(value, list)
    return value


def _text_only_output(item: Any) -> Any:
    """A function_call_output whose list holds text only, as its text.

    The renderer sends a list when the result has images; an image of a type
    OpenAI does not take becomes a text placeholder, so the list may hold no
    image. Read back, the placeholder is text, and text is sent as a string.
    """
    output = item.get("output")
    if isinstance(output, list) and all(p["type"] == "input_text" for p in output):
        return {**item, "output": "".join(p["text"] for p in output)}
    return item


@pytest.mark.parametrize("fmt", PROVIDER_FORMATS, ids=lambda f: f.name)
@SETTINGS
@given(data=transcripts(kept=True), model=render_models, tools=tool_sets)
def test_rendering_ingested_items_gives_the_items_back(
    fmt: Format,
    data: tuple[list[list[Message]], bool],
    model: str,
    tools: tuple[ToolDefinition, ...],
) -> None:
    steps, with_summary = data
    first = _array(fmt, flatten(steps, with_summary), model, tools)
    # The items go through JSON text, as they would over the wire.
    ingested = ingest_items(fmt, json.loads(json.dumps(first)), model=model)
    second = _array(fmt, ingested, model, tools)
    if fmt is Format.OPENAI_RESPONSES:
        first = [_text_only_output(item) for item in first]
    if fmt is Format.ANTHROPIC_MESSAGES and with_summary:
        # The summary's cache breakpoint marks a message ctxwarden made; read
        # back, it is an ordinary user message. Everything else is the same.
        assert without_cache_control(second) == without_cache_control(first)
    else:
        assert second == first
