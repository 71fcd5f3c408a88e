"""Checks of the ``serve`` settings as a person wrote them (flag, environment or
config file): every problem in one message, each naming the setting."""

from __future__ import annotations

import argparse
from typing import Any

from ctxwarden.observability.logging import parse_level
from ctxwarden.store.urls import async_url
from ctxwarden.util import listen

AT_LEAST_ONE = (
    "max_hot_sessions",
    "max_message_bytes",
    "max_messages_per_request",
    "summarizer_max_output_tokens",
    "max_concurrent_streams",
    "max_connections",
    "max_concurrent_rpcs",
    "max_concurrent_reads",
    "background_max_attempts",
)
NOT_NEGATIVE = (
    "encoding_cache_mb",
    "summarizer_context_window",
    "max_retries",
    "rate_limit_rps",
    "max_sessions_per_tenant",
    "max_stored_bytes_per_tenant",
    "max_read_staleness",
    "db_timeout",
    "purge_archived_after_days",
    "purge_deleted_after_days",
    "purge_idempotency_after_hours",
    "purge_interval",
    "idle_evict_seconds",
    "background_retry_seconds",
    "background_retry_max_seconds",
)
POSITIVE = (
    "db_connect_timeout",
    "db_pool_timeout",
    "summarizer_timeout",
    "compaction_plan_ttl",
    "request_read_timeout",
    "health_interval",
)
AUTO_WRITERS = "auto (1 on SQLite, 2 on MySQL and PostgreSQL)"
AUTO_BACKGROUND = "auto (2 with a summariser, 0 without)"


def _price_table(path: str) -> list[str]:
    if not path:
        return []
    from ctxwarden.core.prices import PriceTableError
    from ctxwarden.service.usage import load_price_table

    try:
        load_price_table(path)
    except PriceTableError as exc:
        return [f"price_table: {exc}"]
    return []


def problems(args: argparse.Namespace) -> list[str]:
    """What is wrong with the settings, one line per setting (empty: all good)."""
    out: list[str] = []
    for name in AT_LEAST_ONE:
        if getattr(args, name) < 1:
            out.append(f"{name} = {getattr(args, name)!r}: must be 1 or more")
    for name in NOT_NEGATIVE:
        if getattr(args, name) < 0:
            out.append(f"{name} = {getattr(args, name)!r}: must be 0 or more")
    for name in POSITIVE:
        if not getattr(args, name) > 0:
            out.append(f"{name} = {getattr(args, name)!r}: must be more than 0 seconds")
    if args.append_writers < -1:
        out.append(
            f"append_writers = {args.append_writers!r}: must be 0 (off), 1 or more, or unset "
            "for the default"
        )
    out += _background(args)
    out += _price_table(getattr(args, "price_table", ""))
    if args.tenant_retention:
        from ctxwarden.config.lifecycle_options import load_tenant_rules

        try:
            load_tenant_rules(args.tenant_retention)
        except ValueError as exc:
            out.append(f"tenant_retention: {exc}")
    try:
        async_url(args.database_url)
    except Exception as exc:
        out.append(f"database_url: {exc}")
    try:
        listen.parse(args.listen)
    except listen.ListenError as exc:
        out.append(f"listen: {exc}")
    if args.metrics_listen:
        try:
            address = listen.parse(args.metrics_listen)
            if address.is_unix:
                out.append("metrics_listen: must be HOST:PORT (metrics are served over HTTP)")
        except listen.ListenError as exc:
            out.append(f"metrics_listen: {str(exc).replace('--listen', '--metrics-listen')}")
    if args.console_listen:
        try:
            if listen.parse(args.console_listen).is_unix:
                out.append("console_listen: must be HOST:PORT (the console is served over HTTP)")
        except listen.ListenError as exc:
            out.append(f"console_listen: {str(exc).replace('--listen', '--console-listen')}")
    try:
        mode = int(str(args.unix_socket_mode), 8)
        if not 0 <= mode <= 0o777:
            raise ValueError
    except ValueError:
        out.append(
            f"unix_socket_mode = {args.unix_socket_mode!r}: must be an octal file mode like 0660"
        )
    try:
        parse_level(args.log_level)
    except ValueError as exc:
        out.append(f"log_level: {exc}")
    return out


def _background(args: argparse.Namespace) -> list[str]:
    """Background compaction summarises with the server's summariser: asked for
    without one, it would never run (sessions would wait for it in vain)."""
    n = args.background_compactions
    if n < -1:
        return [
            f"background_compactions = {n!r}: must be 0 (off), 1 or more, or unset for the default"
        ]
    if n > 0 and args.summarizer == "none":
        return [
            f"background_compactions = {n!r} needs a summariser: add --summarizer "
            "(extractive, openai or anthropic), or set --background-compactions 0"
        ]
    return []


def shown(key: str, value: Any) -> Any:
    """A setting as a person would write it (no internal sentinels)."""
    if key == "append_writers" and isinstance(value, int) and value < 0:
        return AUTO_WRITERS
    if key == "background_compactions" and isinstance(value, int) and value < 0:
        return AUTO_BACKGROUND
    return value
