"""The commands besides ``serve``: ``config check``, ``purge``, ``migrate`` and the
operator commands (``sessions``, ``context``, ``compact``, ``rollback``, run by
:mod:`ctxwarden.admin`): their arguments and, but for the operator commands,
their implementations."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from ctxwarden import checks, configfile
from ctxwarden.config import DEFAULT_LISTEN
from ctxwarden.evaluation.cli import add_eval_command
from ctxwarden.serve_args import add_database
from ctxwarden.serve_settings import settings, workers_problem
from ctxwarden.store.urls import UnsupportedDatabase

OPERATOR_COMMANDS = ("sessions", "context", "compact", "rollback", "usage")


def subparser(parser: argparse.ArgumentParser, name: str) -> argparse.ArgumentParser:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            sub: argparse.ArgumentParser = action.choices[name]
            return sub
    raise KeyError(name)


def _add_client(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--target",
        default=os.environ.get("CTXWARDEN_TARGET", DEFAULT_LISTEN),
        help="server address (env CTXWARDEN_TARGET; default %(default)s)",
    )
    p.add_argument(
        "--api-key",
        default=os.environ.get("CTXWARDEN_API_KEY", ""),
        help="bearer credential (env CTXWARDEN_API_KEY)",
    )
    p.add_argument("--timeout", type=float, default=60.0, help="seconds per call")


def _add_session_command(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], name: str, help_text: str
) -> argparse.ArgumentParser:
    """An operator command on one session: client flags and a SESSION_ID."""
    cmd = sub.add_parser(name, help=help_text)
    _add_client(cmd)
    cmd.add_argument("session_id")
    return cmd


def add_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add every command but ``serve`` to ``ctxwarden``'s subparsers, in help order."""
    conf = sub.add_parser("config", help="configuration tools")
    conf_sub = conf.add_subparsers(dest="config_command", required=True)
    check = conf_sub.add_parser(
        "check", help="validate a config file and print the effective settings (secrets masked)"
    )
    check.add_argument("file", nargs="?", default=os.environ.get("CTXWARDEN_CONFIG", ""))

    purge = sub.add_parser(
        "purge",
        help="apply the retention rules: purge archived and deleted sessions and idempotency "
        "records older than the rules say (nothing a rule does not name)",
    )
    add_database(purge)
    from ctxwarden.lifecycle_args import add_retention

    add_retention(purge)
    purge.add_argument(
        "--older-than",
        default=os.environ.get("CTXWARDEN_PURGE_OLDER_THAN", ""),
        help="the same as --purge-deleted-after-days, as a duration: 30d, 12h, 90m",
    )
    purge.add_argument(
        "--dry-run",
        action="store_true",
        help="only count what each rule would purge, by tenant; remove nothing",
    )

    sessions = sub.add_parser(
        "sessions", help="list sessions or show one (history vs effective context)"
    )
    ssub = sessions.add_subparsers(dest="sessions_command", required=True)
    lst = ssub.add_parser("list", help="list sessions, newest first")
    _add_client(lst)
    lst.add_argument("--user-id", default="")
    lst.add_argument("--project-id", default="")
    show = ssub.add_parser("show", help="history, effective context, checkpoints")
    _add_client(show)
    show.add_argument("session_id")

    from ctxwarden.admin import FORMATS

    context = _add_session_command(
        sub, "context", "print a session's model input, optionally in a provider's format"
    )
    context.add_argument("--format", choices=sorted(FORMATS), default="native")
    compact = _add_session_command(sub, "compact", "compact a session with the server's summariser")
    compact.add_argument("--instructions", default="")
    rollback = _add_session_command(
        sub, "rollback", "roll back a session's failed turn, or rewind it"
    )
    rollback.add_argument("--to-seq", type=int, default=None)
    from ctxwarden.usage_cli import add_usage_command

    add_usage_command(sub, _add_client)

    from ctxwarden.transfer.run import add_arguments as add_transfer

    add_transfer(sub)

    mig = sub.add_parser("migrate", help="apply database schema migrations")
    add_database(mig)
    add_eval_command(sub)  # ctxwarden eval compaction (evaluation/cli.py)


def config_check(parser: argparse.ArgumentParser, path: str) -> int:
    """``config check [FILE]``: validate like ``serve --config FILE`` would, print the
    effective settings with secrets masked; 2 when invalid."""
    from ctxwarden.app import BadConfig, make_authenticator, make_summarizer

    argv = ["serve"] + (["--config", path] if path else [])
    try:
        if path:
            configfile.apply(subparser(parser, "serve"), configfile.load(path), path)
        args = parser.parse_args(argv)
        wrong = checks.problems(args) + [w for w in (workers_problem(args),) if w]
        if wrong:
            raise ValueError("\n  " + "\n  ".join(wrong))
        serve_settings = settings(args)
        make_authenticator(serve_settings)
        make_summarizer(serve_settings)
        if args.model_table:
            from ctxwarden.modeltable import load_model_table

            load_model_table(args.model_table)
    except (ValueError, BadConfig, SystemExit) as exc:
        print(f"ctxwarden: config is invalid: {exc}", file=sys.stderr)
        return 2
    for key, value in configfile.effective(args).items():
        print(f"{key} = {checks.shown(key, value)!r}")
    return 0


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

    from ctxwarden.core.retention import RULE_KEYS, RuleKind
    from ctxwarden.lifecycle_args import retention_rules
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
