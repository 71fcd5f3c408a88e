"""The append writers' connection and statements, at the driver level.

Appends are the hot path: the group committer writes them with statements it
builds once and runs on a driver connection it holds, without the ORM's
per-statement work.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

from sqlalchemy import Table
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from ctxwarden.store import mysql_sql
from ctxwarden.store.models import MessageRow, RequestRow
from ctxwarden.store.tables import S, T

SESSIONS = S.name
TENANTS = T.name

SET_COLUMNS = (
    "last_seq",
    "version",
    "context_tokens",
    "update_time_us",
    "consecutive_failures",
    "calibration_json",
    "stored_bytes",
)
"""What an append changes in its session row (stored_bytes is added to)."""


@dataclass(frozen=True, slots=True)
class TableSql:
    name: str
    columns: tuple[str, ...]
    key: tuple[str, ...]
    insert: str
    """The parameterised INSERT (SQLite)."""


def _table_sql(table: Table, ph: str) -> TableSql:
    names = tuple(c.name for c in table.columns)
    key = tuple(c.name for c in table.primary_key.columns)
    marks = ", ".join(ph for _ in names)
    return TableSql(
        table.name, names, key, f"INSERT INTO {table.name} ({', '.join(names)}) VALUES ({marks})"
    )


class WriterSql:
    """The batch's statements as driver-level SQL (no ORM work per append)."""

    def __init__(self, dialect: str, max_stored_bytes: int) -> None:
        self.ph = "%s" if dialect == "mysql" else "?"
        # SQLite: take the write lock up front rather than upgrade a read lock.
        self.begin = "BEGIN IMMEDIATE" if dialect == "sqlite" else ""
        self.messages = _table_sql(cast(Table, MessageRow.__table__), self.ph)
        self.records = _table_sql(cast(Table, RequestRow.__table__), self.ph)
        self.set_columns = SET_COLUMNS
        self.max_stored_bytes = max_stored_bytes
        self._updates: dict[int, str] = {}

    @property
    def quota_enabled(self) -> bool:
        return self.max_stored_bytes > 0

    def message_row(self, values: dict[str, Any]) -> tuple[Any, ...]:
        return tuple(values[c] for c in self.messages.columns)

    def record_row(self, values: dict[str, Any]) -> tuple[Any, ...]:
        return tuple(values[c] for c in self.records.columns)

    def update(
        self, keys: Sequence[tuple[str, int]], sets: Sequence[Sequence[Any]]
    ) -> tuple[str, list[Any]]:
        """The compare-and-set UPDATE of ``k`` session rows: ``keys`` are
        (session_id, expected version), ``sets`` their SET_COLUMNS values."""
        k = len(keys)
        params: list[Any] = []
        if k == 1:
            params += sets[0]
            params += keys[0]
        else:
            for c in range(len(SET_COLUMNS)):
                for (sid, _), values in zip(keys, sets, strict=True):
                    params += (sid, values[c])
            params += (sid for sid, _ in keys)
            for key in keys:
                params += key
        return self._update_sql(k), params

    def _update_sql(self, k: int) -> str:
        sql = self._updates.get(k)
        if sql is not None:
            return sql
        ph = self.ph
        if k == 1:
            sets = ", ".join(
                f"{c} = {c} + {ph}" if c == "stored_bytes" else f"{c} = {ph}" for c in SET_COLUMNS
            )
            where = f"session_id = {ph} AND version = {ph}"
        else:
            whens = " ".join(f"WHEN {ph} THEN {ph}" for _ in range(k))
            sets = ", ".join(
                f"{c} = {c} + CASE session_id {whens} END"
                if c == "stored_bytes"
                else f"{c} = CASE session_id {whens} END"
                for c in SET_COLUMNS
            )
            ids = ", ".join(ph for _ in range(k))
            where = f"session_id IN ({ids}) AND version = CASE session_id {whens} END"
        sql = f"UPDATE {SESSIONS} SET {sets} WHERE {where} AND delete_time_us = 0"
        if len(self._updates) < 512:
            self._updates[k] = sql
        return sql

    def quota(self, added: Sequence[tuple[str, int]]) -> tuple[str, list[Any]]:
        """Add stored bytes to the tenants' counters unless one would cross the quota."""
        ph = self.ph
        whens = " ".join(f"WHEN {ph} THEN {ph}" for _ in added)
        delta = f"CASE tenant_id {whens} END"
        ids = ", ".join(ph for _ in added)
        sql = (
            f"UPDATE {TENANTS} SET stored_bytes = stored_bytes + {delta} "
            f"WHERE tenant_id IN ({ids}) AND stored_bytes + {delta} <= {ph}"
        )
        pairs = [v for item in added for v in item]
        return sql, [*pairs, *(t for t, _ in added), *pairs, self.max_stored_bytes]


class Writer:
    """One connection and its driver-level calls."""

    def __init__(self, conn: AsyncConnection, driver: Any, dialect: str, budget: int) -> None:
        self.conn = conn
        self.driver = driver
        self.mysql = dialect == "mysql"
        self.budget = budget

    @classmethod
    async def open(cls, engine: AsyncEngine) -> Writer:
        conn = await engine.connect()
        try:
            raw = await conn.get_raw_connection()
            driver = raw.driver_connection
            assert driver is not None
            budget = mysql_sql.DEFAULT_BUDGET
            mysql = engine.dialect.name == "mysql"
            if mysql:
                async with driver.cursor() as cur:
                    await cur.execute("SELECT @@max_allowed_packet")
                    (packet,) = await cur.fetchone()
                budget = max(64 * 1024, min(budget, int(packet) // 2))
        except BaseException:
            # Never hand a connection that just failed back to the pool (its reset
            # would fail too): drop it.
            await cls(conn, None, engine.dialect.name, 0).discard()
            raise
        return cls(conn, driver, engine.dialect.name, budget)

    async def execute(self, sql: str, params: Sequence[Any]) -> int:
        if self.mysql:
            async with self.driver.cursor() as cur:
                await cur.execute(sql, params)
                return int(cur.rowcount)
        cur = await self.driver.execute(sql, params)
        count = int(cur.rowcount)
        await cur.close()
        return count

    async def fetch_all(self, sql: str, params: Sequence[Any]) -> list[Any]:
        if self.mysql:
            async with self.driver.cursor() as cur:
                await cur.execute(sql, params)
                return list(await cur.fetchall())
        cur = await self.driver.execute(sql, params)
        rows = list(await cur.fetchall())
        await cur.close()
        return rows

    async def autocommit(self) -> None:
        """Every statement its own transaction: each read sees the latest commits."""
        if self.mysql:
            await self.driver.autocommit(True)

    async def insert_many(self, table: TableSql, rows: Sequence[Sequence[Any]]) -> None:
        if not self.mysql:
            await self.driver.executemany(table.insert, rows)
            return
        statements = mysql_sql.inserts(
            table.name, table.columns, table.key, rows, self.driver.escape, self.budget
        )
        async with self.driver.cursor() as cur:
            for statement in statements:
                await cur.execute(statement)

    async def commit(self) -> None:
        await self.driver.commit()

    async def rollback(self) -> None:
        with contextlib.suppress(Exception):
            await self.driver.rollback()

    async def close(self) -> None:
        with contextlib.suppress(Exception):
            await self.conn.close()

    async def discard(self) -> None:
        with contextlib.suppress(Exception):
            await self.conn.invalidate()
        await self.close()
