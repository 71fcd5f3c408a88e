"""Rendered provider inputs are made once per session state."""

from __future__ import annotations

import json

from ctxwarden.core.render import Format, Rendered
from ctxwarden.service.rendered_cache import RenderedCache
from tests.support.inproc import assistant_msg, new_session, replica, user_msg

ANTHROPIC = int(Format.ANTHROPIC_MESSAGES)


async def test_same_state_renders_once_and_a_change_renders_anew(backend_url: str) -> None:
    async with replica(backend_url) as m:
        sid = await new_session(m, model="claude-sonnet-4-5", system_prompt="Be brief.")
        await m.append(sid, [user_msg("hello")], None, None)
        cache = m.model_inputs.rendered
        first = await m.build_model_input(sid, 0, False, None, ANTHROPIC)
        again = await m.build_model_input(sid, 0, False, None, ANTHROPIC)
        assert again.rendered_json == first.rendered_json
        assert cache.hits == 1
        await m.append(sid, [assistant_msg("hi")], None, None)
        grown = await m.build_model_input(sid, 0, False, None, ANTHROPIC)
        assert cache.hits == 1  # a new version: rendered anew
        assert len(json.loads(grown.rendered_json)["messages"]) == 2
        # A replay of the earlier state is rendered, never cached.
        replayed = await m.build_model_input(sid, 0, False, 2, ANTHROPIC)
        assert replayed.rendered_json == first.rendered_json
        assert cache.hits == 1


def test_the_cache_stays_within_its_budget() -> None:
    cache = RenderedCache(limit_bytes=10_000)
    for i in range(100):
        cache.put(("s", i, 4, 0), Rendered("x" * 1_000))
    assert cache.size <= 10_000
    assert cache.get(("s", 99, 4, 0)) is not None
    assert cache.get(("s", 0, 4, 0)) is None
    cache.put(("s", 100, 4, 0), Rendered("y" * 20_000))  # larger than the budget: not kept
    assert cache.get(("s", 100, 4, 0)) is None
