"""Version checks: concurrent questions share queries; answers follow other writers."""

from __future__ import annotations

import asyncio

from sqlalchemy import update

from ctxwarden.core.session import Session
from ctxwarden.store.engine import make_engine
from ctxwarden.store.models import SessionRow
from ctxwarden.store.repository import Store, StoredVersion
from ctxwarden.util import ids


async def test_concurrent_checks_share_queries_and_see_other_writers(backend_url: str) -> None:
    repo = Store(make_engine(backend_url))
    try:
        sids = [f"vr-{ids.new_id()}" for _ in range(30)]
        for sid in sids:
            await repo.sessions.create(Session(session_id=sid, version=1, create_time_us=1), None)
        before = repo.versions.queries
        answers = await asyncio.gather(*(repo.sessions.version(s) for s in sids * 2))
        assert answers == [StoredVersion(1, False)] * 60
        assert repo.versions.queries - before < 60  # batched, not one query per asker
        async with repo.engine.begin() as conn:  # another replica's write
            await conn.execute(
                update(SessionRow).where(SessionRow.session_id == sids[0]).values(version=7)
            )
        assert await repo.sessions.version(sids[0]) == StoredVersion(7, False)
        assert await repo.sessions.version("vr-missing") is None
        await repo.sessions.delete(sids[1], ids.now_us())
        assert await repo.sessions.version(sids[1]) == StoredVersion(2, True)
    finally:
        await repo.close()
