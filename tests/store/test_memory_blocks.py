"""The memory block's history (store/memory_blocks.py): written with each change
of the block, read by a replay (one row), never by a restore (which reads the
session row's block: O(kept), not O(history)); moved aside with a deleted
session whose ID is used again, purged with it; and migration 0011 gives the
sessions of an older schema their current block as history."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, event, func, select, text

from ctxwarden.core.memory import EMPTY_BLOCK, MemoryBlock
from ctxwarden.core.messages import ContentBlock, Message, Role
from ctxwarden.core.session import Session
from ctxwarden.store import migrate
from ctxwarden.store.codec import session_row_values
from ctxwarden.store.engine import make_engine
from ctxwarden.store.repository import Store, purge_deleted
from ctxwarden.store.tables import MB
from ctxwarden.store.urls import sync_url
from ctxwarden.util import ids
from tests.support.databases import BACKEND_PARAMS, fresh_database

BLOCKS = [MemoryBlock(f"block {i}", (f"m{i}",)) for i in range(3)]


@pytest.fixture
async def store(backend_url: str) -> AsyncIterator[Store]:
    s = Store(make_engine(backend_url))
    try:
        yield s
    finally:
        await s.close()


def _msg(seq: int) -> Message:
    return Message(Role.USER, (ContentBlock.of_text(f"m{seq}"),), seq=seq, message_id=f"m{seq}")


class Driver:
    def __init__(self, store: Store, sid: str) -> None:
        self.store = store
        self.session = Session(
            session_id=sid, create_time_us=ids.now_us(), update_time_us=1, memory=BLOCKS[0]
        )

    async def create(self) -> None:
        await self.store.sessions.create(self.session, None)

    async def append(self, n: int) -> None:
        last = self.session.last_seq
        new = replace(self.session, last_seq=last + n, version=self.session.version + 1)
        messages = [_msg(s) for s in range(last + 1, last + n + 1)]
        await self.store.messages.append_messages(
            new, expected_version=self.session.version, messages=messages, record=None
        )
        self.session = new

    async def select(self, block: MemoryBlock) -> None:
        new = replace(self.session, memory=block, version=self.session.version + 1)
        await self.store.memories.set_block(new, block, self.session.version)
        self.session = new


async def _rows(store: Store, sid: str) -> list[tuple[int, str | None]]:
    query = select(MB.c.from_seq, MB.c.memory_json).where(MB.c.session_id == sid)
    async with store.engine.connect() as conn:
        return [(int(r.from_seq), r.memory_json) for r in await conn.execute(query)]


def _recording(store: Store) -> tuple[list[str], Any]:
    statements: list[str] = []

    def record(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        statements.append(statement)

    event.listen(store.engine.sync_engine, "before_cursor_execute", record)
    return statements, record


async def test_each_change_is_kept_and_only_a_replay_reads_it(store: Store) -> None:
    d = Driver(store, f"mb-{ids.new_id()}")
    await d.create()  # block 0 from seq 1
    await d.append(2)
    await d.select(BLOCKS[1])
    await d.select(EMPTY_BLOCK)
    await d.select(BLOCKS[2])  # three changes at last_seq 2: the last one is in force from 3
    await d.append(2)
    await d.select(EMPTY_BLOCK)  # a refresh that found nothing, from 5
    rows = await _rows(store, d.session.session_id)
    assert [(seq, value is not None) for seq, value in sorted(rows)] == [
        (1, True),
        (3, True),
        (5, False),
    ]
    expected = {1: BLOCKS[0], 2: BLOCKS[0], 3: BLOCKS[2], 4: BLOCKS[2], 5: EMPTY_BLOCK}
    statements, record = _recording(store)
    for k, block in expected.items():
        snap = await store.replay_snapshot(d.session.session_id, k)
        assert snap is not None and snap.session.memory == block, k
    reads = [s for s in statements if "FROM memory_blocks" in s]
    assert len(reads) == len(expected)  # one row each
    statements.clear()
    snap = await store.load_snapshot(d.session.session_id)
    event.remove(store.engine.sync_engine, "before_cursor_execute", record)
    assert snap is not None and snap.session.memory == EMPTY_BLOCK
    assert statements and not [s for s in statements if "memory_blocks" in s]


async def test_reused_ids_move_the_history_aside_and_purge_removes_it(store: Store) -> None:
    sid = f"mb-{ids.new_id()}"
    first = Driver(store, sid)
    await first.create()
    await first.append(1)
    await first.select(BLOCKS[1])
    assert await store.sessions.delete(sid, ids.now_us())
    second = Driver(store, sid)
    await second.create()  # the deleted one's rows move to its retired key
    assert [seq for seq, _ in await _rows(store, sid)] == [1]
    assert await store.sessions.delete(sid, ids.now_us())
    await purge_deleted(store, deleted_before_us=ids.now_us() + 1)
    async with store.engine.connect() as conn:
        left = await conn.execute(
            select(func.count()).select_from(MB).where(MB.c.session_id.like(f"{sid}%"))
        )
        assert left.scalar() == 0


@pytest.fixture(params=BACKEND_PARAMS)
def fresh_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    with fresh_database(request.param, tmp_path, "ctxw_mig11") as url:
        yield url


async def test_upgrade_from_0010_keeps_the_current_block(fresh_url: str) -> None:
    migrate.upgrade(fresh_url, "0010")
    engine = create_engine(sync_url(fresh_url))
    with engine.begin() as conn:
        for sid, block in (("acme~with", BLOCKS[1]), ("acme~without", EMPTY_BLOCK)):
            values = session_row_values(
                Session(session_id=sid, last_seq=0, create_time_us=1, update_time_us=2)
            )
            values["memory_json"] = session_row_values(replace(Session(sid), memory=block))[
                "memory_json"
            ]
            values.pop("usage_json")  # from 0013 on
            cols = ", ".join(values)
            marks = ", ".join(":" + k for k in values)
            conn.execute(text(f"INSERT INTO sessions ({cols}) VALUES ({marks})"), values)
    engine.dispose()
    assert migrate.upgrade(fresh_url).up_to_date
    store = Store(make_engine(fresh_url))
    try:
        for sid, block in (("acme~with", BLOCKS[1]), ("acme~without", EMPTY_BLOCK)):
            snap = await store.replay_snapshot(sid, 1)
            assert snap is not None and snap.session.memory == block, sid
        assert [seq for seq, _ in await _rows(store, "acme~with")] == [1]
        assert await _rows(store, "acme~without") == []
    finally:
        await store.close()
