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
from ctxwarden.core.compaction.types import FileToolNames
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


def _names(value: str) -> tuple[str, ...]:
    return tuple(n.strip() for n in value.split(",") if n.strip())


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

    summ = serve.add_argument_group("server-side summariser (for Compact and auto_compact)")
    summ.add_argument(
        "--summarizer",
        choices=["none", "openai", "anthropic", "extractive"],
        default=_env("CTXWARDEN_SUMMARIZER", "none"),
        help="openai: any OpenAI-compatible Chat Completions endpoint; anthropic: the "
        "Messages API; extractive: no LLM (env CTXWARDEN_SUMMARIZER; default %(default)s)",
    )
    summ.add_argument(
        "--summarizer-base-url",
        default=_env("CTXWARDEN_SUMMARIZER_BASE_URL", ""),
        help="API base URL, e.g. http://localhost:11434/v1 (env CTXWARDEN_SUMMARIZER_BASE_URL; "
        "default: the provider's public API)",
    )
    summ.add_argument(
        "--summarizer-model",
        default=_env("CTXWARDEN_SUMMARIZER_MODEL", ""),
        help="model that writes summaries (env CTXWARDEN_SUMMARIZER_MODEL)",
    )
    summ.add_argument(
        "--summarizer-api-key-env",
        default=_env("CTXWARDEN_SUMMARIZER_API_KEY_ENV", ""),
        help="name of the environment variable holding the API key "
        "(env CTXWARDEN_SUMMARIZER_API_KEY_ENV; default OPENAI_API_KEY / ANTHROPIC_API_KEY)",
    )
    summ.add_argument(
        "--summarizer-timeout",
        type=float,
        default=float(_env("CTXWARDEN_SUMMARIZER_TIMEOUT", "60")),
        help="seconds per summariser request (env CTXWARDEN_SUMMARIZER_TIMEOUT; "
        "default %(default)s)",
    )
    summ.add_argument(
        "--summarizer-max-output-tokens",
        type=int,
        default=_env_int("CTXWARDEN_SUMMARIZER_MAX_OUTPUT_TOKENS", 16384),
        help="the summariser model's output limit; summaries are budgeted below it "
        "(env CTXWARDEN_SUMMARIZER_MAX_OUTPUT_TOKENS; default %(default)s)",
    )
    comp = serve.add_argument_group("compaction")
    comp.add_argument(
        "--compaction-plan-ttl",
        type=float,
        default=float(_env("CTXWARDEN_COMPACTION_PLAN_TTL", "600")),
        help="seconds a PrepareCompaction plan stays committable "
        "(env CTXWARDEN_COMPACTION_PLAN_TTL; default %(default)s)",
    )
    comp.add_argument(
        "--file-read-tools",
        default=_env("CTXWARDEN_FILE_READ_TOOLS", "read"),
        help="comma-separated tool names that read a file (default %(default)s)",
    )
    comp.add_argument(
        "--file-write-tools",
        default=_env("CTXWARDEN_FILE_WRITE_TOOLS", "write"),
        help="comma-separated tool names that write a file (default %(default)s)",
    )
    comp.add_argument(
        "--file-edit-tools",
        default=_env("CTXWARDEN_FILE_EDIT_TOOLS", "edit"),
        help="comma-separated tool names that edit a file (default %(default)s)",
    )
    comp.add_argument(
        "--file-path-argument",
        default=_env("CTXWARDEN_FILE_PATH_ARGUMENT", "path"),
        help="tool-call argument holding the file path (default %(default)s)",
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
        plan_ttl_seconds=args.compaction_plan_ttl,
        file_tools=FileToolNames(
            read=_names(args.file_read_tools),
            write=_names(args.file_write_tools),
            edit=_names(args.file_edit_tools),
            path_argument=args.file_path_argument,
        ),
        summarizer_kind="" if args.summarizer == "none" else args.summarizer,
        summarizer_base_url=args.summarizer_base_url,
        summarizer_model=args.summarizer_model,
        summarizer_api_key_env=args.summarizer_api_key_env,
        summarizer_timeout=args.summarizer_timeout,
        summarizer_max_output_tokens=args.summarizer_max_output_tokens,
    )
    from ctxwarden.app import run

    try:
        return run(settings)
    except UnsupportedDatabase as exc:
        print(f"ctxwarden: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
