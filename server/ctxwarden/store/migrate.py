"""Schema migrations (Alembic), run with a synchronous driver."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import inspect

from ctxwarden.store.engine import make_sync_engine
from ctxwarden.store.urls import sync_url

_SCRIPTS = Path(__file__).with_name("migrations")


def _config(url: str) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(_SCRIPTS))
    cfg.set_main_option(
        "sqlalchemy.url", sync_url(url).render_as_string(hide_password=False).replace("%", "%%")
    )
    return cfg


def head_revision() -> str:
    head = ScriptDirectory.from_config(_config("sqlite://")).get_current_head()
    assert head is not None
    return head


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
            current = MigrationContext.configure(conn).get_current_revision()
            empty = not inspect(conn).get_table_names()
    finally:
        engine.dispose()
    return SchemaStatus(current, head_revision(), empty)


def upgrade(url: str, revision: str = "head") -> SchemaStatus:
    """Apply migrations up to ``revision``; safe to run repeatedly."""
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
    if end is None or start == end:
        return []
    script = ScriptDirectory.from_config(_config("sqlite://"))
    walked = [r.revision for r in script.walk_revisions(base=start or "base", head=end)]
    return [r for r in reversed(walked) if r != start]
