"""The group commit's statements, compiled once per shape by SQLAlchemy Core.

The writers run them on a driver connection they hold (no ORM or engine work
per append): each statement is compiled for the dialect once per batch size and
cached; a call only lays out its values in the compiled parameter order.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

from sqlalchemy import Select, Table, bindparam, case, insert, select, update
from sqlalchemy.engine import Dialect
from sqlalchemy.sql import ColumnElement
from sqlalchemy.sql.dml import Insert, Update

from ctxwarden.core.session import Session
from ctxwarden.store.codec import PROGRESS_COLUMNS, progress_values
from ctxwarden.store.models import MessageRow, RequestRow
from ctxwarden.store.tables import S, T

_CACHED_SHAPES = 512


@dataclass(frozen=True, slots=True)
class Compiled:
    sql: str
    order: tuple[str, ...]
    """Bind names in the order the driver takes the values."""
    defaults: Mapping[str, Any]

    def params(self, values: Mapping[str, Any]) -> list[Any]:
        return [values[n] if n in values else self.defaults[n] for n in self.order]


def _compile(statement: Update | Insert | Select[Any], dialect: Dialect) -> Compiled:
    compiled = statement.compile(dialect=dialect)
    return Compiled(str(compiled), tuple(compiled.positiontup or ()), dict(compiled.params))


@dataclass(frozen=True, slots=True)
class TableInsert:
    name: str
    columns: tuple[str, ...]
    key: tuple[str, ...]
    insert: str
    """The parameterised single-row INSERT (executemany on SQLite)."""


def _table_insert(table: Table, dialect: Dialect) -> TableInsert:
    compiled = _compile(insert(table), dialect)
    names = tuple(c.name for c in table.columns)
    assert compiled.order == names, "INSERT binds follow the table's columns"
    key = tuple(c.name for c in table.primary_key.columns)
    return TableInsert(table.name, names, key, compiled.sql)


def _typed(name: str, column: ColumnElement[Any]) -> ColumnElement[Any]:
    """A bind of the column's type (PostgreSQL infers no type for a CASE branch's
    parameter: asyncpg then gets an explicit cast)."""
    return bindparam(name, type_=column.type)


def _per_session(name: str, k: int, column: ColumnElement[Any]) -> ColumnElement[Any]:
    """``CASE session_id WHEN :s0 THEN :name_0 ... END``: one value per batch member."""
    return case(
        *[(_typed(f"s{i}", S.c.session_id), _typed(f"{name}_{i}", column)) for i in range(k)],
        value=S.c.session_id,
    )


def _session_update(k: int) -> Update:
    """Compare-and-set of ``k`` session rows on their versions, in one statement."""
    if k == 1:
        where = [
            S.c.session_id == _typed("s0", S.c.session_id),
            S.c.version == _typed("expected_0", S.c.version),
        ]
        sets: dict[str, Any] = {c: _typed(f"{c}_0", S.c[c]) for c in PROGRESS_COLUMNS}
        sets["stored_bytes"] = S.c.stored_bytes + _typed("stored_bytes_0", S.c.stored_bytes)
        expected: ColumnElement[Any] = _typed("expected_0", S.c.version)
    else:
        ids: list[Any] = [_typed(f"s{i}", S.c.session_id) for i in range(k)]
        where = [S.c.session_id.in_(ids), S.c.version == _per_session("expected", k, S.c.version)]
        sets = {c: _per_session(c, k, S.c[c]) for c in PROGRESS_COLUMNS}
        sets["stored_bytes"] = S.c.stored_bytes + _per_session("stored_bytes", k, S.c.stored_bytes)
        expected = _per_session("expected", k, S.c.version)
    # A plain append extends the run of plain appends if the write it replaces was
    # one too, else starts it at the version it replaces (models.SessionRow).
    sets["plain_run_start"] = case(
        (S.c.plain_version == expected, S.c.plain_run_start), else_=expected
    )
    sets["plain_version"] = sets["version"]
    return update(S).where(*where, S.c.delete_time_us == 0).values(sets)


def _quota_update(k: int) -> Update:
    """Add each tenant's bytes unless one would cross the quota."""
    delta = case(
        *[(_typed(f"t{i}", T.c.tenant_id), _typed(f"add_{i}", T.c.stored_bytes)) for i in range(k)],
        value=T.c.tenant_id,
    )
    return (
        update(T)
        .where(
            T.c.tenant_id.in_([_typed(f"t{i}", T.c.tenant_id) for i in range(k)]),
            T.c.stored_bytes + delta <= _typed("limit", T.c.stored_bytes),
        )
        .values(stored_bytes=T.c.stored_bytes + delta)
    )


