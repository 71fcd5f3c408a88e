"""Retention: remove soft-deleted sessions and every row that belongs to them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sqlalchemy import exists, select
from sqlalchemy.ext.asyncio import AsyncEngine

from ctxwarden.store.tables import C, M, P, R, S, V

CHILDREN = (M, C, P, V, R)
"""Every table with rows of a session (purged with it)."""


async def purge_deleted(
    engine: AsyncEngine,
    *,
    deleted_before_us: int,
    batch: int = 100,
    progress: Callable[[int], None] | None = None,
) -> int:
    """Remove soft-deleted sessions (and all their rows) deleted before the cutoff.

    Live sessions are never touched: every statement names the purged sessions'
    IDs by equality (``session_id IN (...)``; idempotency records have a typed
    session_id column), and only sessions whose delete_time_us is set and older
    than the cutoff are chosen. Works in batches so a large purge never holds
    long locks. Returns sessions purged.

    A session some fork still reads from (its ``parent_key``) is kept, whatever
    that fork's state: its rows are the fork's history. Once the forks are gone,
    a later batch or run purges it.
    """
    purged = 0
    while True:
        async with engine.begin() as conn:
            ids = [
                str(r.session_id)
                for r in (
                    await conn.execute(
                        select(S.c.session_id)
                        .where(
                            S.c.delete_time_us > 0,
                            S.c.delete_time_us < deleted_before_us,
                            ~_has_forks(),
                        )
                        .limit(batch)
                    )
                ).all()
            ]
            if not ids:
                return purged
            for table in CHILDREN:
                await conn.execute(table.delete().where(table.c.session_id.in_(ids)))
            await conn.execute(S.delete().where(S.c.session_id.in_(ids), S.c.delete_time_us > 0))
        purged += len(ids)
        if progress is not None:
            progress(purged)


def _has_forks() -> Any:
    """Whether some session reads from the candidate (a fork of it)."""
    child = S.alias("child")
    return exists().where(child.c.parent_key == S.c.session_id)
