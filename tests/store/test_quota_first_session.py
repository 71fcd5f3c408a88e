"""A tenant's first sessions, created at once, are counted and never refused by an
unlimited quota.

``TenantQuota.claim_session`` counts a session with one UPDATE of the tenant's
counter row and creates that row for the tenant's first session. Two first creates
race: the one whose UPDATE found no row, and that then finds the row its rival has
just committed, used to give up, answering RESOURCE_EXHAUSTED "this tenant's storage
quota is 0 bytes" (unlimited). Seen in CI under load on PostgreSQL. The race is
made here with a connection that lets the rival commit right after the first UPDATE.
Before the fix: QuotaExceeded "stored_bytes: 10 used of 0" on MariaDB and PostgreSQL.
"""

from __future__ import annotations

from typing import Any, cast

import pytest
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncConnection

from ctxwarden.store.engine import make_engine
from ctxwarden.store.quota import TenantQuota
from ctxwarden.store.tables import T
from ctxwarden.util import ids


class _RivalCommitsAfterFirstStatement:
    """A connection whose first statement is followed by a rival's committed create."""

    def __init__(self, conn: AsyncConnection, rival: Any) -> None:
        self.conn, self.rival, self.statements = conn, rival, 0

    def __getattr__(self, name: str) -> Any:  # dialect and the rest: the connection's
        return getattr(self.conn, name)

    async def execute(self, statement: Any, *args: Any, **kwargs: Any) -> Any:
        result = await self.conn.execute(statement, *args, **kwargs)
        self.statements += 1
        if self.statements == 1:
            await self.rival()
        return result


# SQLite has one writer at a time (and the server's write gate queues them): no race.
@pytest.mark.parametrize("backend_url", ["mysql", "postgres"], indirect=True)
async def test_a_first_session_raced_by_another_is_counted(backend_url: str) -> None:
    tenant = f"t{ids.new_id().lower()}"
    engine = make_engine(backend_url)
    quota = TenantQuota()  # unlimited
    try:

        async def rival() -> None:
            async with engine.begin() as other:
                await quota.claim_session(other, tenant, 10)

        async with engine.begin() as conn:
            raced = _RivalCommitsAfterFirstStatement(conn, rival)
            await quota.claim_session(cast(AsyncConnection, raced), tenant, 20)
        async with engine.connect() as conn:
            row = (
                await conn.execute(
                    select(T.c.sessions, T.c.stored_bytes).where(T.c.tenant_id == tenant)
                )
            ).one()
    finally:
        await engine.dispose()
    assert (row.sessions, row.stored_bytes) == (2, 30)
