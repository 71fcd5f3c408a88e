"""The store's exceptions, and the one place driver errors become them.

Everything the store raises to its callers is a ``StoreError``. SQLAlchemy and
the drivers (aiosqlite, aiomysql, asyncpg, psycopg) raise their own classes; ``driver_errors()``
(used through ``@boundary`` on every public store method) and ``classify()`` (used
by the group committer on raw driver exceptions) are the only code that looks at
them, so the service never imports SQLAlchemy.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable, Coroutine, Iterator
from contextlib import contextmanager
from typing import Any, Literal, ParamSpec, TypeVar, cast

from sqlalchemy import exc as sa
from sqlalchemy.engine import Dialect

P = ParamSpec("P")
T = TypeVar("T")


class StoreError(Exception):
    pass


class ConcurrentWrite(StoreError):
    """Another writer changed the session first (compare-and-set failed), or the
    database aborted the transaction for a conflict (deadlock, certification)."""


class DuplicateKey(StoreError):
    """A unique key (message_id or request_id) already exists."""


class TooLarge(StoreError):
    """A value is larger than the store accepts (nothing was written)."""

    def __init__(self, field: str, size: int, limit: int) -> None:
        super().__init__(f"{field} is {size:,} bytes stored; the limit is {limit:,}")
        self.field, self.size, self.limit = field, size, limit


class QuotaExceeded(StoreError):
    """A tenant quota would be crossed (nothing was written)."""

    def __init__(self, quota: str, used: int, limit: int) -> None:
        super().__init__(f"tenant quota {quota}: {used:,} used of {limit:,}")
        self.quota, self.used, self.limit = quota, used, limit


class StoreUnavailable(StoreError):
    """The database could not be reached, or did not answer in time. Safe to retry;
    for a commit that was in flight the outcome is unknown."""


class StoreRejected(StoreError):
    """The database refused a write for good (retrying the same write cannot help)."""


Kind = Literal["lost", "duplicate", "rejected", "conflict", "transient"]

MYSQL_REJECTED = frozenset({1153, 1366, 1406, 1264, 1292, 1048, 3140})
"""Packet too large, incorrect string/value, data too long, out of range,
NULL in a NOT NULL column, invalid JSON: the same write will fail again."""

MYSQL_CONFLICT = frozenset({1205, 1213, 3101})
"""Lock wait timeout, deadlock (also a Galera certification failure or brute-force
abort, at any statement or at COMMIT), Group Replication's rollback at COMMIT
(ER_TRANSACTION_ROLLBACK_DURING_COMMIT): the transaction was rolled back."""

PG_CONFLICT = frozenset({"40001", "40P01", "55P03"})
"""PostgreSQL SQLSTATEs: serialization failure, deadlock, lock not available."""

PG_UNIQUE = "23505"
PG_INSUFFICIENT_PRIVILEGE = "42501"
"""E.g. ``pg_terminate_backend`` on another role's backend (store.writer)."""
PG_REJECTED = ("22", "23", "54")
"""SQLSTATE classes: data exception (bad value, NUL in text, out of range), integrity
constraint violation other than a unique key, program limit exceeded (a row or index
entry too large): the same write will fail again."""

PG_LOST = ("08", "57P01", "57P02", "57P03")
"""SQLSTATEs of a lost connection: connection exception, the server shutting down
(admin, crash) or not accepting connections yet."""

PG_TRANSIENT = ("53", "57014")
"""Insufficient resources (too many connections, out of memory or disk), a statement
cancelled (statement_timeout): the database may take the same write later."""


def sqlstate(exc: BaseException | None) -> str:
    """The PostgreSQL SQLSTATE of a driver error (asyncpg, psycopg, or SQLAlchemy's
    asyncpg adapter); "" for any other error."""
    state = getattr(exc, "sqlstate", None)
    return state if isinstance(state, str) else ""


def _pg_kind(state: str) -> Kind:
    if state.startswith(PG_LOST):
        return "lost"
    if state == PG_UNIQUE:
        return "duplicate"
    if state in PG_CONFLICT:
        return "conflict"
    if state.startswith(PG_REJECTED) or state.startswith("42"):
        return "rejected"
    return "transient"


def _asyncpg() -> Any:
    """asyncpg, when something loaded it (None otherwise: then no error can be one
    of its own). A server on SQLite or MySQL never imports it (~3 MiB at rest)."""
    return sys.modules.get("asyncpg")


