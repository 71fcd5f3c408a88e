"""Driver-level MySQL statements with their values inlined, bounded in size.

Values go in as hex literals (``bytes.hex`` runs in C and needs no escaping
whatever the characters or the server's sql_mode). A statement never exceeds
``budget`` characters: rows are split over several INSERTs, and a value too
long for one statement is inserted with its first part and completed by
``UPDATE ... SET col = CONCAT(col, X'...')`` statements in the same transaction.
So any value up to ``max_allowed_packet`` can be written, whatever its content,
with statements far below the server's packet limit.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

DEFAULT_BUDGET = 4 * 1024 * 1024
"""Characters per statement (MariaDB's default max_allowed_packet is 16 MiB,
MySQL 5.7's 4 MiB: the writers lower it to half the server's packet)."""


def _literal(value: Any, escape: Callable[[Any], str]) -> str:
    if isinstance(value, str):
        return "X'" + value.encode("utf-8").hex() + "'"
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, (bytes, bytearray)):
        return "X'" + bytes(value).hex() + "'"
    if value is None:
        return "NULL"
    return escape(value)


def _raw(value: Any) -> bytes | None:
    if isinstance(value, (bytes, bytearray)):
        return bytes(value)
    if isinstance(value, str):
        return value.encode("utf-8")
    return None


def inserts(
    table: str,
    columns: Sequence[str],
    key: Sequence[str],
    rows: Sequence[Sequence[Any]],
    escape: Callable[[Any], str],
    budget: int = DEFAULT_BUDGET,
) -> list[str]:
    """INSERTs (and completing UPDATEs) for ``rows``, each at most ~``budget`` chars."""
    head = f"INSERT INTO {table} ({', '.join(columns)}) VALUES "
    part = max(budget // 4, 1024)
    """Raw bytes of a value that go into one statement (hex doubles them)."""
    key_index = [columns.index(k) for k in key]
    statements: list[str] = []
    tails: list[str] = []
    values: list[str] = []
    size = len(head)
    for row in rows:
        literals = []
        for i, value in enumerate(row):
            kind = type(value)
            if kind is int:  # the common cases first, without the generic dispatch
                literals.append(str(value))
                continue
            if value is None:
                literals.append("NULL")
                continue
            raw = value.encode("utf-8") if kind is str else _raw(value)
            if raw is not None and len(raw) <= part:
                literals.append("X'" + raw.hex() + "'")
            elif raw is not None:
                literals.append("X'" + raw[:part].hex() + "'")
                where = " AND ".join(
                    f"{columns[k]} = {_literal(row[k], escape)}" for k in key_index
                )
                col = columns[i]
                tails.extend(
                    f"UPDATE {table} SET {col} = CONCAT({col}, X'{raw[at : at + part].hex()}') "
                    f"WHERE {where}"
                    for at in range(part, len(raw), part)
                )
            else:
                literals.append(_literal(value, escape))
        text = "(" + ",".join(literals) + ")"
        if values and size + len(text) > budget:
            statements.append(head + ",".join(values))
            values, size = [], len(head)
        values.append(text)
        size += len(text) + 1
    if values:
        statements.append(head + ",".join(values))
    return statements + tails
