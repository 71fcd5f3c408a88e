"""Incremental rendering: fed in any chunks, a state renders what a one-shot
rendering does, byte for byte; a holder of an earlier rendering rebuilds the
new one from its own bytes and the suffix it is sent."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ctxwarden.core.messages import Message
from ctxwarden.core.render import Format, Rendered, finished, new_state, render
from tests.render.transcripts import (
    PROVIDER_FORMATS,
    assistant,
    call,
    flatten,
    render_models,
    result,
    synthetic,
    system_prompts,
    tool_sets,
    transcripts,
    user,
)

SETTINGS = settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def _same(a: Rendered, b: Rendered) -> None:
    assert a.json == b.json
    assert a.notices == b.notices
    assert dict(a.tool_id_map) == dict(b.tool_id_map)


def _resumed(held: Rendered, new: Rendered) -> str | None:
    """What a client holding ``held`` rebuilds from the suffix of ``new`` it is sent."""
    assert held.marks is not None and new.marks is not None
    count = held.marks.stable
    if not new.marks.holds(count, held.marks.digests[count]):
        return None
    cut = new.marks.utf8[count]
    return (held.json.encode()[:cut] + new.after(count).encode()).decode()


@pytest.mark.parametrize("fmt", PROVIDER_FORMATS, ids=lambda f: f.name)
@SETTINGS
@given(
    data=transcripts(),
    system=system_prompts,
    tools=tool_sets,
    model=render_models,
    cuts=st.lists(st.integers(min_value=0, max_value=40), max_size=4),
    tail=st.integers(min_value=0, max_value=2),
)
def test_fed_in_chunks_it_renders_as_one_shot(
    fmt: Format,
    data: tuple[list[list[Message]], bool],
    system: str,
    tools: tuple[object, ...],
    model: str,
    cuts: list[int],
    tail: int,
) -> None:
    steps, with_summary = data
    messages = flatten(steps, with_summary)
    state = new_state(fmt, system, tools, model=model)  # type: ignore[arg-type]
    fed = 0
    for cut in sorted(min(c, len(messages)) for c in cuts):
        state.feed(messages[fed:cut] if cut > fed else [])
        fed = max(fed, cut)
        # Finishing in between changes nothing that comes after.
        _same(finished(state), render(fmt, system, tools, messages[:fed], model=model))  # type: ignore[arg-type]
    keep = max(fed, len(messages) - tail)
    state.feed(messages[fed:keep])
    whole = render(fmt, system, tools, messages, model=model)  # type: ignore[arg-type]
    _same(finished(state, messages[keep:]), whole)
    # ... and the tail left no trace in the state.
    _same(finished(state), render(fmt, system, tools, messages[:keep], model=model))  # type: ignore[arg-type]


@pytest.mark.parametrize("fmt", PROVIDER_FORMATS, ids=lambda f: f.name)
@SETTINGS
@given(
    data=transcripts(),
    system=system_prompts,
    tools=tool_sets,
    model=render_models,
)
def test_a_holder_rebuilds_each_growing_rendering_byte_for_byte(
    fmt: Format,
    data: tuple[list[list[Message]], bool],
    system: str,
    tools: tuple[object, ...],
    model: str,
) -> None:
    steps, with_summary = data
    state = new_state(fmt, system, tools, model=model)  # type: ignore[arg-type]
    held: Rendered | None = None
    fed = 0
    for n in range(1, len(steps) + 1):
        messages = flatten(steps[:n], with_summary)
        state.feed(messages[fed:])
        fed = len(messages)
        new = finished(state)
        if held is not None:
            assert _resumed(held, new) == new.json
        held = new


@pytest.mark.parametrize("fmt", PROVIDER_FORMATS, ids=lambda f: f.name)
def test_an_agent_loop_resumes_every_step_with_a_small_suffix(fmt: Format) -> None:
    state = new_state(fmt, "You are terse. ünïcödé ✓", (), model="claude-sonnet-4-5")
    state.feed([user("list the files, ✓ please", seq=1)])
    held = finished(state)
    seq = 1
    for step in range(20):
        call_id = f"call_{step}"
        turn = [
            assistant("looking ✓", call(call_id, "ls"), seq=seq + 1),
            result(call_id, "a.txt\nb.txt ✓" * 50, name="ls", seq=seq + 2),
        ]
        seq += 2
        state.feed(turn)
        new = finished(state)
        rebuilt = _resumed(held, new)
        assert rebuilt == new.json, step
        assert held.marks is not None
        assert len(new.after(held.marks.stable)) < 2_500
        held = new


@pytest.mark.parametrize("fmt", PROVIDER_FORMATS, ids=lambda f: f.name)
def test_a_synthetic_result_is_not_part_of_what_is_offered(fmt: Format) -> None:
    state = new_state(fmt, "S", (), model="m")
    state.feed([user("go", seq=1), assistant(call("c1", "ls"), seq=2)])
    open_call = finished(state, [synthetic("c1", "ls")])
    state.feed([result("c1", "real output", name="ls", seq=3)])
    real = finished(state)
    assert "real output" in real.json
    assert _resumed(open_call, real) == real.json


@pytest.mark.parametrize("fmt", PROVIDER_FORMATS, ids=lambda f: f.name)
def test_something_else_held_is_not_resumed(fmt: Format) -> None:
    a = new_state(fmt, "S", (), model="m")
    a.feed([user("one", seq=1), assistant("two", seq=2), user("three", seq=3)])
    b = new_state(fmt, "S", (), model="m")
    b.feed([user("uno", seq=1), assistant("two", seq=2), user("three", seq=3)])
    held, other = finished(a), finished(b)
    assert held.marks is not None and other.marks is not None
    assert held.marks.stable >= 1
    assert not other.marks.holds(held.marks.stable, held.marks.digests[held.marks.stable])
    assert not other.marks.holds(other.marks.stable + 1, 0)
    assert held.marks.holds(held.marks.stable, held.marks.digests[held.marks.stable])
