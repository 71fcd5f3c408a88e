"""SQLite writers queue in the process, not on pooled connections."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from ctxwarden.core.session import Session
from ctxwarden.store.engine import make_engine
from ctxwarden.store.repository import Store
from ctxwarden.util import ids

WRITERS = 40
"""More than the SQLite pool lends (5 + 10 overflow)."""


@pytest.fixture
async def repo(backend_url: str) -> AsyncIterator[Store]:
    r = Store(make_engine(backend_url, pool_timeout=1.0))
    yield r
    await r.close()


async def _until(predicate: object) -> None:
    """Give the event loop turns until ``predicate()`` holds (bounded)."""
    assert callable(predicate)
    for _ in range(10_000):
        if predicate():
            return
        await asyncio.sleep(0)
    raise AssertionError("condition never held")


@pytest.mark.parametrize("backend_url", ["sqlite"], indirect=True)
async def test_waiting_writers_hold_no_pooled_connection(repo: Store) -> None:
    probe = f"gate-{ids.new_id()}"
    await repo.sessions.create(Session(session_id=probe, create_time_us=ids.now_us()), None)
    sids = [f"gate-{ids.new_id()}" for _ in range(WRITERS)]
    async with repo.gate.hold():  # the group committer's turn, say
        tasks = [
            asyncio.create_task(
                repo.sessions.create(Session(session_id=sid, create_time_us=ids.now_us()), None)
            )
            for sid in sids
        ]
        await _until(lambda: repo.gate.waiting == WRITERS)
        pool = repo.engine.pool
        assert pool.checkedout() == 0  # type: ignore[attr-defined]
        # Reads are served at once although forty writers wait (the pool is free).
        assert await repo.sessions.get(probe) is not None
    await asyncio.gather(*tasks)
    for sid in sids:
        assert await repo.sessions.get(sid) is not None


async def test_gate_serialises_only_single_writer_databases(repo: Store) -> None:
    assert repo.gate.serialised == (repo.engine.dialect.name == "sqlite")
