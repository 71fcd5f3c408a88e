"""The :class:`Settings` a ``ctxwarden serve`` command line (serve_args) describes."""

from __future__ import annotations

import argparse

from ctxwarden.config import Limits, Settings
from ctxwarden.core.compaction.types import FileToolNames
from ctxwarden.core.retention import RetentionRules


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


def settings(args: argparse.Namespace) -> Settings:
    """The :class:`Settings` of parsed ``serve`` arguments."""
    return Settings(
        listen=args.listen,
        database_url=args.database_url,
        max_hot_sessions=args.max_hot_sessions,
        append_writers=None if args.append_writers < 0 else args.append_writers,
        encoding_cache_mb=args.encoding_cache_mb,
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
        summarizer_context_window=args.summarizer_context_window,
        background_compactions=background_compactions(args),
        background_retry_seconds=args.background_retry_seconds,
        background_retry_max_seconds=args.background_retry_max_seconds,
        background_max_attempts=args.background_max_attempts,
        api_keys_file=args.api_keys_file,
        jwt_jwks_file=args.jwt_jwks_file,
        jwt_issuer=args.jwt_issuer,
        jwt_audience=args.jwt_audience,
        jwt_tenant_claim=args.jwt_tenant_claim,
        tls_cert=args.tls_cert,
        tls_key=args.tls_key,
        tls_client_ca=args.tls_client_ca,
        reflection=not args.no_reflection,
        insecure_allow_unauthenticated=args.insecure_allow_unauthenticated,
        rate_limit_rps=args.rate_limit_rps,
        max_sessions_per_tenant=args.max_sessions_per_tenant,
        max_stored_bytes_per_tenant=args.max_stored_bytes_per_tenant,
        max_concurrent_streams=args.max_concurrent_streams,
        max_connections=args.max_connections,
        max_concurrent_rpcs=args.max_concurrent_rpcs,
        max_concurrent_reads=args.max_concurrent_reads,
        request_read_timeout=args.request_read_timeout,
        reuse_port=args.reuse_port,
        unix_socket_mode=_mode(args.unix_socket_mode),
        log_format=args.log_format,
        metrics_listen=args.metrics_listen,
        console_listen=args.console_listen,
        otel_endpoint=args.otel_endpoint,
        health_interval_seconds=args.health_interval,
        max_read_staleness_seconds=args.max_read_staleness,
        db_timeout_seconds=args.db_timeout,
        db_connect_timeout_seconds=args.db_connect_timeout,
        db_pool_timeout_seconds=args.db_pool_timeout,
        hf_tokenizer_dirs=tuple(args.hf_tokenizer_dir),
        model_table_file=args.model_table,
        price_table_file=args.price_table,
        retention=_rules(args),
        purge_interval_seconds=args.purge_interval,
        idle_evict_seconds=args.idle_evict_seconds,
    )


def _rules(args: argparse.Namespace) -> RetentionRules:
    from ctxwarden.lifecycle_args import retention_rules

    try:
        return retention_rules(args)
    except ValueError as exc:
        raise SystemExit(f"ctxwarden: {exc}") from None
