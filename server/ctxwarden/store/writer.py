"""The append writers' connection, at the driver level.

Appends are the hot path: the group committer runs the statements of
store/batch_sql on a driver connection it holds, without the ORM's
per-statement work. On PostgreSQL that is asyncpg's own connection, below
SQLAlchemy's adapter: it runs outside a transaction until the batch sends BEGIN
(store/batch_sql), and its errors are asyncpg's (store/errors.classify reads
their SQLSTATE).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from ctxwarden.store import mysql_sql
from ctxwarden.store.batch_sql import TableInsert
from ctxwarden.store.errors import PG_INSUFFICIENT_PRIVILEGE, sqlstate

UNKNOWN_THREAD = 1094
"""MySQL's error for KILL of a thread id that is not (or no longer) there."""
CLUSTER_VARIABLES = (
    "SHOW GLOBAL VARIABLES WHERE Variable_name IN ('wsrep_on', 'group_replication_group_name')"
)
"""What tells a multi-primary node (Galera, Group Replication); MariaDB and MySQL alike."""


def _multi_primary(name: str, value: str) -> bool:
    if name.lower() == "wsrep_on":
        return str(value).upper() == "ON"
    return bool(value)


def pg_rowcount(status: str) -> int:
    """The rows an asyncpg command status names (``UPDATE 3``, ``INSERT 0 2``)."""
    last = status.rsplit(" ", 1)[-1]
    return int(last) if last.isdigit() else 0


PG_IDENTITY = (
    "SELECT pg_backend_pid(), coalesce(host(inet_server_addr()), ''),"
    " coalesce(inet_server_port(), current_setting('port')::int)"
)
"""PostgreSQL: the backend serving this connection, and the server's address and port
as it sees them (a Unix socket has no address: '' and the configured port)."""


@dataclass(frozen=True, slots=True)
class ServerThread:
    """The server (host and port, as it reports them) and what serves a connection
    on the server's side: MySQL's thread (``CONNECTION_ID()``), PostgreSQL's backend
    process (``pg_backend_pid()``)."""

    host: str
    port: int
    thread_id: int


