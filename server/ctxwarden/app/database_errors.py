"""What an operator reads when a command cannot use its database: one line that says
what to do, never a traceback, never the password.

``check_ready`` is what ``export``, ``import`` and ``purge`` run first: the database
exists and has the schema this ctxwarden needs (a SQLite file that does not exist is
refused, not created). ``describe`` turns the error of any command (a refused
connection, an unknown database, refused credentials, a missing schema) into that
line; ``cli.main`` prints it and exits with status 1.
"""

from __future__ import annotations

import os
import socket
import sqlite3
from collections.abc import Iterator

from sqlalchemy.engine import make_url

from ctxwarden.observability.health import sqlite_path
from ctxwarden.store import migrate

_LOST = {2006, 2013, 2055}
_UNREACHABLE = {2002, 2003, 2005}


class DatabaseProblem(Exception):
    """A database a command cannot use; ``str()`` is the one line to print."""


def shown_url(url: str) -> str:
    """The URL without its password (``***``)."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except Exception:
        return "the configured database URL"


def check_ready(url: str) -> None:
    """Raise DatabaseProblem unless the database at ``url`` exists and its schema is
    the one this ctxwarden needs. Never creates anything."""
    path = sqlite_path(url)
    if path is not None and not os.path.isfile(path):
        raise DatabaseProblem(
            f"there is no SQLite database at {path}: check --database-url "
            f"(`ctxwarden migrate --database-url {shown_url(url)}` creates one)"
        )
    problem = schema_problem(url, migrate.schema_status(url))
    if problem:
        raise DatabaseProblem(problem)


def schema_problem(url: str, status: migrate.SchemaStatus) -> str | None:
    """What to do when the database's schema is not the one this ctxwarden needs."""
    if status.current is None:
        return _no_schema(url)
    if not status.up_to_date:
        return (
            f"the database at {shown_url(url)} has schema revision {status.current} but "
            f"this ctxwarden needs {status.head}: run `ctxwarden migrate --database-url "
            f"{shown_url(url)}` (with this ctxwarden)"
        )
    return None


def _no_schema(url: str) -> str:
    return (
        f"the database at {shown_url(url)} has no ctxwarden schema: run "
        f"`ctxwarden migrate --database-url {shown_url(url)}`"
    )


def _chain(exc: BaseException) -> Iterator[BaseException]:
    """``exc``, the driver error SQLAlchemy wraps (``orig``) and their causes."""
    seen: set[int] = set()
    todo = [exc]
    while todo:
        e = todo.pop(0)
        if id(e) in seen:
            continue
        seen.add(id(e))
        yield e
        todo += [x for x in (getattr(e, "orig", None), e.__cause__, e.__context__) if x]


def _mysql_code(e: BaseException) -> int | None:
    code = e.args[0] if e.args else None
    module = type(e).__module__
    return code if isinstance(code, int) and module.startswith("pymysql") else None


def describe(exc: BaseException, url: str) -> str | None:
    """One line for an error reaching or using the database at ``url`` (None: not
    such an error)."""
    if isinstance(exc, DatabaseProblem):
        return str(exc)
    chain = list(_chain(exc))
    codes = {c for c in map(_mysql_code, chain) if c is not None}
    states = {str(getattr(e, "sqlstate", None) or getattr(e, "pgcode", None)) for e in chain}
    text = " ".join(str(e) for e in chain).lower()
    where = f"the database at {shown_url(url)}"
    if any(isinstance(e, ConnectionRefusedError) for e in chain) or "connection refused" in text:
        return f"{where} refused the connection: is the server running?"
    if codes & _UNREACHABLE or any(isinstance(e, socket.gaierror) for e in chain):
        return f"cannot reach {where}: is the server running, and are the host and port right?"
    if 1049 in codes or "3D000" in states or ('database "' in text and "does not exist" in text):
        return f"{where} does not exist: create it, then run `ctxwarden migrate` on it"
    if codes & {1044, 1045, 1698} or states & {"28P01", "28000"} or "authentication failed" in text:
        return f"{where} refused the credentials: check the user and password in --database-url"
    if 1146 in codes or "42P01" in states or "no such table" in text:
        return _no_schema(url)
    if "unable to open database file" in text:
        return f"cannot open {where}: does its directory exist, and may ctxwarden write there?"
    if codes & _LOST or any(isinstance(e, (ConnectionError, TimeoutError)) for e in chain):
        return f"lost the connection to {where} ({_first_line(exc, url)}): is the server running?"
    if _is_database_error(chain):
        return f"{where} failed: {_first_line(exc, url)}"
    return None


def _is_database_error(chain: list[BaseException]) -> bool:
    from sqlalchemy.exc import SQLAlchemyError

    from ctxwarden.store.errors import StoreError

    return any(isinstance(e, (SQLAlchemyError, StoreError, sqlite3.Error)) for e in chain)


def _first_line(exc: BaseException, url: str) -> str:
    """The error's own first line, without the password should a driver quote it."""
    orig = getattr(exc, "orig", None) or exc
    line = (str(orig).strip().splitlines() or [type(orig).__name__])[0]
    password = make_url(url).password if "://" in url else None
    return line.replace(str(password), "***") if password else line
