"""The :class:`Settings` a ``ctxwarden serve`` command line (serve_options.py) describes."""

from __future__ import annotations

import argparse
from dataclasses import fields, replace
from typing import Any

from ctxwarden.config import Limits, Settings
from ctxwarden.config.lifecycle_options import retention_rules
from ctxwarden.core.compaction.types import FileToolNames
from ctxwarden.core.retention import RULE_KEYS, RetentionRules


def _names(value: str) -> tuple[str, ...]:
    return tuple(n.strip() for n in value.split(",") if n.strip())


def _mode(text: object) -> int:
    try:
        mode = int(str(text), 8)
    except ValueError:
        raise SystemExit(
            f"ctxwarden: --unix-socket-mode must be an octal file mode like 0660, got {text!r}"
        ) from None
    if not 0 <= mode <= 0o777:
        raise SystemExit(f"ctxwarden: --unix-socket-mode {text!r} is not a file mode (0-0777)")
    return mode


def workers_problem(args: argparse.Namespace) -> str | None:
    """What is wrong with ``--workers`` (None: nothing)."""
    from ctxwarden.store.urls import is_sqlite

    if args.workers < 1:
        return f"workers = {args.workers!r}: must be 1 or more"
    if args.workers == 1:
        return None
    if is_sqlite(args.database_url):
        return (
            f"workers = {args.workers}: a SQLite file has one writer, so it is served by "
            "one process; use --workers 1, or MySQL/MariaDB or PostgreSQL for more"
        )
    if args.listen.startswith("unix:"):
        return f"workers = {args.workers}: workers share a TCP port; --listen is a unix socket"
    return None


def background_compactions(args: argparse.Namespace) -> int:
    """``--background-compactions``, or when unset (-1): 2 with a summariser, 0 without."""
    if args.background_compactions >= 0:
        return int(args.background_compactions)
    return 0 if args.summarizer == "none" else Settings().background_compactions


RENAMED = {
    "plan_ttl_seconds": "compaction_plan_ttl",
    "health_interval_seconds": "health_interval",
    "max_read_staleness_seconds": "max_read_staleness",
    "db_timeout_seconds": "db_timeout",
    "db_connect_timeout_seconds": "db_connect_timeout",
    "db_pool_timeout_seconds": "db_pool_timeout",
    "model_table_file": "model_table",
    "price_table_file": "price_table",
    "purge_interval_seconds": "purge_interval",
}
"""Settings field -> the ``serve`` option (its dest) it is copied from, where the
names differ; every other field of the same name as an option is copied as is."""

DERIVED = {
    "append_writers": ("append_writers",),
    "limits": ("max_message_bytes", "max_messages_per_request"),
    "file_tools": ("file_read_tools", "file_write_tools", "file_edit_tools", "file_path_argument"),
    "summarizer_kind": ("summarizer",),
    "background_compactions": ("background_compactions",),
    "reflection": ("no_reflection",),
    "unix_socket_mode": ("unix_socket_mode",),
    "hf_tokenizer_dirs": ("hf_tokenizer_dir",),
    "retention": (*RULE_KEYS.values(), "tenant_retention"),
}
"""Settings field -> the options it is computed from (``_derived``)."""


def settings(args: argparse.Namespace) -> Settings:
    """The :class:`Settings` of parsed ``serve`` arguments: options copied by name
    (``RENAMED`` where the names differ), then the ``DERIVED`` fields."""
    copied: dict[str, Any] = {}
    for f in fields(Settings):
        dest = RENAMED.get(f.name, f.name)
        if f.name not in DERIVED and hasattr(args, dest):
            copied[f.name] = getattr(args, dest)
    return replace(Settings(**copied), **_derived(args))


def _derived(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "append_writers": None if args.append_writers < 0 else args.append_writers,
        "limits": Limits(
            max_message_bytes=args.max_message_bytes,
            max_messages_per_request=args.max_messages_per_request,
        ),
        "file_tools": FileToolNames(
            read=_names(args.file_read_tools),
            write=_names(args.file_write_tools),
            edit=_names(args.file_edit_tools),
            path_argument=args.file_path_argument,
        ),
        "summarizer_kind": "" if args.summarizer == "none" else args.summarizer,
        "background_compactions": background_compactions(args),
        "reflection": not args.no_reflection,
        "unix_socket_mode": _mode(args.unix_socket_mode),
        "hf_tokenizer_dirs": tuple(args.hf_tokenizer_dir),
        "retention": _rules(args),
    }


def _rules(args: argparse.Namespace) -> RetentionRules:
    try:
        return retention_rules(args)
    except ValueError as exc:
        raise SystemExit(f"ctxwarden: {exc}") from None
