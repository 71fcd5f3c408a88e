"""Shared states: the JSON object state of a user's sessions in a project and of
a project's sessions, and appends that change states along with their messages.

A session's own state is a column of its row (read with it, so a restore costs
nothing more). An append that changes any state is its own transaction rather
than a member of a group commit: the shared rows are read, merged and written
under a row lock (``SELECT ... FOR UPDATE`` on MySQL/MariaDB and PostgreSQL; SQLite's write
transactions take turns), so concurrent deltas of different sessions to one
user's state never lose each other's keys.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Table, delete, insert, select, update
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from ctxwarden.core.state import (
    MAX_STATE_BYTES,
    StateDelta,
    decode_state,
    encode_state,
    merge_state,
)
from ctxwarden.store.errors import TooLarge, boundary
from ctxwarden.store.gate import WriteGate
from ctxwarden.store.group_commit import AppendOp
from ctxwarden.store.quota import TenantQuota, state_bytes
from ctxwarden.store.records import advance
from ctxwarden.store.tables import PS, US, M, R, S
from ctxwarden.store.upserts import insert_ignore


@dataclass(frozen=True, slots=True)
class SharedStates:
    user: Mapping[str, Any]
    project: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class StateOwner:
    """Whose shared states a session's delta changes."""

    tenant_id: str
    project_id: str
    user_id: str


class StateRepository:
    def __init__(self, engine: AsyncEngine, gate: WriteGate, quota: TenantQuota) -> None:
        self.engine = engine
        self.gate = gate
        self.quota = quota

    @boundary
    async def get(self, owner: StateOwner) -> SharedStates:
        async with self.engine.connect() as conn:
            user = await _read(conn, US, _user_key(owner), lock=False)
            project = await _read(conn, PS, _project_key(owner), lock=False)
        return SharedStates(decode_state(user), decode_state(project))

    @boundary
    async def append(self, op: AppendOp, owner: StateOwner, delta: StateDelta) -> None:
        """Insert the messages, advance the session row (with its new state, in
        ``op.session``) and merge the shared deltas, in one transaction.

        Raises ConcurrentWrite when the session moved on, DuplicateKey when a
        message_id or request_id exists, TooLarge when a merged shared state
        would pass MAX_STATE_BYTES, QuotaExceeded (nothing is written)."""
        now = op.session.update_time_us
        state = encode_state(op.session.state) if op.session.state else None
        shared = [
            (table, key)
            for part, table, key in (
                (delta.project, PS, _project_key(owner)),
                (delta.user, US, _user_key(owner)),
            )
            if part is not None
        ]
        if shared:
            # The shared rows exist before the transaction (committed on their own;
            # an empty state reads as no state), so it locks existing rows only:
            # no gap or duplicate-key locks that concurrent first deltas of one
            # owner would deadlock on.
            async with self.gate.begin() as conn:
                for table, key in shared:
                    await _ensure(conn, table, key, now)
        async with self.gate.begin() as conn:
            # The state it replaces (if the session moved on meanwhile, the
            # compare-and-set below fails and nothing is counted).
            before = (
                await conn.execute(
                    select(S.c.state_json).where(S.c.session_id == op.session.session_id)
                )
            ).scalar()
            await advance(
                conn,
                op.session,
                op.expected_version,
                stored_bytes=S.c.stored_bytes + op.added_bytes,
                state_json=state,
            )
            if op.rows:
                await conn.execute(insert(M), list(op.rows))
            if op.record_values:
                await conn.execute(insert(R), list(op.record_values))
            charged = op.added_bytes + state_bytes(state) - state_bytes(before)
            # Always project before user: two transactions lock in the same order
            # (and the tenant's counter last, as every write does).
            if delta.project is not None:
                charged += await _merge(
                    conn, PS, _project_key(owner), delta.project, "project", now
                )
            if delta.user is not None:
                charged += await _merge(conn, US, _user_key(owner), delta.user, "user", now)
            await self.quota.add_bytes(conn, op.tenant, charged)


def _user_key(owner: StateOwner) -> dict[str, str]:
    return {
        "tenant_id": owner.tenant_id,
        "project_id": owner.project_id,
        "user_id": owner.user_id,
    }


def _project_key(owner: StateOwner) -> dict[str, str]:
    return {"tenant_id": owner.tenant_id, "project_id": owner.project_id}


async def _read(
    conn: AsyncConnection, table: Table, key: dict[str, str], *, lock: bool
) -> str | None:
    query = select(table.c.state_json).where(*(table.c[k] == v for k, v in key.items()))
    if lock:
        query = query.with_for_update()
    row = (await conn.execute(query)).first()
    return None if row is None else str(row.state_json)


async def _ensure(conn: AsyncConnection, table: Table, key: dict[str, str], now_us: int) -> None:
    """The row of ``key``, with an empty state unless it exists."""
    if await _read(conn, table, key, lock=False) is not None:
        return
    await insert_ignore(conn, table, {**key, "state_json": "{}", "update_time_us": now_us})


async def _merge(
    conn: AsyncConnection,
    table: Table,
    key: dict[str, str],
    delta: Mapping[str, Any],
    scope: str,
    now_us: int,
) -> int:
    """Merge ``delta`` into the row of ``key``; returns the bytes it adds (< 0:
    frees). A row purged since ``_ensure`` (its owner's last session went) is
    written again."""
    stored = await _read(conn, table, key, lock=True)
    merged = encode_state(merge_state(decode_state(stored), delta))
    size = len(merged.encode("utf-8", "surrogatepass"))
    if size > MAX_STATE_BYTES:
        raise TooLarge(f"state_delta.{scope}", size, MAX_STATE_BYTES)
    if stored is None:
        await conn.execute(insert(table).values(**key, state_json=merged, update_time_us=now_us))
    else:
        await conn.execute(
            update(table)
            .where(*(table.c[k] == v for k, v in key.items()))
            .values(state_json=merged, update_time_us=now_us)
        )
    return state_bytes(merged) - state_bytes(stored)


async def purge_orphans(conn: AsyncConnection, owners: Iterable[StateOwner]) -> Counter[str]:
    """After the sessions of ``owners`` were purged: remove each user state no
    session of its (tenant, project, user) has any more, and each project state
    no session of its (tenant, project) has (live, archived or deleted sessions
    all keep them). Returns the bytes freed, by tenant."""
    freed: Counter[str] = Counter()
    users = sorted({(o.tenant_id, o.project_id, o.user_id) for o in owners})
    shared = [(PS, _project_key(StateOwner(t, p, ""))) for t, p in sorted({u[:2] for u in users})]
    shared += [(US, _user_key(StateOwner(*u))) for u in users]  # project first, as appends
    for table, key in shared:
        if await _owned(conn, key):
            continue
        stored = await _read(conn, table, key, lock=True)
        if stored is None:
            continue
        await conn.execute(delete(table).where(*(table.c[k] == v for k, v in key.items())))
        freed[key["tenant_id"]] += state_bytes(stored)
    return freed


async def _owned(conn: AsyncConnection, key: dict[str, str]) -> bool:
    """Whether a session of the owner ``key`` names is stored."""
    query = select(S.c.session_id).where(*(S.c[k] == v for k, v in key.items())).limit(1)
    return (await conn.execute(query)).first() is not None
