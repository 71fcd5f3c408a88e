"""import_sessions: a session and its forks (a pi file's branches) in one
transaction, stored as ForkSession stores forks; any failure writes nothing."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import select

from ctxwarden.core.tenancy import scoped_id
from ctxwarden.store.engine import make_engine
from ctxwarden.store.errors import DuplicateKey, QuotaExceeded
from ctxwarden.store.quota import TenantQuota
from ctxwarden.store.restore import load_snapshot
from ctxwarden.store.tables import C, M, S
from ctxwarden.store.transfer import Incoming, import_sessions
from ctxwarden.transfer.pi_format import Entry
from ctxwarden.transfer.pi_import import PiSession, pi_sessions, read_pi
from ctxwarden.transfer.run import incoming_of
from ctxwarden.util import ids

TIME = "2026-01-02T03:04:05.000Z"


def _msg(eid: str, parent: str | None, role: str, text: str) -> Entry:
    body: dict[str, Any] = {"role": role, "content": [{"type": "text", "text": text}]}
    if role == "assistant":
        body.update(provider="anthropic", model="claude-sonnet-4-5", stopReason="stop")
    return {"type": "message", "id": eid, "parentId": parent, "timestamp": TIME, "message": body}


def _pi_file() -> list[str]:
    """Main: u1 a1 u2 a2 [compaction keeping u2] u3 a3 u7 (u7 last in the file).
    Off a3: u4 a4 (a fork); off u4: u5 (a fork of that fork); off a1: u6."""
    entries = [
        _msg("u1", None, "user", "one"),
        _msg("a1", "u1", "assistant", "1"),
        _msg("u2", "a1", "user", "two"),
        _msg("a2", "u2", "assistant", "2"),
        {
            "type": "compaction",
            "id": "k1",
            "parentId": "a2",
            "timestamp": TIME,
            "summary": "counted to two",
            "firstKeptEntryId": "u2",
            "tokensBefore": 100,
        },
        _msg("u3", "k1", "user", "three"),
        _msg("a3", "u3", "assistant", "3"),
        _msg("u4", "a3", "user", "four"),
        _msg("a4", "u4", "assistant", "4"),
        _msg("u5", "u4", "user", "five"),
        _msg("u6", "a1", "user", "six"),
        _msg("u7", "a3", "user", "seven"),
    ]
    header = {"type": "session", "version": 3, "id": "pi-1", "timestamp": TIME, "cwd": "/p"}
    return [json.dumps(e) for e in (header, *entries)]


def _incoming(tenant: str, sessions: list[PiSession]) -> list[Incoming]:
    return incoming_of(tenant, sessions)


async def _rows(url: str, keys: list[str]) -> dict[str, Any]:
    engine = make_engine(url)
    try:
        async with engine.connect() as conn:
            sessions = (await conn.execute(select(S).where(S.c.session_id.in_(keys)))).all()
            messages = (await conn.execute(select(M).where(M.c.session_id.in_(keys)))).all()
            checkpoints = (await conn.execute(select(C).where(C.c.session_id.in_(keys)))).all()
    finally:
        await engine.dispose()
    return {"sessions": sessions, "messages": messages, "checkpoints": checkpoints}


async def test_a_session_and_its_forks_share_rows_and_checkpoints(backend_url: str) -> None:
    tenant = f"t{ids.new_id().lower()}"
    sessions = pi_sessions(read_pi(_pi_file()), "s")
    assert [(s.session_id, s.parent_id, s.parent_seq) for s in sessions] == [
        ("s", "", 0),
        ("s.a4", "s", 6),
        ("s.u5", "s.a4", 7),
        ("s.u6", "s", 2),
    ]
    engine = make_engine(backend_url)
    try:
        results = await import_sessions(engine, _incoming(tenant, sessions))
        assert [(r.messages, r.checkpoints) for r in results] == [(7, 1), (2, 1), (1, 1), (1, 0)]
        key = {s.session_id: scoped_id(tenant, s.session_id) for s in sessions}
        rows = await _rows(backend_url, [*key.values()])
        lineage = {
            str(r.session_id): (r.parent_key, r.parent_seq, r.fork_seq) for r in rows["sessions"]
        }
        assert lineage == {
            key["s"]: ("", 0, 0),
            key["s.a4"]: (key["s"], 6, 7),
            key["s.u5"]: (key["s.a4"], 7, 8),
            key["s.u6"]: (key["s"], 2, 3),
        }
        [original] = [r for r in rows["checkpoints"] if r.session_id == key["s"]]
        copies = [r for r in rows["checkpoints"] if r.session_id != key["s"]]
        assert {r.origin_id for r in copies} == {original.compaction_id}
        assert {str(r.session_id) for r in copies} == {key["s.a4"], key["s.u5"]}
        # The fork of the fork reads u2 on (kept) along the chain, then its own u5.
        snap = await load_snapshot(engine, key["s.u5"])
        assert snap is not None and snap.checkpoint is not None
        assert snap.checkpoint.compaction_id == original.compaction_id
        assert [m.message_id for m in snap.kept] == ["u2", "a2", "u3", "a3", "u4", "u5"]
        early = await load_snapshot(engine, key["s.u6"])
        assert early is not None and early.checkpoint is None
        assert [m.message_id for m in early.kept] == ["u1", "a1", "u6"]
    finally:
        await engine.dispose()


def _records(records: Iterator[dict[str, Any]], change: str) -> Iterator[dict[str, Any]]:
    for r in records:
        if change == "inherited" and r["type"] == "checkpoint":
            r = {**r, "inherited": True}
        if change == "seq" and r["type"] == "message":
            r = {**r, "seq": 1}
        yield r


@pytest.mark.parametrize(
    "failure",
    ["parent not before", "inherited without a parent", "seq not after", "key twice", "quota"],
)
async def test_an_import_that_fails_writes_nothing(backend_url: str, failure: str) -> None:
    tenant = f"t{ids.new_id().lower()}"
    incoming = _incoming(tenant, pi_sessions(read_pi(_pi_file()), "s"))
    keys = [i.key for i in incoming]
    quota = TenantQuota()
    expected: type[Exception] = ValueError
    if failure == "parent not before":
        incoming[1], incoming[2] = incoming[2], incoming[1]
    elif failure == "inherited without a parent":
        incoming[0] = Incoming(incoming[0].key, _records(iter(incoming[0].records), "inherited"))
    elif failure == "seq not after":
        i = incoming[3]
        incoming[3] = Incoming(i.key, _records(iter(i.records), "seq"), i.parent_key, i.parent_seq)
    elif failure == "key twice":
        incoming[3] = Incoming(incoming[1].key, incoming[3].records)
        expected = DuplicateKey
    else:
        quota, expected = TenantQuota(max_sessions=3), QuotaExceeded
    engine = make_engine(backend_url)
    try:
        with pytest.raises(expected):
            await import_sessions(engine, incoming, quota=quota)
    finally:
        await engine.dispose()
    assert await _rows(backend_url, keys) == {"sessions": [], "messages": [], "checkpoints": []}
