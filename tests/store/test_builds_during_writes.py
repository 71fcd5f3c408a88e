"""A live BuildModelInput counted while a write of the same session is in flight.

A build does not take the session's lock: it reads the hot copy and counts itself
in the copy's cache ledger (service.cache_ledger). A write holds the lock, plans a
new version of the session from the copy, waits for the database and then puts
that version in memory. The builds counted while it waited must not be lost when it
does (they are stored with the session's next write, as every build is).

Each test holds a write at its database call (an asyncio.Event around the real
repository method), builds while it waits, lets it go, and checks the hot copy and,
after one more write, what a fresh replica restores from the database.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import AsyncIterator, Awaitable
from dataclasses import replace
from typing import Any

import pytest

from ctxwarden.config import Settings
from ctxwarden.core.cache_prefix import CacheBreak, CachePrefix
from ctxwarden.core.compaction.extractive import ExtractiveSummarizer
from ctxwarden.core.context import SessionContext
from ctxwarden.core.messages import ContentBlock, Message, Role, Usage
from ctxwarden.core.session import ContextPolicy, Session
from ctxwarden.service.manager import SessionManager
from ctxwarden.store.engine import make_engine
from ctxwarden.store.repository import Store
from ctxwarden.util import ids
from tests.support.held import Held


@pytest.fixture
async def manager(backend_url: str) -> AsyncIterator[SessionManager]:
    m = SessionManager(Store(make_engine(backend_url)), Settings(), ExtractiveSummarizer())
    try:
        yield m
    finally:
        await m.close()


def _text(role: Role, text: str, usage: Usage | None = None) -> Message:
    return Message(role, (ContentBlock.of_text(text),), usage=usage)


async def _session(m: SessionManager) -> str:
    sid = f"builds-{ids.new_id()}"
    policy = ContextPolicy(keep_recent_tokens=30, tokenizer="heuristic")
    await m.create_session(
        Session(session_id=sid, system_prompt="be brief", policy=policy), sid, None
    )
    for i in range(6):
        await m.append(sid, [_text(Role.USER, f"question {i} " + "q" * 80)], None, None)
        await m.append(sid, [_text(Role.ASSISTANT, f"answer {i} " + "a" * 80)], None, None)
    return sid


async def _build(m: SessionManager, sid: str) -> None:
    await m.build_model_input(sid, 0, count_cache=True)


def _builds(m: SessionManager, sid: str) -> int:
    ctx = m.hot.get(sid)
    assert ctx is not None
    return ctx.session.usage.cache.builds


async def _stored_builds(backend_url: str, sid: str) -> int:
    fresh = SessionManager(Store(make_engine(backend_url)), Settings())
    try:
        return (await fresh.runtime.context(sid)).session.usage.cache.builds
    finally:
        await fresh.close()


async def _during(m: SessionManager, held: Held, write: Awaitable[Any], sid: str) -> None:
    """Run ``write`` until it waits at the database, build twice, let it finish."""
    task = asyncio.ensure_future(write)
    await held.entered.wait()
    await _build(m, sid)
    await _build(m, sid)
    held.release()
    await task


async def test_builds_during_an_append_are_kept(manager: SessionManager, backend_url: str) -> None:
    sid = await _session(manager)
    await _build(manager, sid)
    held = Held(manager.store.messages, "append")
    answer = _text(Role.ASSISTANT, "done", Usage(input_tokens=300, output_tokens=5))
    await _during(manager, held, manager.append(sid, [answer], None, None), sid)
    assert _builds(manager, sid) == 3
    await manager.append(sid, [_text(Role.USER, "next")], None, None)
    assert await _stored_builds(backend_url, sid) == 3


async def test_builds_during_a_compaction_are_kept(
    manager: SessionManager, backend_url: str
) -> None:
    sid = await _session(manager)
    await _build(manager, sid)
    held = Held(manager.store.checkpoints, "commit")
    await _during(manager, held, manager.compact(sid, "", 0, None), sid)
    assert _builds(manager, sid) == 3
    await manager.append(sid, [_text(Role.USER, "next")], None, None)
    assert await _stored_builds(backend_url, sid) == 3


@pytest.mark.parametrize("tokenizer", ["heuristic", "tiktoken:o200k_base"])
async def test_builds_during_a_settings_change_are_kept(
    manager: SessionManager, backend_url: str, tokenizer: str
) -> None:
    """UpdateSession keeps the copy (same tokenizer) or puts a rebuilt one in its
    place, every kept message recounted (a new tokenizer): either way the builds
    counted while it waited stay."""
    sid = await _session(manager)
    await _build(manager, sid)
    current = (await manager.runtime.context(sid)).session
    updated = replace(current, policy=replace(current.policy, tokenizer=tokenizer))
    held = Held(manager.store.sessions, "update")
    change = manager.update_session(updated, ["policy"], "")
    await _during(manager, held, change, sid)
    assert _builds(manager, sid) == 3
    await manager.append(sid, [_text(Role.USER, "next")], None, None)
    assert await _stored_builds(backend_url, sid) == 3


async def test_each_build_is_counted_once_whatever_the_write_did(
    manager: SessionManager,
) -> None:
    """The rule the release applies, on the hot copy itself: a holder that put nothing
    in memory, one that put a version planned before the builds, one planned between
    them, a copy replaced meanwhile (it lost them, as a dropped copy does) and one
    rebuilt in its place by the holder (it keeps them)."""
    sid = await _session(manager)
    hot = manager.hot
    ctx = hot.get(sid)
    assert ctx is not None
    count = functools.partial(hot.count_build, sid, PREFIX)
    async with hot.lock(sid):  # a write that failed: nothing put in memory
        count()
    assert _builds(manager, sid) == 1
    async with hot.lock(sid):  # planned before both builds
        planned = ctx.session
        count()
        count()
        ctx.session = replace(planned, version=planned.version + 1)
    assert _builds(manager, sid) == 3
    async with hot.lock(sid):  # planned after the first
        count()
        planned = ctx.session
        count()
        ctx.session = replace(planned, version=planned.version + 1)
    assert _builds(manager, sid) == 5
    assert ctx.session.usage.cache.input_tokens == 5 * PREFIX.input_tokens
    async with hot.lock(sid):  # the copy was restored meanwhile: its own counts stand
        planned = ctx.session
        count()
        restored = SessionContext(planned, ctx.checkpoint, ctx.active_messages, ctx.tokenizer)
        hot.put(sid, restored)
    assert _builds(manager, sid) == 5 and ctx.session.usage.cache.builds == 6
    async with hot.lock(sid):  # rebuilt in place by the holder: it continues the copy
        planned = restored.session
        count()
        rebuilt = SessionContext(planned, ctx.checkpoint, ctx.active_messages, ctx.tokenizer)
        hot.put_rebuilt(sid, rebuilt)
    assert hot.get(sid) is rebuilt and _builds(manager, sid) == 6


PREFIX = CachePrefix(
    shared_tokens=5, shared_bytes=20, input_tokens=7, previous_tokens=6, reason=CacheBreak.NONE
)
