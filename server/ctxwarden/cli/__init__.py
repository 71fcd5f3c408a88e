"""The ``ctxwarden`` command: parse (parser.py), then run what was asked for
(the commands in :mod:`ctxwarden.commands`, or ``serve`` through :mod:`ctxwarden.app`).

This module imports nothing of the server at import time: ``--version`` and
``health`` (what probes run) stay light.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from ctxwarden import __version__

DATABASE_COMMANDS = ("serve", "migrate", "export", "import", "purge")
READY_FIRST = ("export", "import", "purge")
"""Commands that refuse a database without this ctxwarden's schema before they start
(serve creates a new SQLite file; migrate is how a schema is made)."""


def main(argv: Sequence[str] | None = None) -> int:
    words = list(sys.argv[1:] if argv is None else argv)
    # `--version` and `health` (what probes run) import nothing of the server; every
    # other command builds the full parser, whose modules import SQLAlchemy.
    if words == ["--version"]:
        print(f"ctxwarden {__version__}")
        return 0
    if words[:1] == ["health"]:
        from ctxwarden.commands import health

        return health.main(words[1:])
    from ctxwarden.cli.parser import parse

    args = parse(words)
    # Only a real command line may replace its process (serve --workers N).
    standalone = argv is None
    if args.command not in DATABASE_COMMANDS:
        return _run(args, standalone)
    from ctxwarden.app import database_errors
    from ctxwarden.store.urls import UnsupportedDatabase

    try:
        if args.command in READY_FIRST:
            database_errors.check_ready(args.database_url)
        return _run(args, standalone)
    except UnsupportedDatabase as exc:
        print(f"ctxwarden: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:
        line = database_errors.describe(exc, args.database_url)
        if line is None:
            raise
        print(f"ctxwarden: {line}", file=sys.stderr)
        return 1


def _run(args: argparse.Namespace, standalone: bool = False) -> int:
    from ctxwarden.cli.parser import OPERATOR_COMMANDS, build_parser, subparser
    from ctxwarden.config import checks

    if args.command == "eval":
        from ctxwarden.evaluation.cli import run as run_eval

        return run_eval(args)
    if args.command == "config":
        from ctxwarden.commands.config_check import config_check

        parser = build_parser()
        return config_check(parser, subparser(parser, "serve"), args.file)
    if args.command == "purge":
        from ctxwarden.commands.database import purge

        return purge(args)
    if args.command in OPERATOR_COMMANDS:
        from ctxwarden.commands import admin

        return admin.run(args)
    if args.command == "migrate":
        from ctxwarden.commands.database import migrate_database

        return migrate_database(args.database_url)
    if args.command in ("export", "import"):
        from ctxwarden.transfer import run as transfer

        return transfer.run_export(args) if args.command == "export" else transfer.run_import(args)

    from ctxwarden.config.build import settings, workers_problem

    wrong = checks.problems(args) + [w for w in (workers_problem(args),) if w]
    if len(wrong) == 1:
        print(f"ctxwarden: invalid settings: {wrong[0]}", file=sys.stderr)
        return 2
    if wrong:
        print("ctxwarden: invalid settings:\n  " + "\n  ".join(wrong), file=sys.stderr)
        return 2
    serve_settings = settings(args)
    if args.workers > 1 and standalone:
        from ctxwarden.app.supervise import exec_supervisor

        return exec_supervisor(serve_settings, args.workers, sys.argv[1:])
    if args.workers > 1:
        from ctxwarden.app.workers_run import run_workers

        return run_workers(serve_settings, args.workers)
    from ctxwarden.app.server import run  # configures logging first

    return run(serve_settings)
