"""``ctxwarden purge`` with retention rules: per-tenant file, dry run, refusals."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

from sqlalchemy import create_engine, text

from ctxwarden.store.urls import sync_url
from ctxwarden.util import ids
from tests.e2e.test_cli import cli
from tests.support.inproc import new_session, replica, user_msg

DAY_US = 86_400_000_000


async def _seed(url: str, tenants: list[str]) -> list[str]:
    """One archived session per tenant, archived three days ago."""
    out = []
    async with replica(url) as m:
        for tenant in tenants:
            sid = await new_session(m, tenant, "old")
            await m.append(sid, [user_msg("hello")], None, None)
            await m.archive_session(sid)
            out.append(sid)
    engine = create_engine(sync_url(url))
    with engine.begin() as conn:
        conn.execute(
            text("UPDATE sessions SET archive_time_us = :t WHERE session_id = :s"),
            [{"t": ids.now_us() - 3 * DAY_US, "s": sid} for sid in out],
        )
    engine.dispose()
    return out


def _exists(url: str, sid: str) -> bool:
    engine = create_engine(sync_url(url))
    with engine.connect() as conn:
        n = conn.execute(text("SELECT COUNT(*) FROM sessions WHERE session_id = :s"), {"s": sid})
        found = int(n.scalar_one()) == 1
    engine.dispose()
    return found


def test_purge_applies_tenant_rules_with_a_dry_run_first(backend_url: str, tmp_path: Path) -> None:
    named, other = f"p{uuid.uuid4().hex[:10]}", f"p{uuid.uuid4().hex[:10]}"
    mine, theirs = asyncio.run(_seed(backend_url, [named, other]))
    rules = tmp_path / "retention.toml"
    rules.write_text(f"[tenants.{named}]\npurge_archived_after_days = 2\n")
    args = ("purge", "--database-url", backend_url, "--tenant-retention", str(rules))

    dry = cli(*args, "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert f"would purge 1 archived sessions ({named}: 1)" in dry.stdout
    assert "deleted sessions: no rule" in dry.stdout
    assert _exists(backend_url, mine)

    done = cli(*args)
    assert done.returncode == 0, done.stderr
    assert f"purged 1 archived sessions ({named}: 1)" in done.stdout
    assert not _exists(backend_url, mine) and _exists(backend_url, theirs)
    again = cli(*args)
    assert "purged 0 archived sessions" in again.stdout


def test_purge_refuses_to_run_without_a_rule_or_with_a_bad_file(
    backend_url: str, tmp_path: Path
) -> None:
    none = cli("purge", "--database-url", backend_url)
    assert none.returncode == 2 and "no retention rule is set" in none.stderr
    bad = tmp_path / "bad.toml"
    bad.write_text("[tenants.acme]\npurge_archived_after_dayz = 1\n")
    wrong = cli("purge", "--database-url", backend_url, "--tenant-retention", str(bad))
    assert wrong.returncode == 2 and "unknown keys purge_archived_after_dayz" in wrong.stderr
    conf = tmp_path / "c.toml"
    conf.write_text(
        f'purge_interval = 3600\nidle_evict_seconds = 900\ntenant_retention = "{bad}"\n'
    )
    check = cli("config", "check", str(conf))
    assert check.returncode == 2 and "tenant_retention" in check.stderr
    bad.write_text("[tenants.acme]\npurge_archived_after_days = 1\n")
    ok = cli("config", "check", str(conf))
    assert ok.returncode == 0, ok.stderr
    assert "purge_interval = 3600.0" in ok.stdout and "idle_evict_seconds = 900.0" in ok.stdout
