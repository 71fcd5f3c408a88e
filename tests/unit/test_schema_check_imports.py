"""A server whose database is up to date checks its schema without Alembic: the
migration tool (with Mako, and Pygments when installed) costs a server ~11 MiB at
rest and every ``--workers`` process as much again. Alembic is loaded only to
migrate (a brand-new SQLite database, ``ctxwarden migrate``)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ctxwarden.store import migrate

RUN = """
import json, sys
from ctxwarden.app.server import ensure_schema
ensure_schema(sys.argv[1])
print(json.dumps(sorted(m for m in ("alembic", "mako") if m in sys.modules)))
"""


def _loaded_after_schema_check(url: str) -> list[str]:
    done = subprocess.run(
        [sys.executable, "-c", RUN, url], capture_output=True, text=True, timeout=60, check=True
    )
    loaded: list[str] = json.loads(done.stdout.strip().splitlines()[-1])
    return loaded


def test_an_up_to_date_database_is_checked_without_alembic(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    migrate.upgrade(url)
    assert _loaded_after_schema_check(url) == []


def test_a_new_sqlite_database_is_still_created_with_alembic(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'new.sqlite'}"
    assert _loaded_after_schema_check(url) == ["alembic", "mako"]
    assert migrate.schema_status(url).up_to_date


def test_the_head_read_from_the_scripts_is_alembics() -> None:
    """The head is read from the migration files' revision lines (no Alembic): it must be
    the head Alembic itself computes, over the same linear chain."""
    from alembic.config import Config
    from alembic.script import ScriptDirectory

    cfg = Config()
    cfg.set_main_option("script_location", str(Path(migrate.__file__).with_name("migrations")))
    script = ScriptDirectory.from_config(cfg)
    assert migrate.head_revision() == script.get_current_head()
    chain = [r.revision for r in script.walk_revisions()]
    assert migrate.revision_chain() == list(reversed(chain))


@pytest.mark.parametrize(
    ("lines", "problem"),
    [
        ({"a": None, "b": "a", "c": "a"}, "two heads"),
        ({"a": None, "b": "x"}, "unknown"),
        ({}, "no migration"),
    ],
)
def test_a_broken_chain_is_refused(lines: dict[str, str | None], problem: str) -> None:
    with pytest.raises(migrate.MigrationChainError, match=problem):
        migrate.linear_chain(lines)
