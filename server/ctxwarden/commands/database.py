"""``ctxwarden purge`` and ``ctxwarden migrate``: the commands that work on the
database directly, without a running server."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from ctxwarden.store.urls import UnsupportedDatabase


class _Spinner:
    """A one-line progress indicator on stderr, only when it is a terminal."""

    FRAMES = "|/-\\"

    def __init__(self, label: str) -> None:
        self.label = label
        self.n = 0
        self.tty = sys.stderr.isatty()

    def update(self, status: str = "") -> None:
        if self.tty:
            self.n += 1
            frame = self.FRAMES[self.n % len(self.FRAMES)]
            sys.stderr.write(f"\r{frame} {self.label} {status}   ")
            sys.stderr.flush()

    def done(self) -> None:
        if self.tty:
            sys.stderr.write("\r" + " " * (len(self.label) + 40) + "\r")


def _duration_seconds(text: str) -> float:
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400}
    try:
        return float(text[:-1]) * units[text[-1]] if text[-1] in units else float(text)
    except (ValueError, IndexError):
        raise SystemExit(f"ctxwarden: {text!r} is not a duration like 30d, 12h or 90m") from None


def purge(args: argparse.Namespace) -> int:
    """``purge``: apply the retention rules once (``--dry-run``: count only)."""
    import asyncio
    from dataclasses import replace

    from ctxwarden.config.lifecycle_options import retention_rules
    from ctxwarden.core.retention import RULE_KEYS, RuleKind
    from ctxwarden.service.retention import Retention
    from ctxwarden.store.engine import make_engine
    from ctxwarden.store.repository import Store

    try:
        rules = retention_rules(args)
    except ValueError as exc:
        print(f"ctxwarden: {exc}", file=sys.stderr)
        return 2
    if args.older_than:
        # "0s" means every deleted session, which a rule value of 0 (off) cannot
        # say: a positive value too small to move the cutoff says it.
        days = _duration_seconds(args.older_than) / 86400 or 1e-12
        rules = replace(rules, default=replace(rules.default, purge_deleted_after_days=days))
    if rules.empty:
        print(
            "ctxwarden: no retention rule is set, so nothing would be purged: give "
            "--purge-archived-after-days, --purge-deleted-after-days (or --older-than), "
            "--purge-idempotency-after-hours or --tenant-retention",
            file=sys.stderr,
        )
        return 2
    spinner = _Spinner("applying retention rules")
    spinner.update()

    async def run() -> Any:
        store = Store(make_engine(args.database_url))
        try:
            return await Retention(store, rules).run(dry_run=args.dry_run)
        finally:
            await store.close()

    report = asyncio.run(run())
    spinner.done()
    verb = "would purge" if args.dry_run else "purged"
    labels = {
        RuleKind.ARCHIVED: "archived sessions",
        RuleKind.DELETED: "deleted sessions",
        RuleKind.IDEMPOTENCY: "idempotency records",
    }
    named = {cut.kind for cut in report.cutoffs}
    for kind in RuleKind:
        if kind not in named:
            print(f"{labels[kind]}: no rule ({RULE_KEYS[kind]} is 0 for every tenant)")
            continue
        by_tenant = sorted((t, n) for (k, t), n in report.counts.items() if k is kind)
        detail = ", ".join(f"{t or '(no tenant)'}: {n}" for t, n in by_tenant)
        print(f"{verb} {report.total(kind)} {labels[kind]}" + (f" ({detail})" if detail else ""))
    return 0


def migrate_database(database_url: str) -> int:
    """``migrate``: upgrade the schema to the head revision; 2 on an unsupported database."""
    from ctxwarden.store import migrate

    spinner = _Spinner("applying migrations")
    spinner.update()
    try:
        before = migrate.schema_status(database_url).current
        status = migrate.upgrade(database_url)
        spinner.done()
    except UnsupportedDatabase as exc:
        print(f"ctxwarden: {exc}", file=sys.stderr)
        return 2
    applied = migrate.revisions_between(before, status.current)
    if applied:
        print(
            f"applied {len(applied)} migration{'s' if len(applied) != 1 else ''} "
            f"({', '.join(applied)}): database schema is now at revision {status.current} "
            f"(head {status.head})"
        )
    else:
        print(
            f"database schema is already at revision {status.current} (head "
            f"{status.head}); nothing to apply"
        )
    return 0
