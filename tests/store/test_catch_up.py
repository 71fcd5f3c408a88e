"""A replica's stale copy catches up from what other replicas appended (O(appended))
instead of being restored whole (O(kept)), and only when nothing else changed.

Two managers over one database are two replicas. Whatever path a stale copy takes
(a write that lost its compare-and-set, a read that found the version moved on),
the context it ends with must be the one a fresh restore makes; and any write
that is not a plain append (a rollback, new settings, a compaction, an append with
a state change) must send it through a full restore.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import replace
from typing import Any

import pytest

from ctxwarden.config import Settings
from ctxwarden.core.context import SessionContext
from ctxwarden.core.messages import ContentBlock, Message, Role, StopReason, Usage
from ctxwarden.core.session import Session
from ctxwarden.core.state import StateDelta
from ctxwarden.service.manager import SessionManager
from ctxwarden.store.engine import make_engine
from ctxwarden.store.repository import Store
from ctxwarden.util import ids

Replicas = tuple[SessionManager, SessionManager]


@pytest.fixture
async def replicas(backend_url: str) -> AsyncIterator[Replicas]:
    settings = Settings(max_read_staleness_seconds=0.0)  # every read checks the version
    a = SessionManager(Store(make_engine(backend_url)), settings)
    b = SessionManager(Store(make_engine(backend_url)), settings)
    try:
        yield a, b
    finally:
        await a.close()
        await b.close()


def _user(text: str) -> Message:
    return Message(Role.USER, (ContentBlock.of_text(text),))


def _turn(i: int) -> list[Message]:
    """A user message, a tool call, its result and an answer with usage."""
    call = ContentBlock.of_tool_call(f"c{i}", "read", '{"path": "a.py"}')
    return [
        _user(f"step {i}"),
        Message(Role.ASSISTANT, (call,), stop_reason=StopReason.TOOL_USE),
        Message(Role.TOOL_RESULT, (ContentBlock.of_text("x" * 300),), tool_call_id=f"c{i}"),
        Message(
            Role.ASSISTANT,
            (ContentBlock.of_text(f"done {i}"),),
            usage=Usage(input_tokens=400 + 50 * i, output_tokens=20),
        ),
    ]


async def _session(a: SessionManager) -> str:
    sid = f"catch-{ids.new_id()}"
    await a.create_session(Session(session_id=sid, system_prompt="be brief"), sid, None)
    return sid


def _copy(m: SessionManager, sid: str) -> SessionContext:
    ctx = m.hot.get(sid)
    assert ctx is not None
    return ctx


def _same(copy: SessionContext, restored: SessionContext) -> None:
    """The copy is the context a restore makes."""
    assert copy.session == restored.session
    assert copy.entries == restored.entries
    assert copy.context_tokens == restored.context_tokens
    assert dict(copy.calls) == dict(restored.calls)
    assert copy.checkpoint == restored.checkpoint


async def _restored(backend_url: str, sid: str) -> SessionContext:
    fresh = SessionManager(Store(make_engine(backend_url)), Settings())
    try:
        await fresh.build_model_input(sid, 0)
        return _copy(fresh, sid)
    finally:
        await fresh.close()


async def test_a_write_that_lost_the_race_catches_up(replicas: Replicas, backend_url: str) -> None:
    a, b = replicas
    sid = await _session(a)
    await a.append(sid, _turn(0), None, None)
    await b.build_model_input(sid, 0)  # b holds a copy
    assert b.restores == 1
    for i in (1, 2, 3):
        await a.append(sid, _turn(i), None, None)  # b's copy is three appends behind

    result = await b.append(sid, [_user("from b")], None, None)

    assert result.last_seq == 17  # planned again on the caught-up copy
    assert (b.restores, b.runtime.catch_ups) == (1, 1)
    _same(_copy(b, sid), await _restored(backend_url, sid))
    live = await b.build_model_input(sid, 0)
    assert live.messages[-1].content[0].text == "from b"


async def test_a_read_that_finds_the_copy_stale_catches_up(
    replicas: Replicas, backend_url: str
) -> None:
    a, b = replicas
    sid = await _session(a)
    await a.append(sid, _turn(0), None, None)
    await b.build_model_input(sid, 0)
    await a.append(sid, _turn(1), None, None)

    view = await b.build_model_input(sid, 0)

    assert (b.restores, b.runtime.catch_ups) == (1, 1)
    assert view.messages[-1].content[0].text == "done 1"
    _same(_copy(b, sid), await _restored(backend_url, sid))


Change = Callable[[SessionManager, str], Awaitable[Any]]


async def _rollback(a: SessionManager, sid: str) -> None:
    await a.rollback(sid, 2, "the model failed", None)


async def _new_settings(a: SessionManager, sid: str) -> None:
    current = await a.get_session(sid)
    await a.update_session(replace(current, system_prompt="be thorough"), ["system_prompt"], "")


async def _compaction(a: SessionManager, sid: str) -> None:
    handle = await a.prepare_compaction(sid, "", keep_recent_tokens=1)
    await a.commit_compaction(sid, handle.plan_id, "Goal: read a.py.", "Reading a.py.")


async def _state_change(a: SessionManager, sid: str) -> None:
    await a.append(sid, [], None, None, StateDelta(session={"step": 2}))


@pytest.mark.parametrize(
    "change",
    [_rollback, _new_settings, _compaction, _state_change],
    ids=["rollback", "settings", "compaction", "state"],
)
async def test_anything_but_appends_in_between_restores_the_copy(
    replicas: Replicas, backend_url: str, change: Change
) -> None:
    a, b = replicas
    sid = await _session(a)
    await a.append(sid, _turn(0), None, None)
    await a.append(sid, _turn(1), None, None)
    await b.build_model_input(sid, 0)
    await change(a, sid)
    await a.append(sid, _turn(2), None, None)  # a plain append after it: the run restarts

    await b.append(sid, [_user("from b")], None, None)

    assert (b.restores, b.runtime.catch_ups) == (2, 0)
    _same(_copy(b, sid), await _restored(backend_url, sid))
    # From now on b's copy is current again, and only appends follow: a catch-up.
    await a.append(sid, _turn(3), None, None)
    await b.build_model_input(sid, 0)
    assert (b.restores, b.runtime.catch_ups) == (2, 1)
    _same(_copy(b, sid), await _restored(backend_url, sid))
