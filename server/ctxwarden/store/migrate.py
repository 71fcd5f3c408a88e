"""Schema migrations (Alembic), run with a synchronous driver.

Checking a schema needs no Alembic: the current revision is one row of
``alembic_version`` and the head is read from the migration scripts' own
``revision`` / ``down_revision`` lines (a linear chain; a test holds it to
Alembic's head). Alembic, with Mako (and Pygments when installed), costs a
process ~11 MiB, so a server on an up-to-date database, and each of its
``--workers``, never loads it; ``upgrade`` and ``revisions_between`` do.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy import inspect, text

from ctxwarden.store.engine import make_sync_engine
from ctxwarden.store.urls import sync_url

if TYPE_CHECKING:
    from alembic.config import Config

_SCRIPTS = Path(__file__).with_name("migrations")
VERSION_TABLE = "alembic_version"
_REVISION = re.compile(r"^(down_revision|revision)\s*(?::[^=]+)?=\s*(.+?)\s*$", re.MULTILINE)


class MigrationChainError(RuntimeError):
    """The migration scripts do not form one chain from the first to a single head."""


def _config(url: str) -> Config:
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(_SCRIPTS))
    cfg.set_main_option(
        "sqlalchemy.url", sync_url(url).render_as_string(hide_password=False).replace("%", "%%")
    )
    return cfg


def _literal(value: str) -> str | None:
    if value == "None":
        return None
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
        return value[1:-1]
    raise MigrationChainError(f"a revision that is not a plain string: {value}")


def _script_lines() -> dict[str, str | None]:
    """revision -> down_revision, from every script in migrations/versions."""
    lines: dict[str, str | None] = {}
    for path in sorted((_SCRIPTS / "versions").glob("*.py")):
        found = dict(_REVISION.findall(path.read_text(encoding="utf-8")))
        if "revision" not in found:
            continue  # __init__.py
        lines[str(_literal(found["revision"]))] = _literal(found.get("down_revision", "None"))
    return lines


def linear_chain(lines: Mapping[str, str | None]) -> list[str]:
    """The revisions from the first to the head, given revision -> down_revision."""
    if not lines:
        raise MigrationChainError("no migration scripts")
    after: dict[str | None, list[str]] = {}
    for revision, down in lines.items():
        if down is not None and down not in lines:
            raise MigrationChainError(f"{revision} follows an unknown revision {down}")
        after.setdefault(down, []).append(revision)
    chain: list[str] = []
    last: str | None = None
    while last in after:
        following = after[last]
        if len(following) > 1:
            raise MigrationChainError(f"two heads after {last}: {sorted(following)}")
        last = following[0]
        chain.append(last)
    if len(chain) != len(lines):
        raise MigrationChainError("the migration scripts do not form one chain")
    return chain


@cache
def revision_chain() -> list[str]:
    """Every revision, oldest first."""
    return linear_chain(_script_lines())


def head_revision() -> str:
    return revision_chain()[-1]


@dataclass(frozen=True, slots=True)
class SchemaStatus:
    current: str | None
    head: str
    empty: bool

    @property
    def up_to_date(self) -> bool:
        return self.current == self.head


def schema_status(url: str) -> SchemaStatus:
    engine = make_sync_engine(url)
    try:
        with engine.connect() as conn:
            tables = inspect(conn).get_table_names()
            current = None
            if VERSION_TABLE in tables:
                rows = conn.execute(text(f"SELECT version_num FROM {VERSION_TABLE}")).all()
                if len(rows) > 1:
                    found = sorted(str(r[0]) for r in rows)
                    raise MigrationChainError(f"the database is at several revisions: {found}")
                current = str(rows[0][0]) if rows else None
    finally:
        engine.dispose()
    return SchemaStatus(current, head_revision(), not tables)


def upgrade(url: str, revision: str = "head") -> SchemaStatus:
    """Apply migrations up to ``revision``; safe to run repeatedly."""
    from alembic import command

    cfg = _config(url)
    engine = make_sync_engine(url)
    try:
        with engine.connect() as conn:
            cfg.attributes["connection"] = conn  # migrations/env.py runs on it
            command.upgrade(cfg, revision)
            conn.commit()
    finally:
        engine.dispose()
    return schema_status(url)


def revisions_between(start: str | None, end: str | None) -> list[str]:
    """The revisions after ``start`` up to ``end``, oldest first (what an upgrade applied)."""
    from alembic.script import ScriptDirectory

    if end is None or start == end:
        return []
    script = ScriptDirectory.from_config(_config("sqlite://"))
    walked = [r.revision for r in script.walk_revisions(base=start or "base", head=end)]
    return [r for r in reversed(walked) if r != start]
