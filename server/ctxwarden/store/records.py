"""Idempotency records and the session row's compare-and-set, shared by the writes."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from sqlalchemy import insert, select, update
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from ctxwarden.core.session import Session
from ctxwarden.store.codec import progress_values
from ctxwarden.store.errors import ConcurrentWrite, boundary
from ctxwarden.store.tables import R, S

RECORD_OVERHEAD = 64
"""Bytes charged per idempotency record on top of its outcome."""


@dataclass(frozen=True, slots=True)
class RequestScope:
    """Where a request_id is unique: a method of one session (or, for
    CreateSession, of one tenant)."""

    method: str
    session_id: str = ""
    tenant_id: str = ""


@dataclass(frozen=True, slots=True)
class RequestRecord:
    """An idempotent request's key and outcome, written with its effects."""

    scope: RequestScope
    request_id: str
    request_hash: str
    outcome: dict[str, Any]
    create_time_us: int


@dataclass(frozen=True, slots=True)
class StoredRequest:
    request_hash: str
    outcome: dict[str, Any]


def record_values(record: RequestRecord) -> dict[str, Any]:
    return {
        "session_id": record.scope.session_id,
        "tenant_id": record.scope.tenant_id,
        "method": record.scope.method,
        "request_id": record.request_id,
        "request_hash": record.request_hash,
        "outcome": json.dumps(record.outcome, separators=(",", ":")).encode(),
        "create_time_us": record.create_time_us,
    }


def record_bytes(values: dict[str, Any]) -> int:
    """What storing a record costs (for quotas)."""
    return len(values["outcome"]) + RECORD_OVERHEAD


async def insert_record(conn: AsyncConnection, record: RequestRecord | None) -> int:
    """Insert an idempotency record; returns the bytes it stores."""
    if record is None:
        return 0
    values = record_values(record)
    await conn.execute(insert(R).values(**values))
    return record_bytes(values)


class RequestRepository:
    """Idempotency records: what an applied request answered."""

    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine

    @boundary
    async def get(self, scope: RequestScope, request_id: str) -> StoredRequest | None:
        async with self.engine.connect() as conn:
            row = (
                await conn.execute(
                    select(R.c.request_hash, R.c.outcome).where(
                        R.c.session_id == scope.session_id,
                        R.c.tenant_id == scope.tenant_id,
                        R.c.method == scope.method,
                        R.c.request_id == request_id,
                    )
                )
            ).first()
        if row is None:
            return None
        return StoredRequest(row.request_hash, json.loads(bytes(row.outcome)))


async def compare_and_set(
    conn: AsyncConnection, session_id: str, expected_version: int, values: dict[str, Any]
) -> None:
    """Write ``values`` into the live session row if its version is still
    ``expected_version``; else nothing is written and ConcurrentWrite is raised."""
    result = await conn.execute(
        update(S)
        .where(
            S.c.session_id == session_id,
            S.c.version == expected_version,
            S.c.delete_time_us == 0,
        )
        .values(values)
    )
    if result.rowcount != 1:
        raise ConcurrentWrite(session_id)


async def advance(
    conn: AsyncConnection, session: Session, expected_version: int, **values: Any
) -> None:
    """Compare-and-set the session's progress (codec.progress_values) and ``values``."""
    await compare_and_set(
        conn, session.session_id, expected_version, {**progress_values(session), **values}
    )
