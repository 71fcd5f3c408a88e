"""The console's pretty-printed rendering: the same text as parsing and re-dumping
the whole JSON, but only as much work as the shown part takes."""

from __future__ import annotations

import contextlib
import json
import random
import time

import pytest

from ctxwarden.console.views import pretty_json
from ctxwarden.core.content import ContentBlock
from ctxwarden.core.messages import Message, Role
from ctxwarden.core.render import Format, render


def whole(text: str, limit: int) -> tuple[str, bool]:
    """What the console did before: parse and re-dump everything, then cut."""
    with contextlib.suppress(ValueError):
        text = json.dumps(json.loads(text), indent=2, ensure_ascii=False)
    return text[:limit], len(text) > limit


def _value(rng: random.Random, depth: int = 0) -> object:
    kind = rng.randrange(9 if depth < 4 else 6)
    scalars: list[object] = [
        "", "plain", "héllo ✓ 𝄞", 'quote " and \\ backslash', "line\nbreak\ttab\x01",
        "\u2028 and /slash", 0, -7, 12345678901234567890, 1.5, -0.25, 1e-07, 3.0e20,
        True, False, None,
    ]  # fmt: skip
    if kind < 6:
        return rng.choice(scalars)
    if kind < 8:
        keys = [f"k{i}{rng.choice(['', 'é', ' '])}" for i in range(rng.randrange(4))]
        return {k: _value(rng, depth + 1) for k in keys}
    return [_value(rng, depth + 1) for _ in range(rng.randrange(4))]


@pytest.mark.parametrize("ascii_only", [True, False])
def test_the_same_text_as_a_whole_redump(ascii_only: bool) -> None:
    rng = random.Random(26)
    for _ in range(400):
        separators = rng.choice([(",", ":"), (", ", ": ")])
        text = json.dumps(_value(rng), ensure_ascii=ascii_only, separators=separators)
        for limit in (0, 1, 7, 40, 10**6):
            assert pretty_json(text, limit) == whole(text, limit), (text, limit)


def test_a_real_rendering_and_text_that_is_not_json() -> None:
    messages = [
        Message(role=Role.USER, content=(ContentBlock.of_text(f'question {i} ✓ "quoted"'),))
        for i in range(50)
    ]
    for fmt in (Format.OPENAI_CHAT, Format.ANTHROPIC_MESSAGES, Format.GEMINI):
        text = render(fmt, "system", (), messages, model="").json
        for limit in (100, 512 * 1024):
            assert pretty_json(text, limit) == whole(text, limit)
    for broken in ('{"a": 1', '{"a": 1}}', "[1, 2", "not json", '{"a" 1}', "[1] [2]", '"\\x"'):
        assert pretty_json(broken, 1000) == whole(broken, 1000), broken
    assert pretty_json("", 10) == ("", False)


def test_the_work_is_bounded_by_the_limit() -> None:
    """A 40 MB rendering is cut at 512 KiB in about the time 512 KiB takes."""
    item = {"role": "user", "content": [{"type": "text", "text": "x" * 300}]}
    small = json.dumps([item] * 2_000)
    big = json.dumps([item] * 120_000)
    started = time.perf_counter()
    shown, cut = pretty_json(big, 512 * 1024)
    elapsed_big = time.perf_counter() - started
    started = time.perf_counter()
    pretty_json(small, 512 * 1024)
    elapsed_small = time.perf_counter() - started
    assert cut and len(shown) == 512 * 1024
    assert shown == whole(small, 512 * 1024)[0]  # the small one is over 512 KiB pretty too
    # bounded: the 60x longer text costs about as much as the small one
    assert elapsed_big < 10 * elapsed_small + 0.05, (elapsed_big, elapsed_small)
