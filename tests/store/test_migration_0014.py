"""Upgrading a 0013 database: every session's labels (deleted sessions' too, over
more than one backfill batch) become ``session_labels`` rows equal to the ones
the server writes, and the console's search finds them exactly, per tenant."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from sqlalchemy import create_engine, select, text

from ctxwarden.core.search import SessionQuery
from ctxwarden.core.session import Session
from ctxwarden.store import migrate
from ctxwarden.store.codec import session_row_values
from ctxwarden.store.console_reads import ConsoleReads
from ctxwarden.store.engine import make_engine
from ctxwarden.store.labels import label_rows
from ctxwarden.store.repository import Store
from ctxwarden.store.tables import SL
from ctxwarden.store.urls import sync_url
from tests.support.databases import BACKEND_PARAMS, fresh_database

SESSIONS = 520
"""More than one backfill batch (500)."""
LABELS = {"env": "prod ", "q": 'it\'s "x" \\ %_', "json": '{"a":"b"}', "ünï": "🎉"}


@pytest.fixture(params=BACKEND_PARAMS)
def fresh_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    with fresh_database(request.param, tmp_path, "ctxw_mig14") as url:
        yield url


def _sessions() -> list[Session]:
    out = []
    for i in range(SESSIONS):
        tenant = "acme" if i % 2 else "evil"
        labels = {**LABELS, "n": str(i)} if i % 3 else {}
        out.append(
            Session(
                session_id=f"{tenant}~s{i:04d}",
                labels=labels,
                create_time_us=i + 1,
                update_time_us=i + 1,
                delete_time_us=7 if i % 5 == 0 else 0,
                version=1,
            )
        )
    return out


def _write_0013(url: str, sessions: list[Session]) -> None:
    rows = [session_row_values(s) for s in sessions]
    # An entry the server never writes (not a string pair) gets no row.
    rows[1]["labels_json"] = '{"env":"prod ","odd":5}'
    cols = ", ".join(rows[0])
    marks = ", ".join(":" + k for k in rows[0])
    engine = create_engine(sync_url(url))
    with engine.begin() as conn:
        conn.execute(text(f"INSERT INTO sessions ({cols}) VALUES ({marks})"), rows)
    engine.dispose()


async def test_upgrade_from_0013_backfills_the_labels(fresh_url: str) -> None:
    migrate.upgrade(fresh_url, "0013")
    sessions = _sessions()
    _write_0013(fresh_url, sessions)
    sessions[1] = replace(sessions[1], labels={"env": "prod "})  # as _write_0013 left it
    assert migrate.upgrade(fresh_url).up_to_date
    store = Store(make_engine(fresh_url))
    try:
        async with store.engine.connect() as conn:
            got = [dict(r._mapping) for r in await conn.execute(select(SL))]
        expected = [row for s in sessions for row in label_rows(s.session_id, s.labels)]
        key = lambda r: (r["session_id"], r["key_digest"])  # noqa: E731
        assert sorted(got, key=key) == sorted(expected, key=key)

        reads = ConsoleReads(store.engine)
        for tenant, first in (("acme", 1), ("evil", 2)):
            for label, value in LABELS.items():
                query = SessionQuery(tenant=tenant, label_key=label, label_value=value)
                hits = await reads.search_sessions(query, after=None, limit=SESSIONS)
                live = {
                    s.session_id
                    for s in sessions[first::2]
                    if s.labels.get(label) == value and not s.delete_time_us
                }
                assert {s.session_id for s in hits.sessions} == live
        # The upgraded rows go on like new ones: an update replaces them.
        stored = await store.sessions.get("acme~s0001")
        assert stored is not None
        changed = replace(stored, labels={"env": "dev"}, version=stored.version + 1)
        await store.sessions.update(changed, expected_version=stored.version)
        async with store.engine.connect() as conn:
            mine = select(SL.c.label_key, SL.c.label_value).where(SL.c.session_id == "acme~s0001")
            assert [tuple(r) for r in await conn.execute(mine)] == [("env", "dev")]
    finally:
        await store.close()
