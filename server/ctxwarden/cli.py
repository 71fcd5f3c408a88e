"""Command line: ``ctxwarden serve``, ``migrate``, ``purge``, ``config check`` and
the operator commands (``sessions``, ``context``, ``compact``, ``rollback``).

Every serve flag has an environment variable and a config-file key; flags win
over the environment, which wins over the config file, which wins over the
defaults.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from ctxwarden import __version__, checks, commands, configfile
from ctxwarden.serve_args import add_serve_arguments
from ctxwarden.serve_settings import settings
from ctxwarden.store.urls import UnsupportedDatabase


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ctxwarden", description=__doc__)
    parser.add_argument("--version", action="version", version=f"ctxwarden {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    add_serve_arguments(sub.add_parser("serve", help="run the gRPC server"))
    commands.add_commands(sub)
    return parser


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    """Parse, applying ``serve --config FILE`` (below env vars and flags)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "serve" and args.config:
        serve = commands.subparser(parser, "serve")
        try:
            configfile.apply(serve, configfile.load(args.config), args.config)
        except ValueError as exc:
            raise SystemExit(f"ctxwarden: {exc}") from None
        args = parser.parse_args(argv)
    return args


DATABASE_COMMANDS = ("serve", "migrate", "export", "import", "purge")
READY_FIRST = ("export", "import", "purge")
"""Commands that refuse a database without this ctxwarden's schema before they start
(serve creates a new SQLite file; migrate is how a schema is made)."""


def main(argv: Sequence[str] | None = None) -> int:
    args = _parse(argv)
    if args.command not in DATABASE_COMMANDS:
        return _run(args)
    from ctxwarden import database_errors

    try:
        if args.command in READY_FIRST:
            database_errors.check_ready(args.database_url)
        return _run(args)
    except UnsupportedDatabase as exc:
        print(f"ctxwarden: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:
        line = database_errors.describe(exc, args.database_url)
        if line is None:
            raise
        print(f"ctxwarden: {line}", file=sys.stderr)
        return 1


def _run(args: argparse.Namespace) -> int:
    if args.command == "eval":
        from ctxwarden.evaluation.cli import run as run_eval

        return run_eval(args)
    if args.command == "config":
        return commands.config_check(build_parser(), args.file)
    if args.command == "purge":
        return commands.purge(args)
    if args.command in commands.OPERATOR_COMMANDS:
        from ctxwarden import admin

        return admin.run(args)
    if args.command == "migrate":
        return commands.migrate_database(args.database_url)
    if args.command in ("export", "import"):
        from ctxwarden.transfer import run as transfer

        return transfer.run_export(args) if args.command == "export" else transfer.run_import(args)

    wrong = checks.problems(args)
    if len(wrong) == 1:
        print(f"ctxwarden: invalid settings: {wrong[0]}", file=sys.stderr)
        return 2
    if wrong:
        print("ctxwarden: invalid settings:\n  " + "\n  ".join(wrong), file=sys.stderr)
        return 2
    serve_settings = settings(args)
    from ctxwarden.app import run  # configures logging first

    return run(serve_settings)


if __name__ == "__main__":
    sys.exit(main())
