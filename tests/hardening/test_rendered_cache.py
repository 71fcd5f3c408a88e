"""Rendered provider inputs grow with the session: an unchanged session renders
nothing, an append renders only the new messages, anything else starts over."""

from __future__ import annotations

import json

from ctxwarden.core.render import Format, finished, new_state, render_view
from ctxwarden.service.rendered_cache import Entry, RenderedCache
from tests.support.inproc import assistant_msg, new_session, replica, user_msg

ANTHROPIC = int(Format.ANTHROPIC_MESSAGES)


async def test_an_append_continues_the_rendering_and_a_rewrite_starts_anew(
    backend_url: str,
) -> None:
    async with replica(backend_url) as m:
        sid = await new_session(m, model="claude-sonnet-4-5", system_prompt="Be brief.")
        await m.append(sid, [user_msg("hello")], None, None)
        cache = m.model_inputs.rendered
        first = await m.build_model_input(sid, 0, False, None, ANTHROPIC)
        again = await m.build_model_input(sid, 0, False, None, ANTHROPIC)
        assert again.rendered_json == first.rendered_json
        assert (cache.hits, cache.resumed) == (1, 0)
        await m.append(sid, [assistant_msg("hi"), user_msg("and now?")], None, None)
        grown = await m.build_model_input(sid, 0, False, None, ANTHROPIC)
        assert (cache.hits, cache.resumed) == (1, 1)  # continued, not rendered anew
        assert len(json.loads(grown.rendered_json)["messages"]) == 3
        assert grown.rendered_json == render_view(Format.ANTHROPIC_MESSAGES, grown).json
        # A rollback rewrites the input: the state no longer fits, a new one is made.
        await m.rollback(sid, 1, "", None)
        rolled = await m.build_model_input(sid, 0, False, None, ANTHROPIC)
        assert cache.resumed == 1
        assert rolled.rendered_json == first.rendered_json
        # A replay of an earlier state is rendered on its own, never cached.
        replayed = await m.build_model_input(sid, 0, False, 2, ANTHROPIC)
        assert replayed.rendered_json == first.rendered_json
        assert (cache.hits, cache.resumed) == (1, 1)
        # Another format is another state.
        chat = await m.build_model_input(sid, 0, False, None, int(Format.OPENAI_CHAT))
        assert json.loads(chat.rendered_json)["messages"][0]["role"] == "system"
        assert len(cache) == 2


def test_the_cache_stays_within_its_budget() -> None:
    def entry(text: str) -> Entry:
        state = new_state(Format.OPENAI_CHAT, text, (), model="m")
        return Entry(state, "m", "", 0, ((1, 0), finished(state)))

    cache = RenderedCache(limit_bytes=50_000)
    for i in range(100):
        cache.put(("s", i), entry("x" * 1_000))
    assert cache.size <= 50_000
    assert cache.take(("s", 99)) is not None
    assert cache.take(("s", 0)) is None
    cache.put(("s", 100), entry("y" * 60_000))  # larger than the budget: not kept
    assert cache.take(("s", 100)) is None
    cache.put(("t", 4), entry("z"))
    cache.forget("t")
    assert cache.take(("t", 4)) is None
