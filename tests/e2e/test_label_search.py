"""The console's label search (store/labels.py): exact key and value equality over
the ``session_labels`` rows, of one tenant only, kept in step with the labels by
every path that writes them (create, update, fork, import, delete, purge)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import pytest
from sqlalchemy import select

from ctxwarden.core.search import SessionQuery
from ctxwarden.core.session import Session
from ctxwarden.core.tenancy import scoped_id
from ctxwarden.service.manager import SessionManager
from ctxwarden.store.console_reads import ConsoleReads
from ctxwarden.store.purge import purge_deleted
from ctxwarden.store.tables import SL
from ctxwarden.store.transfer import export_records, import_records
from ctxwarden.util import ids
from tests.support.inproc import replica

TRICKY = [
    ("env", "prod"),
    ("env", "Prod"),
    ("env", "prod "),
    ("env", "pro%"),
    ("env", "pr_d"),
    ("env", "%"),
    ("path", "C:\\dir\\new"),
    ("quote", 'it\'s "quoted"'),
    ("json", '{"env":"prod"}'),
    ('"env":"prod"', "x"),
    ("k%", "v"),
    ("k_", "v"),
    ("ünï", "çødé 🎉"),
]
"""Labels a pattern or a collation would confuse: each names exactly one session."""


@pytest.fixture
async def manager(backend_url: str) -> AsyncIterator[SessionManager]:
    async with replica(backend_url) as m:
        yield m


async def _found(
    reads: ConsoleReads, tenant: str, key: str, value: str = "", limit: int = 100
) -> set[str]:
    query = SessionQuery(tenant=tenant, label_key=key, label_value=value)
    return {
        s.session_id for s in (await reads.search_sessions(query, after=None, limit=limit)).sessions
    }


async def test_search_is_exact_and_never_crosses_tenants(manager: SessionManager) -> None:
    run = uuid.uuid4().hex[:8]
    tenants = (f"la{run}", f"lb{run}")
    for tenant in tenants:  # the same session IDs and labels in both tenants
        for i, (key, value) in enumerate(TRICKY):
            sid = scoped_id(tenant, f"s{i}")
            await manager.create_session(
                Session(session_id="", labels={key: value}), sid, None, tenant
            )
    reads = ConsoleReads(manager.store.engine)
    for tenant in tenants:
        for i, (key, value) in enumerate(TRICKY):
            # One hit a page: a near miss scanned first would leave the page empty.
            assert await _found(reads, tenant, key, value, 1) == {scoped_id(tenant, f"s{i}")}, (
                key,
                value,
            )
        with_env = {scoped_id(tenant, f"s{i}") for i, (k, _) in enumerate(TRICKY) if k == "env"}
        assert await _found(reads, tenant, "env") == with_env  # a key alone: any value
        assert await _found(reads, tenant, "env", "PROD") == set()
        assert await _found(reads, tenant, "e%") == set()
        assert await _found(reads, tenant, "env", "pro") == set()
    assert await _found(reads, f"lc{run}", "env", "prod") == set()  # a tenant with none


async def test_rows_follow_every_write_of_the_labels(manager: SessionManager) -> None:
    tenant = f"lw{uuid.uuid4().hex[:8]}"
    sid = scoped_id(tenant, "s")
    reads = ConsoleReads(manager.store.engine)
    await manager.create_session(
        Session(session_id="", labels={"stage": "a", "keep": "1"}), sid, None, tenant
    )
    assert await _found(reads, tenant, "stage", "a") == {sid}

    # UpdateSession with a field mask: the labels' rows only change with the labels.
    await manager.update_session(Session(session_id=sid, title="renamed"), ["title"], "")
    assert await _found(reads, tenant, "stage", "a") == {sid}
    await manager.update_session(Session(session_id=sid, labels={"stage": "b"}), ["labels"], "")
    assert await _found(reads, tenant, "stage", "a") == set()
    assert await _found(reads, tenant, "keep") == set()
    assert await _found(reads, tenant, "stage", "b") == {sid}

    # A fork carries its source's labels; an import carries the exported ones.
    fork = await manager.fork_session(sid, 0, scoped_id(tenant, "fork"), None, tenant)
    copy = scoped_id(tenant, "copy")
    records = [r async for r in export_records(manager.store.engine, sid)]
    await import_records(manager.store.engine, copy, records)
    assert await _found(reads, tenant, "stage", "b") == {sid, fork.session_id, copy}

    # Deleted: no longer found. Its ID used again: only the new labels are.
    await manager.delete_session(sid)
    assert await _found(reads, tenant, "stage", "b") == {fork.session_id, copy}
    await manager.create_session(Session(session_id="", labels={"stage": "c"}), sid, None, tenant)
    assert await _found(reads, tenant, "stage", "c") == {sid}
    await manager.delete_session(sid)
    await manager.delete_session(copy)

    # A purge removes the rows with the sessions.
    async def rows() -> list[str]:
        q = select(SL.c.session_id).where(SL.c.tenant_id == tenant).order_by(SL.c.session_id)
        async with manager.store.engine.connect() as conn:
            return [str(r) for r in (await conn.scalars(q)).all()]

    assert len(await rows()) == 4  # the fork's, the copy's and both incarnations' of sid
    await purge_deleted(manager.store.engine, deleted_before_us=ids.now_us() + 1)
    # Left: the fork's, and its parent's (the first incarnation of sid, retired,
    # stays while the fork reads from it).
    kept = await rows()
    assert len(kept) == 2 and fork.session_id in kept
    assert next(k for k in kept if k != fork.session_id).startswith(sid + "#")


async def test_an_import_refuses_labels_that_are_not_strings(manager: SessionManager) -> None:
    tenant = f"li{uuid.uuid4().hex[:8]}"
    sid = scoped_id(tenant, "s")
    await manager.create_session(Session(session_id="", labels={"a": "b"}), sid, None, tenant)
    records = [r async for r in export_records(manager.store.engine, sid)]
    records[0] = {**records[0], "labels": {"a": 5}}
    with pytest.raises(ValueError, match="labels"):
        await import_records(manager.store.engine, scoped_id(tenant, "bad"), records)
    assert await manager.store.sessions.get(scoped_id(tenant, "bad")) is None
