"""Reads of the usage ledger across sessions (a session's own is its row's
``usage_json``, read with the session)."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine

from ctxwarden.core.usage_ledger import EMPTY_LEDGER, UsageLedger, ledger_of_json
from ctxwarden.store.errors import boundary
from ctxwarden.store.tables import S


class UsageRepository:
    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine

    @boundary
    async def tenant(self, tenant: str) -> tuple[int, UsageLedger]:
        """The tenant's session count and the sum of their ledgers (deleted
        sessions count until purged). One indexed scan of the tenant's rows."""
        q = select(S.c.usage_json).where(S.c.tenant_id == tenant)
        count = 0
        total = EMPTY_LEDGER
        async with self.engine.connect() as conn:
            for row in await conn.execute(q):
                count += 1
                if row.usage_json:
                    total = total.merge(ledger_of_json(row.usage_json))
        return count, total
