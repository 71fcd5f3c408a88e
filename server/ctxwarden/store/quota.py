"""Per-tenant quotas, enforced in the same transaction as the write they limit.

The counters live in the ``tenants`` table. A write that would cross a quota
adds to its tenant's counter with a condition (``... WHERE sessions < limit``),
so concurrent writers on any number of replicas can never overshoot: of two
creates racing for the last slot, exactly one matches the row.

The session count is always kept (live sessions). The stored-bytes counter is
kept while a bytes quota is configured (every replica must use the same
settings) and recomputed from the rows when a server starts with one. It counts
what the tenant stores: each session's ``stored_bytes`` (messages, settings
revisions, checkpoints, idempotency records), each session's own state and the
user and project states (``state_bytes``: their JSON, an empty one nothing), of
live, archived and deleted sessions alike until they are purged.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import ColumnElement, LargeBinary, case, cast, func, or_, select, update
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from ctxwarden.store.errors import QuotaExceeded
from ctxwarden.store.tables import PS, US, S, T
from ctxwarden.store.upserts import insert_ignore


def state_bytes(stored: str | None) -> int:
    """The bytes a stored JSON state is charged: its UTF-8 size (an empty state,
    NULL or ``{}``, nothing)."""
    if not stored or stored == "{}":
        return 0
    return len(stored.encode("utf-8", "surrogatepass"))


def state_bytes_sql(dialect: str, column: ColumnElement[Any]) -> ColumnElement[Any]:
    """``state_bytes`` computed by the database (``dialect``: its name)."""
    if dialect == "sqlite":
        size: ColumnElement[Any] = func.length(cast(column, LargeBinary))
    elif dialect == "postgresql":
        size = func.octet_length(column)
    else:
        size = func.length(column)  # MySQL/MariaDB: bytes
    return case((or_(column.is_(None), column == "{}"), 0), else_=size)


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
        """Count a new session (and its bytes) or raise QuotaExceeded. Run it last
        in the transaction: it locks the tenant's row until the commit (creates of
        one tenant queue on it), and raising rolls the session's rows back."""
        q = update(T).where(T.c.tenant_id == tenant)
        if self.max_sessions > 0:
            q = q.where(T.c.sessions < self.max_sessions)
        if self.max_stored_bytes > 0:
            q = q.where(T.c.stored_bytes + stored_bytes <= self.max_stored_bytes)
        q = q.values(sessions=T.c.sessions + 1, stored_bytes=T.c.stored_bytes + stored_bytes)
        if (await conn.execute(q)).rowcount == 1:
            return
        # No row matched: over a limit, or the tenant's first session, whose counter
        # row may not exist yet or may just have been committed by a rival's first
        # create (the UPDATE above did not see it). Make sure it exists (waiting for
        # a rival's insert), then count again: a fresh statement sees it.
        await self._ensure(conn, tenant)
        if (await conn.execute(q)).rowcount == 1:
            return
        sessions, used = await self._used(conn, tenant)
        if self.max_sessions > 0 and sessions >= self.max_sessions:
            raise QuotaExceeded("sessions", sessions, self.max_sessions)
        raise QuotaExceeded("stored_bytes", used, self.max_stored_bytes)

    async def add_bytes(self, conn: AsyncConnection, tenant: str, added: int) -> None:
        """Count ``added`` stored bytes or raise QuotaExceeded (nothing counted).
        A negative ``added`` (a state made smaller) always fits."""
        if self.max_stored_bytes <= 0 or added == 0:
            return
        q = update(T).where(T.c.tenant_id == tenant)
        if added > 0:
            q = q.where(T.c.stored_bytes + added <= self.max_stored_bytes)
        result = await conn.execute(q.values(stored_bytes=T.c.stored_bytes + added))
        if result.rowcount != 1 and added > 0:
            _, used = await self._used(conn, tenant)
            raise QuotaExceeded("stored_bytes", used, self.max_stored_bytes)

    @staticmethod
    async def release(conn: AsyncConnection, tenant: str) -> None:
        """A session was deleted: it no longer counts as a session. Its bytes are
        still stored, so they count until it is purged (``give_back``)."""
        await conn.execute(
            update(T).where(T.c.tenant_id == tenant).values(sessions=T.c.sessions - 1)
        )

    @staticmethod
    async def give_back(
        conn: AsyncConnection, tenant: str, stored_bytes: int, sessions: int = 0
    ) -> None:
        """Purged rows no longer count: their bytes, and ``sessions`` live
        (archived) sessions among them."""
        await conn.execute(
            update(T)
            .where(T.c.tenant_id == tenant)
            .values(sessions=T.c.sessions - sessions, stored_bytes=T.c.stored_bytes - stored_bytes)
        )

    async def reconcile(self, engine: AsyncEngine) -> None:
        """Recompute the bytes counters from the rows (when a bytes quota is on)."""
        if self.max_stored_bytes <= 0:
            return
        dialect = engine.dialect.name

        def summed(table: Any, size: ColumnElement[Any]) -> Any:
            query = select(func.coalesce(func.sum(size), 0))
            return query.where(table.c.tenant_id == T.c.tenant_id).scalar_subquery()

        total = (
            summed(S, S.c.stored_bytes + state_bytes_sql(dialect, S.c.state_json))
            + summed(US, state_bytes_sql(dialect, US.c.state_json))
            + summed(PS, state_bytes_sql(dialect, PS.c.state_json))
        )
        async with engine.begin() as conn:
            await conn.execute(update(T).values(stored_bytes=total))
