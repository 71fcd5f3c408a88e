"""Tool-call id normalisation."""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from ctxwarden.core.render import (
    Format,
    anthropic_tool_id,
    openai_chat_tool_id,
    openai_responses_call_id,
    render,
)
from ctxwarden.core.render._common import ToolIds
from tests.render.transcripts import assistant, body, call, numbered, result, user

ANTHROPIC_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")


def test_valid_ids_are_kept() -> None:
    for original in ["toolu_01A09q90qw90lq917835lq9", "call_abc-DEF_123", "x" * 64]:
        assert anthropic_tool_id(original) == original


def test_invalid_ids_are_sanitised_and_hashed() -> None:
    rewritten = anthropic_tool_id("functions.read:0")
    assert re.fullmatch(r"functions_read_0_[0-9a-f]{16}", rewritten)
    assert ANTHROPIC_ID.fullmatch(anthropic_tool_id("")) is not None
    assert ANTHROPIC_ID.fullmatch(anthropic_tool_id("ünïcödé id")) is not None
    long = anthropic_tool_id("y" * 200)
    assert len(long) == 64
    assert long.startswith("y" * 47 + "_")


def test_near_collisions_stay_apart() -> None:
    # Same after sanitising, or the same 47-character head.
    pairs = [("a.b", "a:b"), ("a.b", "a_b"), ("z" * 100 + "1", "z" * 100 + "2")]
    for one, two in pairs:
        assert anthropic_tool_id(one) != anthropic_tool_id(two)


@given(st.lists(st.text(max_size=90), min_size=2, max_size=30, unique=True))
@settings(max_examples=200, deadline=None)
def test_distinct_ids_map_to_distinct_valid_ids(originals: list[str]) -> None:
    for normalize, limit in (
        (anthropic_tool_id, 64),
        (openai_chat_tool_id, 40),
        (openai_responses_call_id, 64),
    ):
        rendered = [normalize(o) for o in originals]
        assert len(set(rendered)) == len(rendered)
        for original, new in zip(originals, rendered, strict=True):
            assert 1 <= len(new) <= limit
            assert normalize(original) == new  # deterministic
            if normalize is anthropic_tool_id:
                assert ANTHROPIC_ID.fullmatch(new), new


@given(st.lists(st.sampled_from(["a", "b", "a.b", "a_b", "x" * 80]), max_size=12))
def test_tool_ids_are_unique_within_a_rendering(calls: list[str]) -> None:
    ids = ToolIds(anthropic_tool_id)
    seen = [ids.call(c) for c in calls]
    assert len(set(seen)) == len(seen)
    for rendered, original in zip(seen, calls, strict=True):
        assert ids.rewritten.get(rendered, rendered) == original


def test_the_map_reads_a_rendering_back_in_every_format() -> None:
    odd = "functions.read:0/" + "q" * 60
    messages = numbered([user("go"), assistant(call(odd)), result(odd, "x")])
    for fmt in (Format.OPENAI_CHAT, Format.OPENAI_RESPONSES, Format.ANTHROPIC_MESSAGES):
        rendered = render(fmt, "", (), messages, model="m")
        value = body(fmt, rendered)
        (rendered_id,) = rendered.tool_id_map
        assert rendered.tool_id_map[rendered_id] == odd
        assert rendered.json.count(rendered_id) == 2, fmt
        assert odd not in rendered.json
        assert value  # parsed
    gemini = render(Format.GEMINI, "", (), messages, model="m")
    assert gemini.tool_id_map == {}  # Gemini takes any id
