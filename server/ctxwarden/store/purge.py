"""Retention: remove soft-deleted sessions and every row that belongs to them.

A purge gives the bytes of what it removes back to the tenant's quota counter
(a deleted session counts until then), and removes the user and project states
whose last session it removed (store/states.py ``purge_orphans``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

from sqlalchemy import ColumnElement, Row, and_, exists, select, true
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from ctxwarden.store.gate import WriteGate
from ctxwarden.store.locks import lock_sessions
from ctxwarden.store.quota import TenantQuota, state_bytes_sql
from ctxwarden.store.states import StateOwner, purge_orphans
from ctxwarden.store.tables import MB, SL, C, M, P, R, S, V

CHILDREN = (M, C, P, V, R, MB, SL)
"""Every table with rows of a session (purged with it, before its row: the
labels' foreign key refers to it)."""


async def purge_deleted(
    engine: AsyncEngine | WriteGate,
    *,
    deleted_before_us: int,
    batch: int = 100,
    progress: Callable[[int], None] | None = None,
    scope: ColumnElement[bool] | None = None,
    on_batch: Callable[[list[str]], None] | None = None,
) -> int:
    """Remove soft-deleted sessions (and all their rows) deleted before the cutoff.

    Live sessions are never touched: every statement names the purged sessions'
    IDs by equality (``session_id IN (...)``; idempotency records have a typed
    session_id column), and only sessions whose delete_time_us is set and older
    than the cutoff are chosen. Works in batches so a large purge never holds
    long locks. Returns sessions purged. ``scope`` narrows the sessions further
    (a retention rule's tenants); ``on_batch`` is told each batch's session keys.

    A session some fork still reads from (its ``parent_key``) is kept, whatever
    that fork's state: its rows are the fork's history. Once the forks are gone,
    a later batch or run purges it. Each candidate is locked and checked again
    before it goes (``lock_purgeable``), so a fork made meanwhile keeps it.
    """
    purged = 0
    rule = and_(
        S.c.delete_time_us > 0,
        S.c.delete_time_us < deleted_before_us,
        scope if scope is not None else true(),
    )
    while True:
        async with engine.begin() as conn:
            query = select(S.c.session_id).where(rule, ~has_forks()).limit(batch)
            ids = [str(r.session_id) for r in (await conn.execute(query)).all()]
            if not ids:
                return purged
            rows = await lock_purgeable(conn, ids, rule)
            if not rows:
                continue  # each changed meanwhile (got a fork): the next read skips it
            await remove(conn, rows)
            ids = [str(r.session_id) for r in rows]
        if on_batch is not None:
            on_batch(ids)
        purged += len(ids)
        if progress is not None:
            progress(purged)


async def lock_purgeable(
    conn: AsyncConnection, ids: Sequence[str], rule: ColumnElement[bool]
) -> Sequence[Row[Any]]:
    """Of the candidates ``ids`` (found by a plain read), the rows still to purge,
    locked, for ``remove``: each still matches ``rule`` and no fork reads from it.
    The forks are looked up once the row is locked: a fork being made holds that
    lock until it commits (store/sessions.py), so either the fork is seen here,
    or it is made after this purge and finds no parent."""
    charged = S.c.stored_bytes + state_bytes_sql(conn.dialect.name, S.c.state_json)
    rows = await lock_sessions(
        conn,
        and_(S.c.session_id.in_(ids), rule),
        S.c.session_id,
        S.c.tenant_id,
        S.c.user_id,
        S.c.project_id,
        S.c.delete_time_us,
        charged.label("charged"),
    )
    if not rows:
        return rows
    child = S.alias("child")
    read = {
        str(r.parent_key)
        for r in await conn.execute(
            select(child.c.parent_key)
            .where(child.c.parent_key.in_([str(r.session_id) for r in rows]))
            .distinct()
        )
    }
    return [r for r in rows if str(r.session_id) not in read]


async def remove(conn: AsyncConnection, rows: Sequence[Row[Any]]) -> Counter[str]:
    """Delete the sessions ``lock_purgeable`` returned, every row of theirs and
    the shared states they were the last sessions of; what they stored no longer
    counts for their tenants (nor do the archived, still live, ones as sessions).
    Returns the sessions removed, by tenant."""
    ids = [str(r.session_id) for r in rows]
    for table in CHILDREN:
        await conn.execute(table.delete().where(table.c.session_id.in_(ids)))
    await conn.execute(S.delete().where(S.c.session_id.in_(ids)))
    removed: Counter[str] = Counter()
    live: Counter[str] = Counter()
    freed: Counter[str] = Counter()
    for r in rows:
        tenant = str(r.tenant_id)
        removed[tenant] += 1
        live[tenant] += int(r.delete_time_us) == 0
        freed[tenant] += int(r.charged)
    owners = [StateOwner(str(r.tenant_id), str(r.project_id), str(r.user_id)) for r in rows]
    freed.update(await purge_orphans(conn, owners))
    for tenant in sorted(freed.keys() | live.keys()):  # once per tenant
        await TenantQuota.give_back(conn, tenant, freed[tenant], live[tenant])
    return removed


def has_forks() -> Any:
    """Whether some session reads from the candidate (a fork of it)."""
    child = S.alias("child")
    return exists().where(child.c.parent_key == S.c.session_id)