class Writer:
    """One connection and its driver-level calls."""

    def __init__(
        self,
        conn: AsyncConnection,
        driver: Any,
        dialect: str,
        budget: int,
        thread: ServerThread | None = None,
    ) -> None:
        self.conn = conn
        self.driver = driver
        self.mysql = dialect == "mysql"
        self.pg = dialect == "postgresql"
        self.budget = budget
        self.thread = thread
        self.cluster = False
        """MySQL: the server is a node of a multi-primary cluster (Galera, Group
        Replication), which may abort a transaction between a script's statements."""

    @classmethod
    async def open(cls, engine: AsyncEngine) -> Writer:
        conn = await engine.connect()
        try:
            raw = await conn.get_raw_connection()
            driver = raw.driver_connection
            assert driver is not None
            budget = mysql_sql.DEFAULT_BUDGET
            thread = None
            cluster = False
            if engine.dialect.name == "mysql":
                async with driver.cursor() as cur:
                    await cur.execute(
                        "SELECT @@max_allowed_packet, CONNECTION_ID(), @@hostname, @@port"
                    )
                    packet, thread_id, host, port = await cur.fetchone()
                    await cur.execute(CLUSTER_VARIABLES)
                    cluster = any(_multi_primary(n, v) for n, v in await cur.fetchall())
                budget = max(64 * 1024, min(budget, int(packet) // 2))
                thread = ServerThread(str(host), int(port), int(thread_id))
            elif engine.dialect.name == "postgresql":
                pid, host, port = await driver.fetchrow(PG_IDENTITY)
                thread = ServerThread(str(host), int(port), int(pid))
        except BaseException:
            # Never hand a connection that just failed back to the pool (its reset
            # would fail too): drop it.
            await cls(conn, None, engine.dialect.name, 0).discard()
            raise
        writer = cls(conn, driver, engine.dialect.name, budget, thread)
        writer.cluster = thread is not None and cluster
        return writer

    async def execute(self, sql: str, params: Sequence[Any]) -> int:
        if self.pg:
            return pg_rowcount(await self.driver.execute(sql, *params))
        if self.mysql:
            async with self.driver.cursor() as cur:
                await cur.execute(sql, params)
                return int(cur.rowcount)
        cur = await self.driver.execute(sql, params)
        count = int(cur.rowcount)
        await cur.close()
        return count

    def inline(self, sql: str, params: Sequence[Any]) -> str:
        """MySQL: the statement with its values escaped in, as the driver sends it.

        Integers and NULLs are written as the driver writes them without asking
        it; any other value is escaped once per statement (a batch's CASE
        branches repeat each session id)."""
        if not params:
            return sql
        escape = self.driver.escape
        seen: dict[Any, str] = {}
        out: list[str] = []
        for p in params:
            kind = type(p)
            if kind is int:
                out.append(str(p))
            elif p is None:
                out.append("NULL")
            elif kind is str:
                text = seen.get(p)
                if text is None:
                    text = seen[p] = escape(p)
                out.append(text)
            else:
                out.append(escape(p))
        return sql % tuple(out)

    def insert_statements(self, table: TableInsert, rows: Sequence[Sequence[Any]]) -> list[str]:
        """MySQL: the INSERTs (and completing UPDATEs) of ``rows``, values inlined."""
        if not rows:
            return []
        return mysql_sql.inserts(
            table.name, table.columns, table.key, rows, self.driver.escape, self.budget
        )

    async def execute_script(self, statements: Sequence[str], counts: list[int]) -> None:
        """MySQL: several statements (values inlined) in one round trip, appending
        each one's row count to ``counts`` as its result is read. The first error
        raises, and the statements after it are not run."""
        async with self.driver.cursor() as cur:
            await cur.execute(";".join(statements))
            counts.append(int(cur.rowcount))
            while await cur.nextset():
                counts.append(int(cur.rowcount))

    async def end_thread(self, thread: ServerThread, poll: float) -> bool:
        """End the server thread (PostgreSQL: backend) of another connection of this
        server and wait until it is gone (its transaction then committed or rolled
        back). False: ``thread`` belongs to another server, so this connection cannot
        end it, or (PostgreSQL) the server refused to."""
        if self.thread is None or (self.thread.host, self.thread.port) != (
            thread.host,
            thread.port,
        ):
            return False
        if self.pg:
            return await self._end_backend(thread.thread_id, poll)
        async with self.driver.cursor() as cur:
            try:
                await cur.execute(f"KILL CONNECTION {int(thread.thread_id)}")
            except Exception as exc:
                if not exc.args or exc.args[0] != UNKNOWN_THREAD:
                    raise
            while True:
                await cur.execute(
                    "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE ID = %s",
                    (thread.thread_id,),
                )
                (left,) = await cur.fetchone()
                if not left:
                    return True
                await asyncio.sleep(poll)  # a killed thread finishes its statement first

    async def _end_backend(self, pid: int, poll: float) -> bool:
        """PostgreSQL: ``pg_terminate_backend`` (allowed on the backends of one's own
        role; a backend already gone only draws a warning), then wait until
        ``pg_stat_activity`` no longer lists it."""
        try:
            await self.driver.fetchval("SELECT pg_terminate_backend($1)", pid)
        except Exception as exc:
            if sqlstate(exc) != PG_INSUFFICIENT_PRIVILEGE:
                raise
            return False  # not ours to end (another role's): the outcome stays unknown
        while True:
            left = await self.driver.fetchval(
                "SELECT count(*) FROM pg_stat_activity WHERE pid = $1", pid
            )
            if not left:
                return True
            await asyncio.sleep(poll)  # it finishes what it was doing (a COMMIT) first

    async def exists(self, table: str, where: Sequence[tuple[str, Any]]) -> bool:
        """Whether ``table`` has a row whose columns equal the values of ``where``
        (MySQL: values inlined as the batch's statements have them)."""
        if self.pg:
            cond = " AND ".join(f"{c} = ${i}" for i, (c, _) in enumerate(where, 1))
            row = await self.driver.fetchrow(
                f"SELECT 1 FROM {table} WHERE {cond}", *(v for _, v in where)
            )
            return row is not None
        cond = " AND ".join(f"{c} = %s" for c, _ in where)
        async with self.driver.cursor() as cur:
            await cur.execute(
                self.inline(f"SELECT 1 FROM {table} WHERE {cond}", [v for _, v in where])
            )
            return await cur.fetchone() is not None

    async def fetch_all(self, sql: str, params: Sequence[Any]) -> list[Any]:
        if self.pg:
            return [tuple(r) for r in await self.driver.fetch(sql, *params)]
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

    async def insert_many(self, table: TableInsert, rows: Sequence[Sequence[Any]]) -> None:
        if not self.mysql:  # asyncpg pipelines executemany: one round trip per batch
            await self.driver.executemany(table.insert, rows)
            return
        for statement in self.insert_statements(table, rows):
            await self.execute_script([statement], [])

    async def commit(self) -> None:
        if self.pg:
            await self.driver.execute("COMMIT")
            return
        await self.driver.commit()

    async def rollback(self) -> None:
        with contextlib.suppress(Exception):
            if self.pg:
                await self.driver.execute("ROLLBACK")
            else:
                await self.driver.rollback()

    async def close(self) -> None:
        if self.pg and self.driver is not None:
            # The pool's reset knows nothing of a transaction begun here.
            with contextlib.suppress(Exception):
                if self.driver.is_in_transaction():
                    await self.driver.execute("ROLLBACK")
        with contextlib.suppress(Exception):
            await self.conn.close()

    async def discard(self) -> None:
        with contextlib.suppress(Exception):
            await self.conn.invalidate()
        await self.close()
