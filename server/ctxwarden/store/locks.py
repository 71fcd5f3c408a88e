"""Session rows locked for the rest of a write transaction.

A fork and the purge of its parent serialise on the parent's row: ForkSession
locks it before it checks the parent and inserts the fork's row; a purge locks
each candidate before it checks, against what is committed now, that no fork
reads from it. Whichever locks first wins, whole; the other sees its outcome
(all backends run READ COMMITTED or, on SQLite, one writer at a time).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import ColumnElement, Row, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from ctxwarden.store.tables import S


async def lock_sessions(
    conn: AsyncConnection, where: ColumnElement[bool], *columns: Any
) -> Sequence[Row[Any]]:
    """The session rows ``where`` names (``columns`` of them), locked until the
    transaction ends, as committed once the lock is held.

    MySQL/MariaDB and PostgreSQL: ``SELECT ... FOR UPDATE`` (a waiter reads the
    row again once it has the lock: one deleted meanwhile is not returned).
    SQLite locks the database, not rows: a write that changes nothing takes the
    write lock first, so no other writer commits before this transaction does."""
    query = select(*columns).where(where).order_by(S.c.session_id)
    if conn.dialect.name == "sqlite":
        await conn.execute(update(S).where(where).values(version=S.c.version))
        return (await conn.execute(query)).all()
    return (await conn.execute(query.with_for_update())).all()
