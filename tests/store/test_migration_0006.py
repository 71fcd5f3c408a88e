"""Upgrading a 0005 database keeps every row readable: legacy JSON bodies and settings,
idempotency records split into typed columns, calibration backfilled, tenants counted."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import create_engine, select, text

from ctxwarden.core.session import Session
from ctxwarden.store import migrate
from ctxwarden.store.codec import session_row_values
from ctxwarden.store.engine import make_engine
from ctxwarden.store.models import TenantRow
from ctxwarden.store.repository import RequestScope, Store
from ctxwarden.store.urls import sync_url
from tests.support.databases import BACKEND_PARAMS, fresh_database

SID = "acme~legacy_1"


@pytest.fixture(params=BACKEND_PARAMS)
def fresh_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    with fresh_database(request.param, tmp_path, "ctxw_mig") as url:
        yield url


def _legacy_rows(url: str) -> None:
    values = session_row_values(
        Session(
            session_id=SID,
            system_prompt="old prompt",
            last_seq=2,
            create_time_us=1,
            update_time_us=1,
        )
    )
    values.pop("version")
    values.pop("state_json")  # from 0007 on
    later = ("parent_key", "parent_seq", "fork_seq", "archive_time_us", "memory_json")
    for column in (*later, "usage_json"):  # from 0008, 0009, 0010 and 0013 on
        values.pop(column)
    values["compaction_id"] = ""
    values["stored_bytes"] = 123
    body = {
        "content": [{"t": "text", "text": 'hello \u0001 "quoted"'}],
        "metadata": {"calib": "client value"},
    }
    answer = {
        "content": [{"t": "tool_call", "id": "c1", "name": "read", "arguments_json": "{}"}],
        "usage": [40, 5, 0, 0, 0],
        "calib": [1.25, 3],
    }
    engine = create_engine(sync_url(url))
    with engine.begin() as conn:
        cols = ", ".join(values)
        conn.execute(
            text(f"INSERT INTO sessions ({cols}) VALUES ({', '.join(':' + k for k in values)})"),
            values,
        )
        for seq, b in ((1, body), (2, answer)):
            conn.execute(
                text(
                    "INSERT INTO messages (session_id, seq, message_id, role, state, stop_reason,"
                    " token_count, create_time_us, counted_with, rolled_back_at_seq, body)"
                    " VALUES (:s, :q, :m, :r, 1, 1, 7, 1, 'heuristic', 0, :b)"
                ),
                {"s": SID, "q": seq, "m": f"m{seq}", "r": seq, "b": json.dumps(b)},
            )
        conn.execute(
            text(
                "INSERT INTO session_revisions (session_id, revision, at_seq, settings_json,"
                " create_time_us) VALUES (:s, 1, 0, :j, 1)"
            ),
            {"s": SID, "j": json.dumps({"system_prompt": "old prompt"})},
        )
        for scope, rid in ((f"AppendMessages/{SID}", "r1"), ("CreateSession/acme", "r2")):
            conn.execute(
                text(
                    "INSERT INTO request_log (scope, request_id, request_hash, outcome,"
                    " create_time_us) VALUES (:sc, :r, 'h', :o, 1)"
                ),
                {"sc": scope, "r": rid, "o": b'{"ok":1}'},
            )
    engine.dispose()


async def test_upgrade_from_0005_keeps_every_row_readable(fresh_url: str) -> None:
    migrate.upgrade(fresh_url, "0005")
    _legacy_rows(fresh_url)
    assert migrate.upgrade(fresh_url).up_to_date
    repo = Store(make_engine(fresh_url))
    try:
        snap = await repo.load_snapshot(SID)
        assert snap is not None
        first, second = snap.kept
        assert first.text == 'hello \u0001 "quoted"'
        assert first.metadata == {"calib": "client value"}
        assert first.calibration is None
        assert second.calibration == (1.25, 3)
        assert second.tool_calls[0].tool_call_id == "c1"
        replay = await repo.replay_snapshot(SID, 3)
        assert replay is not None
        assert replay.session.system_prompt == "old prompt"
        assert (replay.session.estimate_ratio, replay.session.estimate_samples) == (1.25, 3)
        found = await repo.requests.get(RequestScope("AppendMessages", SID, "acme"), "r1")
        assert found is not None and found.outcome == {"ok": 1}
        created = await repo.requests.get(RequestScope("CreateSession", tenant_id="acme"), "r2")
        assert created is not None
        async with repo.engine.connect() as conn:
            row = (await conn.execute(select(TenantRow).where(TenantRow.tenant_id == "acme"))).one()
        assert (row.sessions, row.stored_bytes) == (1, 123)
    finally:
        await repo.close()
