"""Command line: ``ctxwarden serve`` and ``ctxwarden migrate``.

Every flag has an environment variable; flags win over the environment,
which wins over the defaults.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence

from ctxwarden import __version__
from ctxwarden.config import DEFAULT_LISTEN, Limits, Settings
from ctxwarden.store.urls import DEFAULT_DATABASE_URL, UnsupportedDatabase


def _env(name: str, default: str) -> str:
    return os.environ.get(name, default)


def _env_int(name: str, default: int) -> int:
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    try:
        return int(value)
    except ValueError:
        raise SystemExit(f"ctxwarden: {name} must be an integer, got {value!r}") from None


def _add_database(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--database-url",
        default=_env("CTXWARDEN_DATABASE_URL", DEFAULT_DATABASE_URL),
        help="sqlite:///PATH or mysql+aiomysql://USER:PASS@HOST:PORT/DB "
        "(env CTXWARDEN_DATABASE_URL; default %(default)s)",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ctxwarden", description=__doc__)
    parser.add_argument("--version", action="version", version=f"ctxwarden {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", help="run the gRPC server")
    serve.add_argument(
        "--listen",
        default=_env("CTXWARDEN_LISTEN", DEFAULT_LISTEN),
        help="HOST:PORT to listen on (env CTXWARDEN_LISTEN; default %(default)s; port 0 "
        "picks a free port)",
    )
    _add_database(serve)
    serve.add_argument(
        "--max-hot-sessions",
        type=int,
        default=_env_int("CTXWARDEN_MAX_HOT_SESSIONS", 1000),
        help="sessions kept in memory (LRU) (env CTXWARDEN_MAX_HOT_SESSIONS; default %(default)s)",
    )
    serve.add_argument(
        "--max-message-bytes",
        type=int,
        default=_env_int("CTXWARDEN_MAX_MESSAGE_BYTES", Limits().max_message_bytes),
        help="largest accepted message (env CTXWARDEN_MAX_MESSAGE_BYTES; default %(default)s)",
    )
    serve.add_argument(
        "--max-messages-per-request",
        type=int,
        default=_env_int("CTXWARDEN_MAX_MESSAGES_PER_REQUEST", Limits().max_messages_per_request),
        help="messages per append (env CTXWARDEN_MAX_MESSAGES_PER_REQUEST; default %(default)s)",
    )
    serve.add_argument(
        "--max-retries",
        type=int,
        default=_env_int("CTXWARDEN_MAX_RETRIES", 3),
        help="transient failures answered with RETRY before FAIL "
        "(env CTXWARDEN_MAX_RETRIES; default %(default)s)",
    )
    serve.add_argument(
        "--log-level",
        default=_env("CTXWARDEN_LOG_LEVEL", "INFO"),
        help="DEBUG, INFO, WARNING or ERROR (env CTXWARDEN_LOG_LEVEL; default %(default)s)",
    )

    mig = sub.add_parser("migrate", help="apply database schema migrations")
    _add_database(mig)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "migrate":
        from ctxwarden.store import migrate

        try:
            status = migrate.upgrade(args.database_url)
        except UnsupportedDatabase as exc:
            print(f"ctxwarden: {exc}", file=sys.stderr)
            return 2
        print(f"database schema is at revision {status.current} (head {status.head})")
        return 0

    logging.basicConfig(
        level=args.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    settings = Settings(
        listen=args.listen,
        database_url=args.database_url,
        max_hot_sessions=args.max_hot_sessions,
        max_retries=args.max_retries,
        limits=Limits(
            max_message_bytes=args.max_message_bytes,
            max_messages_per_request=args.max_messages_per_request,
        ),
        log_level=args.log_level,
    )
    from ctxwarden.app import run

    try:
        return run(settings)
    except UnsupportedDatabase as exc:
        print(f"ctxwarden: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
