"""The retention rules' statements: count or purge the archived sessions, the
deleted sessions and the idempotency records a rule names, per tenant.

Deleted and archived sessions are purged by store.purge (one rule for what a
purge of a session may remove, and for the bytes it gives back to the tenant's
quota counters; an archived session is a live one, so it also stops counting as
a session). Purging idempotency records gives their bytes back to their session
and its tenant. Every statement names the rows by
equality or by the rule's own columns, never by pattern; batches keep locks short.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from typing import Any

from sqlalchemy import ColumnElement, and_, case, delete, func, or_, select, true, update
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from ctxwarden.core.retention import Cutoff, RuleKind, TenantScope
from ctxwarden.core.tenancy import tenant_of
from ctxwarden.store import purge
from ctxwarden.store.gate import WriteGate
from ctxwarden.store.records import RECORD_OVERHEAD
from ctxwarden.store.tables import R, S, T

BATCH = 100


def tenant_clause(column: ColumnElement[str], scope: TenantScope) -> ColumnElement[bool]:
    if scope.only is not None:
        return column == scope.only
    if scope.excluded:
        return column.not_in(sorted(scope.excluded))
    return true()


def _archived(cut: Cutoff) -> ColumnElement[bool]:
    return and_(
        S.c.delete_time_us == 0,
        S.c.archive_time_us > 0,
        S.c.archive_time_us < cut.before_us,
        tenant_clause(S.c.tenant_id, cut.scope),
    )


def _deleted(cut: Cutoff) -> ColumnElement[bool]:
    return and_(
        S.c.delete_time_us > 0,
        S.c.delete_time_us < cut.before_us,
        tenant_clause(S.c.tenant_id, cut.scope),
    )


def _records(cut: Cutoff) -> ColumnElement[bool]:
    return and_(R.c.create_time_us < cut.before_us, tenant_clause(R.c.tenant_id, cut.scope))


async def count(engine: AsyncEngine, cut: Cutoff) -> Counter[str]:
    """What purging ``cut`` would remove now, by tenant (a dry run)."""
    if cut.kind is RuleKind.IDEMPOTENCY:
        query = select(R.c.tenant_id, func.count()).where(_records(cut)).group_by(R.c.tenant_id)
    else:
        where = _archived(cut) if cut.kind is RuleKind.ARCHIVED else _deleted(cut)
        query = (
            select(S.c.tenant_id, func.count())
            .where(where, ~purge.has_forks())
            .group_by(S.c.tenant_id)
        )
    async with engine.connect() as conn:
        rows = (await conn.execute(query)).all()
    return Counter({str(tenant): int(n) for tenant, n in rows})


async def apply(gate: WriteGate, cut: Cutoff) -> Counter[str]:
    """Purge what ``cut`` names; returns what was removed, by tenant."""
    if cut.kind is RuleKind.ARCHIVED:
        return await _purge_archived(gate, cut)
    if cut.kind is RuleKind.DELETED:
        done: Counter[str] = Counter()
        await purge.purge_deleted(
            gate,
            deleted_before_us=cut.before_us,
            batch=BATCH,
            scope=tenant_clause(S.c.tenant_id, cut.scope),
            on_batch=lambda keys: done.update(tenant_of(k) for k in keys),
        )
        return done
    return await _purge_records(gate, cut)


async def _purge_archived(gate: WriteGate, cut: Cutoff) -> Counter[str]:
    """One transaction per batch; a session unarchived meanwhile, or forked
    (a fork reads from it), is kept: each is locked and checked again first."""
    done: Counter[str] = Counter()
    while True:
        async with gate.begin() as conn:
            found = (
                await conn.execute(
                    select(S.c.session_id)
                    # A session a fork still reads from is kept (as purge_deleted does).
                    .where(_archived(cut), ~purge.has_forks())
                    .order_by(S.c.archive_time_us)
                    .limit(BATCH)
                )
            ).all()
            if not found:
                return done
            rows = await purge.lock_purgeable(
                conn, [str(r.session_id) for r in found], _archived(cut)
            )
            if not rows:
                continue  # each changed meanwhile: the next read skips it
            removed = await purge.remove(conn, rows)
        done.update(removed)


async def _purge_records(gate: WriteGate, cut: Cutoff) -> Counter[str]:
    done: Counter[str] = Counter()
    while True:
        async with gate.begin() as conn:
            rows = (
                await conn.execute(
                    select(
                        R.c.session_id,
                        R.c.tenant_id,
                        R.c.method,
                        R.c.request_id,
                        func.length(R.c.outcome).label("size"),
                        R.c.outcome,
                    )
                    .where(_records(cut))
                    .order_by(R.c.create_time_us)
                    .limit(BATCH)
                )
            ).all()
            if not rows:
                return done
            await conn.execute(delete(R).where(or_(*(_record_key(r) for r in rows))))
            freed: Counter[str] = Counter()
            for r in rows:
                freed[_charged_session(r)] += int(r.size) + RECORD_OVERHEAD
                done[str(r.tenant_id)] += 1
            await _give_back(conn, freed)


def _record_key(r: Any) -> ColumnElement[bool]:
    return and_(
        R.c.session_id == r.session_id,
        R.c.tenant_id == r.tenant_id,
        R.c.method == r.method,
        R.c.request_id == r.request_id,
    )


def _charged_session(r: Any) -> str:
    """The session whose stored bytes counted the record: its own, or for a
    CreateSession record (no session of its own) the session it created."""
    if r.session_id:
        return str(r.session_id)
    try:
        return str(json.loads(bytes(r.outcome)).get("session_id", ""))
    except (ValueError, AttributeError):
        return ""


async def _give_back(conn: AsyncConnection, freed: Counter[str]) -> None:
    """Take the purged records' bytes off their sessions and their tenants."""
    keys: Sequence[str] = sorted(k for k in freed if k)
    if not keys:
        return
    # Deleted sessions too: their bytes count for their tenant until purged.
    live = {
        str(r.session_id): str(r.tenant_id)
        for r in (
            await conn.execute(
                select(S.c.session_id, S.c.tenant_id).where(S.c.session_id.in_(keys))
            )
        ).all()
    }
    for key in keys:
        size = freed[key]
        await conn.execute(
            update(S)
            .where(S.c.session_id == key)
            .values(stored_bytes=case((S.c.stored_bytes > size, S.c.stored_bytes - size), else_=0))
        )
        if key in live:
            await conn.execute(
                update(T)
                .where(T.c.tenant_id == live[key])
                .values(stored_bytes=T.c.stored_bytes - size)
            )