class BatchSql:
    """The batch's statements for one dialect (no ORM work per append)."""

    def __init__(self, dialect: Dialect, max_stored_bytes: int) -> None:
        self.dialect = dialect
        # SQLite: take the write lock up front rather than upgrade a read lock.
        # PostgreSQL: asyncpg runs each statement on its own until told BEGIN.
        # MySQL: the driver connection is not in autocommit mode (a transaction is open).
        self.begin = {"sqlite": "BEGIN IMMEDIATE", "postgresql": "BEGIN"}.get(dialect.name, "")
        self.messages = _table_insert(cast(Table, MessageRow.__table__), dialect)
        self.records = _table_insert(cast(Table, RequestRow.__table__), dialect)
        self.max_stored_bytes = max_stored_bytes
        self._updates: dict[int, Compiled] = {}
        self._quotas: dict[int, Compiled] = {}
        self._names: list[tuple[str, ...]] = []

    @property
    def quota_enabled(self) -> bool:
        return self.max_stored_bytes > 0

    def message_row(self, values: Mapping[str, Any]) -> tuple[Any, ...]:
        return tuple(values[c] for c in self.messages.columns)

    def record_row(self, values: Mapping[str, Any]) -> tuple[Any, ...]:
        return tuple(values[c] for c in self.records.columns)

    def update(self, members: Sequence[tuple[Session, int, int]]) -> tuple[str, list[Any]]:
        """The compare-and-set UPDATE of the batch's session rows; ``members`` are
        (new session, expected version, stored bytes added)."""
        k = len(members)
        compiled = self._updates.get(k)
        if compiled is None:
            compiled = _compile(_session_update(k), self.dialect)
            if len(self._updates) < _CACHED_SHAPES:
                self._updates[k] = compiled
        values: dict[str, Any] = {}
        for i, (session, expected, added) in enumerate(members):
            names = self._member_names(i)
            values[names[0]] = session.session_id
            values[names[1]] = expected
            values[names[2]] = added
            progress = progress_values(session)
            for name, column in zip(names[3:], PROGRESS_COLUMNS, strict=True):
                values[name] = progress[column]
        return compiled.sql, compiled.params(values)

    def _member_names(self, i: int) -> tuple[str, ...]:
        """The bind names of batch member ``i``: its id, expected version, bytes
        added and PROGRESS_COLUMNS (made once)."""
        while len(self._names) <= i:
            k = len(self._names)
            columns = (f"{c}_{k}" for c in PROGRESS_COLUMNS)
            self._names.append((f"s{k}", f"expected_{k}", f"stored_bytes_{k}", *columns))
        return self._names[i]

    def quota(self, added: Sequence[tuple[str, int]]) -> tuple[str, list[Any]]:
        """Add stored bytes to the tenants' counters unless one would cross the quota."""
        k = len(added)
        compiled = self._quotas.get(k)
        if compiled is None:
            compiled = _compile(_quota_update(k), self.dialect)
            if len(self._quotas) < _CACHED_SHAPES:
                self._quotas[k] = compiled
        values: dict[str, Any] = {"limit": self.max_stored_bytes}
        for i, (tenant, size) in enumerate(added):
            values[f"t{i}"] = tenant
            values[f"add_{i}"] = size
        return compiled.sql, compiled.params(values)


class VersionSql:
    """``SELECT session_id, version, delete_time_us ... WHERE session_id IN (...)``."""

    def __init__(self, dialect: Dialect) -> None:
        self.dialect = dialect
        self._shapes: dict[int, Compiled] = {}

    def query(self, session_ids: Sequence[str]) -> tuple[str, list[Any]]:
        k = len(session_ids)
        compiled = self._shapes.get(k)
        if compiled is None:
            names: list[Any] = [_typed(f"s{i}", S.c.session_id) for i in range(k)]
            statement = select(S.c.session_id, S.c.version, S.c.delete_time_us).where(
                S.c.session_id.in_(names)
            )
            compiled = _compile(statement, self.dialect)
            if len(self._shapes) < _CACHED_SHAPES:
                self._shapes[k] = compiled
        return compiled.sql, compiled.params({f"s{i}": sid for i, sid in enumerate(session_ids)})
