"""Upgrading a 0006 database: sessions and messages stay readable (with no state),
and the widened keys take 255-character IDs behind a tenant prefix."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

from ctxwarden.core.messages import ContentBlock, Message, Role
from ctxwarden.core.session import Session
from ctxwarden.store import migrate
from ctxwarden.store.codec import message_row_values, session_row_values
from ctxwarden.store.engine import make_engine
from ctxwarden.store.repository import StateOwner, Store
from ctxwarden.store.urls import sync_url
from tests.support.databases import BACKEND_PARAMS, fresh_database

SID = "acme~before_0007"


@pytest.fixture(params=BACKEND_PARAMS)
def fresh_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    with fresh_database(request.param, tmp_path, "ctxw_mig7") as url:
        yield url


def _rows_of_0006(url: str) -> None:
    session = session_row_values(
        Session(session_id=SID, user_id="u", last_seq=1, create_time_us=1, update_time_us=1)
    )
    session.pop("state_json")
    later = ("parent_key", "parent_seq", "fork_seq", "archive_time_us", "memory_json")
    for column in (*later, "usage_json"):  # from 0008, 0009, 0010 and 0013 on
        session.pop(column)
    message = message_row_values(
        SID, Message(Role.USER, (ContentBlock.of_text("hello"),), seq=1, message_id="m1")
    )
    engine = create_engine(sync_url(url))
    with engine.begin() as conn:
        for table, values in (("sessions", session), ("messages", message)):
            cols = ", ".join(values)
            marks = ", ".join(":" + k for k in values)
            conn.execute(text(f"INSERT INTO {table} ({cols}) VALUES ({marks})"), values)
    engine.dispose()


async def test_upgrade_from_0006(fresh_url: str) -> None:
    migrate.upgrade(fresh_url, "0006")
    _rows_of_0006(fresh_url)
    assert migrate.upgrade(fresh_url).up_to_date
    store = Store(make_engine(fresh_url))
    try:
        snap = await store.load_snapshot(SID)
        assert snap is not None and snap.session.state == {}
        assert [m.text for m in snap.kept] == ["hello"]
        shared = await store.states.get(StateOwner("acme", "", "u"))
        assert shared.user == {} and shared.project == {}
        long_id = "acme~" + "x" * 255
        await store.sessions.create(Session(session_id=long_id, create_time_us=2), None)
        stored = await store.sessions.get(long_id)
        assert stored is not None and stored.session_id == long_id
    finally:
        await store.close()
