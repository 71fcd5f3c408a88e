"""The parser of the ``ctxwarden`` command: ``serve`` (its options live in
:mod:`ctxwarden.config`), ``health``, and the operator commands (:mod:`ctxwarden.commands`).

Built only by commands that need it: ``--version`` and ``health`` (what probes run)
never import this module, whose option modules import SQLAlchemy.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence

from ctxwarden import __version__
from ctxwarden.commands import health
from ctxwarden.commands.admin import FORMATS
from ctxwarden.commands.usage import add_usage_command
from ctxwarden.config import DEFAULT_LISTEN
from ctxwarden.config import file as configfile
from ctxwarden.config.lifecycle_options import add_retention
from ctxwarden.config.serve_options import add_database, add_serve_arguments
from ctxwarden.evaluation.cli import add_eval_command
from ctxwarden.transfer.run import add_arguments as add_transfer

DESCRIPTION = """Command line: ``ctxwarden serve``, ``migrate``, ``purge``, ``config check``,
``health`` and the operator commands (``sessions``, ``context``, ``compact``,
``rollback``).

Every serve flag has an environment variable and a config-file key; flags win
over the environment, which wins over the config file, which wins over the
defaults.
"""

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
    add_usage_command(sub, _add_client)

    add_transfer(sub)

    mig = sub.add_parser("migrate", help="apply database schema migrations")
    add_database(mig)
    add_eval_command(sub)  # ctxwarden eval compaction (evaluation/cli.py)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ctxwarden", description=DESCRIPTION)
    parser.add_argument("--version", action="version", version=f"ctxwarden {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    add_serve_arguments(sub.add_parser("serve", help="run the gRPC server"))
    health.add_arguments(
        sub.add_parser("health", help="check a running server's gRPC health (exit 0: SERVING)")
    )
    add_commands(sub)
    return parser


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    """Parse, applying ``serve --config FILE`` (below env vars and flags)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "serve" and args.config:
        serve = subparser(parser, "serve")
        try:
            configfile.apply(serve, configfile.load(args.config), args.config)
        except ValueError as exc:
            raise SystemExit(f"ctxwarden: {exc}") from None
        args = parser.parse_args(argv)
    return args