def driver_error_types(dialect: Dialect) -> tuple[type[BaseException], ...]:
    """The exception classes a driver-level connection of ``dialect`` raises (the
    writers of store/writer.py call asyncpg itself, below SQLAlchemy's adapter).
    asyncpg's InternalClientError means its protocol is out of step with the
    server (seen when PostgreSQL shuts down and terminates an idle connection:
    "another operation is in progress"): ``classify`` counts it as lost."""
    dbapi: Any = dialect.loaded_dbapi
    if dialect.name == "postgresql":
        import asyncpg

        client_state = asyncpg.exceptions.InternalClientError
        return (dbapi.Error, asyncpg.PostgresError, asyncpg.InterfaceError, client_state)
    return (dbapi.Error,)


def is_conflict(exc: sa.DBAPIError) -> bool:
    """Whether the database aborted the transaction for a conflict (deadlock, lock
    wait timeout, serialization failure) or SQLite was busy: worth retrying whole."""
    orig = exc.orig
    if sqlstate(orig) in PG_CONFLICT:
        return True
    code = orig.args[0] if orig is not None and orig.args else 0
    busy = isinstance(exc, sa.OperationalError) and "locked" in str(orig)
    return code in MYSQL_CONFLICT or busy


def classify(exc: BaseException, dialect: Dialect) -> Kind:
    """What a raw driver error means for the statement that raised it."""
    if isinstance(exc, OSError):  # TimeoutError included
        return "lost"
    state = sqlstate(exc)
    if state:
        return _pg_kind(state)
    pg = _asyncpg()
    if pg is not None and isinstance(exc, pg.exceptions.InternalClientError):
        return "lost"  # its protocol is out of step: the connection is unusable
    if pg is not None and isinstance(exc, pg.InterfaceError):
        # Client-side: "connection is closed", or one the driver gave up on.
        return "lost" if "closed" in str(exc) else "transient"
    if dialect.is_disconnect(cast(Any, exc), None, None):
        return "lost"
    name = type(exc).__name__
    if name == "IntegrityError":
        return "duplicate"
    if name in ("DataError", "ProgrammingError", "NotSupportedError"):
        return "rejected"
    code = exc.args[0] if exc.args and isinstance(exc.args[0], int) else 0
    if code in MYSQL_REJECTED:
        return "rejected"
    if code in MYSQL_CONFLICT:
        return "conflict"
    return "transient"


def translate(exc: BaseException) -> StoreError | None:
    """The StoreError for a SQLAlchemy/driver error; None for anything else (a bug
    stays itself and is reported as INTERNAL)."""
    if isinstance(exc, StoreError):
        return exc
    if isinstance(exc, sa.TimeoutError):
        return StoreUnavailable(f"no database connection became free in time: {exc}")
    if isinstance(exc, OSError):  # TimeoutError included
        return StoreUnavailable(f"the database did not answer: {exc}")
    if not isinstance(exc, sa.DBAPIError):
        return None
    orig = exc.orig
    detail = str(orig)[:300]
    state = sqlstate(orig)
    if state == PG_UNIQUE:
        return DuplicateKey(detail)
    if state.startswith(PG_REJECTED):
        return StoreRejected(detail)
    if isinstance(exc, sa.IntegrityError):
        return DuplicateKey(detail)
    if state in PG_CONFLICT:
        return ConcurrentWrite(f"the database aborted the transaction: {detail}")
    if state.startswith(PG_LOST) or state.startswith(PG_TRANSIENT):
        return StoreUnavailable(detail)
    if type(orig).__name__ == "InternalClientError":  # asyncpg's, as SQLAlchemy adapts it
        return StoreUnavailable(detail)
    code = orig.args[0] if orig is not None and orig.args and isinstance(orig.args[0], int) else 0
    if code in MYSQL_CONFLICT:
        return ConcurrentWrite(f"the database aborted the transaction: {detail}")
    if isinstance(exc, sa.DataError) or code in MYSQL_REJECTED:
        return StoreRejected(detail)
    if exc.connection_invalidated or isinstance(exc, (sa.OperationalError, sa.InterfaceError)):
        # Lost connection, server gone, SQLite busy past its timeout: transient.
        return StoreUnavailable(detail)
    return None


@contextmanager
def driver_errors() -> Iterator[None]:
    """Re-raise any database error escaping the block as its StoreError."""
    try:
        yield
    except StoreError:
        raise
    except BaseException as exc:
        mapped = translate(exc)
        if mapped is None:
            raise
        raise mapped from exc


def boundary(
    fn: Callable[P, Coroutine[Any, Any, T]],
) -> Callable[P, Coroutine[Any, Any, T]]:
    """Mark a public store coroutine: database errors leave it only as StoreErrors."""

    @functools.wraps(fn)
    async def guarded(*args: P.args, **kwargs: P.kwargs) -> T:
        with driver_errors():
            return await fn(*args, **kwargs)

    return guarded
