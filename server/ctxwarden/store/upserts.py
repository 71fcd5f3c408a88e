"""``INSERT`` that leaves an existing row alone, in each dialect's words.

SQLite says ``INSERT OR IGNORE``, MySQL/MariaDB ``INSERT IGNORE``, PostgreSQL
``INSERT ... ON CONFLICT DO NOTHING``. On PostgreSQL a failed statement aborts
the whole transaction, so "insert, and ignore the duplicate key" must be one
statement that never fails on the key.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Table, insert
from sqlalchemy.dialects import postgresql
from sqlalchemy.ext.asyncio import AsyncConnection


async def insert_ignore(conn: AsyncConnection, table: Table, values: dict[str, Any]) -> None:
    """Insert ``values`` unless a row with the same key exists."""
    if conn.dialect.name == "postgresql":
        await conn.execute(postgresql.insert(table).values(**values).on_conflict_do_nothing())
        return
    await conn.execute(
        insert(table)
        .prefix_with("OR IGNORE", dialect="sqlite")
        .prefix_with("IGNORE", dialect="mysql")
        .prefix_with("IGNORE", dialect="mariadb")
        .values(**values)
    )
