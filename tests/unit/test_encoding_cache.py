"""The api layer's encoding cache: per server, keyed by session and revision,
bounded, and emptied of sessions that leave memory."""

from __future__ import annotations

import itertools
from dataclasses import replace

from ctxwarden.api.convert import encode_message, new_encoding_cache
from ctxwarden.api.encoding import EncodingCache
from ctxwarden.api.model_input_wire import model_input_bytes
from ctxwarden.core.context import SessionContext
from ctxwarden.core.messages import ContentBlock, Message, Role
from ctxwarden.core.session import Session
from ctxwarden.core.tokens import HeuristicTokenizer
from ctxwarden.service.hot import HotSessions

TOK = HeuristicTokenizer()


def _context(sid: str, messages: int = 4, text: str = "hello world " * 20) -> SessionContext:
    ctx = SessionContext(Session(session_id=sid), None, (), TOK)
    ids = itertools.count()
    batch = [Message(Role.USER, (ContentBlock.of_text(f"{i} {text}"),)) for i in range(messages)]
    plan = ctx.plan_append(batch, now_us=1, new_message_id=(str(next(ids)) for _ in batch))
    ctx.apply_append(plan)
    return ctx


def test_cached_bytes_are_the_uncached_bytes() -> None:
    cache = new_encoding_cache()
    view = _context("s1").model_input()
    plain = model_input_bytes(view)
    assert model_input_bytes(view, cache=cache) == plain
    assert model_input_bytes(view, cache=cache) == plain  # now from the cache
    assert model_input_bytes(view, 2, cache=cache) == model_input_bytes(view, 2)
    assert len(cache) == 1 and cache.total_bytes > 0


def test_entries_are_reused_until_the_revision_changes() -> None:
    calls: list[Message] = []

    def counting(m: Message) -> bytes:
        calls.append(m)
        return encode_message(m)

    cache = EncodingCache(counting)
    ctx = _context("s1")
    view = ctx.model_input()
    cache.encode(view, 0)
    cache.encode(view, 0)
    assert len(calls) == 4  # the second time, every message came from the cache
    newer = replace(view, session=replace(view.session, revision=view.session.revision + 1))
    cache.encode(newer, 0)
    assert len(calls) == 8  # new settings: encoded again


def test_one_off_inputs_are_not_cached() -> None:
    cache = new_encoding_cache()
    view = replace(_context("s1").model_input(), live=False)  # e.g. a replay
    model_input_bytes(view, cache=cache)
    assert len(cache) == 0 and cache.total_bytes == 0


def test_two_servers_never_share_a_cache() -> None:
    a, b = new_encoding_cache(), new_encoding_cache()
    model_input_bytes(_context("s1").model_input(), cache=a)
    assert (len(a), len(b), b.total_bytes) == (1, 0, 0)


def test_sessions_that_leave_memory_take_their_encodings() -> None:
    cache = new_encoding_cache()
    hot = HotSessions(capacity=1)
    hot.on_evict(cache.forget)
    first, second = _context("s1"), _context("s2")
    hot.put("s1", first)
    model_input_bytes(first.model_input(), cache=cache)
    assert len(cache) == 1
    hot.put("s2", second)  # over capacity: s1 is evicted
    assert len(cache) == 0 and cache.total_bytes == 0
    model_input_bytes(second.model_input(), cache=cache)
    hot.evict("s2")
    assert len(cache) == 0 and cache.total_bytes == 0


def test_the_budget_evicts_the_least_recently_built_sessions() -> None:
    views = [_context(f"s{i}").model_input() for i in range(3)]
    one = new_encoding_cache()
    model_input_bytes(views[0], cache=one)
    per_session = one.total_bytes
    cache = new_encoding_cache(limit_bytes=2 * per_session)
    for v in views:
        model_input_bytes(v, cache=cache)
    assert len(cache) == 2 and cache.total_bytes == 2 * per_session
    assert "s0" not in cache._sessions
    tiny = new_encoding_cache(limit_bytes=per_session - 1)  # a session alone over budget
    assert model_input_bytes(views[0], cache=tiny) == model_input_bytes(views[0])
    assert len(tiny) == 0 and tiny.total_bytes == 0
    off = new_encoding_cache(limit_bytes=0)
    model_input_bytes(views[0], cache=off)
    assert len(off) == 0


def _entry_bytes(cache: EncodingCache) -> int:
    from ctxwarden.api.encoding import ENTRY_OVERHEAD

    return sum(
        len(encoded) + ENTRY_OVERHEAD
        for cached in cache._sessions.values()
        for _, encoded in cached.entries.values()
    )


def test_two_inputs_encoded_in_steps_at_once_keep_the_budget_true() -> None:
    """The first inputs of a long session are encoded a slice at a time: another
    call for the same session may run between two steps. Both get every message's
    bytes, each message is stored once, and the budget counts what is stored."""
    cache = new_encoding_cache()
    view = _context("s1", messages=500).model_input()
    first, second = cache.encode_steps(view, 0), cache.encode_steps(view, 0)
    outs: list[list[bytes]] = []
    for steps in itertools.cycle((first, second)):  # one step of each in turn
        try:
            next(steps)
        except StopIteration as done:
            outs.append(done.value)
            if len(outs) == 2:
                break
    expected = [encode_message(m) for m in view.messages]
    assert outs == [expected, expected]
    assert len(cache._sessions["s1"].entries) == 500
    assert cache.total_bytes == cache._sessions["s1"].size == _entry_bytes(cache)
    assert cache.encode(view, 0) == expected  # then all from the cache
    assert cache.total_bytes == _entry_bytes(cache)
