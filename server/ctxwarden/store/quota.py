"""Per-tenant quotas, enforced in the same transaction as the write they limit.

The counters live in the ``tenants`` table. A write that would cross a quota
adds to its tenant's counter with a condition (``... WHERE sessions < limit``),
so concurrent writers on any number of replicas can never overshoot: of two
creates racing for the last slot, exactly one matches the row.

The session count is always kept. The stored-bytes counter is kept while a
bytes quota is configured (every replica must use the same settings) and
recomputed from the sessions' own counters when a server starts with one.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import func, select, update
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from ctxwarden.store.errors import QuotaExceeded
from ctxwarden.store.tables import S, T
from ctxwarden.store.upserts import insert_ignore


@dataclass(frozen=True, slots=True)
class TenantQuota:
    max_sessions: int = 0
    """0: unlimited."""
    max_stored_bytes: int = 0
    """0: unlimited (and the bytes counter is not kept)."""

    @staticmethod
    async def _ensure(conn: AsyncConnection, tenant: str) -> None:
        await insert_ignore(conn, T, {"tenant_id": tenant, "sessions": 0, "stored_bytes": 0})

    async def _used(self, conn: AsyncConnection, tenant: str) -> tuple[int, int]:
        row = (
            await conn.execute(
                select(T.c.sessions, T.c.stored_bytes).where(T.c.tenant_id == tenant)
            )
        ).first()
        return (0, 0) if row is None else (int(row.sessions), int(row.stored_bytes))

    async def claim_session(self, conn: AsyncConnection, tenant: str, stored_bytes: int) -> None:
        """Count a new session (and its bytes) or raise QuotaExceeded. Run it first
        in the transaction: it locks the tenant's row (creates of one tenant queue)."""
        q = update(T).where(T.c.tenant_id == tenant)
        if self.max_sessions > 0:
            q = q.where(T.c.sessions < self.max_sessions)
        if self.max_stored_bytes > 0:
            q = q.where(T.c.stored_bytes + stored_bytes <= self.max_stored_bytes)
        q = q.values(sessions=T.c.sessions + 1, stored_bytes=T.c.stored_bytes + stored_bytes)
        if (await conn.execute(q)).rowcount == 1:
            return
        exists = (await conn.execute(select(T.c.sessions).where(T.c.tenant_id == tenant))).first()
        if exists is None:  # the tenant's first session
            await self._ensure(conn, tenant)
            if (await conn.execute(q)).rowcount == 1:
                return
        sessions, used = await self._used(conn, tenant)
        if self.max_sessions > 0 and sessions >= self.max_sessions:
            raise QuotaExceeded("sessions", sessions, self.max_sessions)
        raise QuotaExceeded("stored_bytes", used, self.max_stored_bytes)

    async def add_bytes(self, conn: AsyncConnection, tenant: str, added: int) -> None:
        """Count ``added`` stored bytes or raise QuotaExceeded (nothing counted)."""
        if self.max_stored_bytes <= 0 or added == 0:
            return
        result = await conn.execute(
            update(T)
            .where(
                T.c.tenant_id == tenant,
                T.c.stored_bytes + added <= self.max_stored_bytes,
            )
            .values(stored_bytes=T.c.stored_bytes + added)
        )
        if result.rowcount != 1:
            _, used = await self._used(conn, tenant)
            raise QuotaExceeded("stored_bytes", used, self.max_stored_bytes)

    @staticmethod
    async def release(conn: AsyncConnection, tenant: str, stored_bytes: int) -> None:
        """A session was deleted: it no longer counts."""
        await conn.execute(
            update(T)
            .where(T.c.tenant_id == tenant)
            .values(sessions=T.c.sessions - 1, stored_bytes=T.c.stored_bytes - stored_bytes)
        )

    async def reconcile(self, engine: AsyncEngine) -> None:
        """Recompute the bytes counters from the sessions (when a bytes quota is on)."""
        if self.max_stored_bytes <= 0:
            return
        live = (
            select(func.coalesce(func.sum(S.c.stored_bytes), 0))
            .where(S.c.tenant_id == T.c.tenant_id, S.c.delete_time_us == 0)
            .scalar_subquery()
        )
        async with engine.begin() as conn:
            await conn.execute(update(T).values(stored_bytes=live))
