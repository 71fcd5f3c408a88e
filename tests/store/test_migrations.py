"""The migrations produce exactly the models' schema; serve refuses an old one."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import create_engine, text

from ctxwarden.store import migrate
from ctxwarden.store.models import Base
from ctxwarden.store.urls import sync_url


def test_migrated_schema_matches_models(backend_url: str) -> None:
    engine = create_engine(sync_url(backend_url))
    with engine.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn), Base.metadata)
    engine.dispose()
    assert diff == []


def test_migrate_is_idempotent(backend_url: str) -> None:
    status = migrate.upgrade(backend_url)
    assert status.up_to_date and status.current == migrate.head_revision()


def test_serve_refuses_outdated_schema(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'old.db'}"
    migrate.upgrade(url)
    engine = create_engine(sync_url(url))
    with engine.begin() as conn:
        conn.execute(text("UPDATE alembic_version SET version_num = '0000'"))
    engine.dispose()
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "ctxwarden",
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--database-url",
            url,
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert "run `ctxwarden migrate" in proc.stderr and "0000" in proc.stderr


def test_brand_new_sqlite_database_is_created(tmp_path: Path) -> None:
    from ctxwarden.app.server import ensure_schema

    url = f"sqlite:///{tmp_path / 'new.db'}"
    ensure_schema(url)
    assert migrate.schema_status(url).up_to_date
