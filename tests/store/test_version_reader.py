"""Version checks: concurrent questions share queries; answers follow other writers."""

from __future__ import annotations

import asyncio

from sqlalchemy import update

from ctxwarden import ids
from ctxwarden.core.session import Session
from ctxwarden.store.engine import make_engine
from ctxwarden.store.models import SessionRow
from ctxwarden.store.repository import Repository


async def test_concurrent_checks_share_queries_and_see_other_writers(backend_url: str) -> None:
    repo = Repository(make_engine(backend_url))
    try:
        sids = [f"vr-{ids.new_id()}" for _ in range(30)]
        for sid in sids:
            await repo.create_session(Session(session_id=sid, version=1, create_time_us=1), None)
        before = repo.versions.queries
        answers = await asyncio.gather(*(repo.session_version(s) for s in sids * 2))
        assert answers == [(1, False)] * 60
        assert repo.versions.queries - before < 60  # batched, not one query per asker
        async with repo.engine.begin() as conn:  # another replica's write
            await conn.execute(
                update(SessionRow).where(SessionRow.session_id == sids[0]).values(version=7)
            )
        assert await repo.session_version(sids[0]) == (7, False)
        assert await repo.session_version("vr-missing") is None
        await repo.delete_session(sids[1], ids.now_us())
        assert await repo.session_version(sids[1]) == (2, True)
    finally:
        await repo.close()
