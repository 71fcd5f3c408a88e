"""Command line: ``ctxwarden serve``, ``migrate``, ``purge``, ``config check``,
``health`` and the operator commands (``sessions``, ``context``, ``compact``,
``rollback``).

Every serve flag has an environment variable and a config-file key; flags win
over the environment, which wins over the config file, which wins over the
defaults.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from ctxwarden import __version__


def build_parser() -> argparse.ArgumentParser:
    from ctxwarden import commands, probe
    from ctxwarden.serve_args import add_serve_arguments

    parser = argparse.ArgumentParser(prog="ctxwarden", description=__doc__)
    parser.add_argument("--version", action="version", version=f"ctxwarden {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    add_serve_arguments(sub.add_parser("serve", help="run the gRPC server"))
    probe.add_arguments(
        sub.add_parser("health", help="check a running server's gRPC health (exit 0: SERVING)")
    )
    commands.add_commands(sub)
    return parser


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    """Parse, applying ``serve --config FILE`` (below env vars and flags)."""
    from ctxwarden import commands, configfile

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
    words = list(sys.argv[1:] if argv is None else argv)
    # `--version` and `health` (what probes run) import nothing of the server; every
    # other command builds the full parser, whose modules import SQLAlchemy.
    if words == ["--version"]:
        print(f"ctxwarden {__version__}")
        return 0
    if words[:1] == ["health"]:
        from ctxwarden import probe

        return probe.main(words[1:])
    args = _parse(words)
    if args.command not in DATABASE_COMMANDS:
        return _run(args)
    from ctxwarden import database_errors
    from ctxwarden.store.urls import UnsupportedDatabase

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
    from ctxwarden import checks, commands

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

    from ctxwarden.serve_settings import settings, workers_problem

    wrong = checks.problems(args) + [w for w in (workers_problem(args),) if w]
    if len(wrong) == 1:
        print(f"ctxwarden: invalid settings: {wrong[0]}", file=sys.stderr)
        return 2
    if wrong:
        print("ctxwarden: invalid settings:\n  " + "\n  ".join(wrong), file=sys.stderr)
        return 2
    serve_settings = settings(args)
    if args.workers > 1:
        from ctxwarden.workers import run_workers

        return run_workers(serve_settings, args.workers)
    from ctxwarden.app import run  # configures logging first

    return run(serve_settings)


if __name__ == "__main__":
    sys.exit(main())
