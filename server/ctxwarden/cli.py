"""Command line: ``ctxwarden serve``, ``migrate``, ``purge``, ``config check`` and
the operator commands (``sessions``, ``context``, ``compact``, ``rollback``).

Every serve flag has an environment variable and a config-file key; flags win
over the environment, which wins over the config file, which wins over the
defaults.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from ctxwarden import __version__, checks, configfile
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


def _add_client(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--target",
        default=_env("CTXWARDEN_TARGET", DEFAULT_LISTEN),
        help="server address (env CTXWARDEN_TARGET; default %(default)s)",
    )
    p.add_argument(
        "--api-key",
        default=_env("CTXWARDEN_API_KEY", ""),
        help="bearer credential (env CTXWARDEN_API_KEY)",
    )
    p.add_argument("--timeout", type=float, default=60.0, help="seconds per call")


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
        help="HOST:PORT (port 1-65535, or 0 to pick a free one) or unix:PATH to listen on "
        "(env CTXWARDEN_LISTEN; default %(default)s)",
    )
    _add_database(serve)
    serve.add_argument(
        "--max-hot-sessions",
        type=int,
        default=_env_int("CTXWARDEN_MAX_HOT_SESSIONS", 1000),
        help="sessions kept in memory (LRU) (env CTXWARDEN_MAX_HOT_SESSIONS; default %(default)s)",
    )
    serve.add_argument(
        "--encoding-cache-mb",
        type=int,
        default=_env_int("CTXWARDEN_ENCODING_CACHE_MB", 32),
        help="memory for encoded messages of recently built sessions, which makes "
        "BuildModelInput of long sessions fast (LRU by session; env "
        "CTXWARDEN_ENCODING_CACHE_MB; default %(default)s; 0 turns it off)",
    )
    serve.add_argument(
        "--append-writers",
        type=int,
        default=_env_int("CTXWARDEN_APPEND_WRITERS", -1),
        help="database connections that group-commit appends: concurrent appends share "
        "one transaction (env CTXWARDEN_APPEND_WRITERS; default: 1 on SQLite, 2 on "
        "MySQL; 0 turns group commit off)",
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

    sec = serve.add_argument_group("security and limits")
    sec.add_argument(
        "--api-keys-file",
        default=_env("CTXWARDEN_API_KEYS_FILE", ""),
        help="lines of TENANT_ID:SHA256_HEX_OF_KEY ('#' comments); clients send "
        "'authorization: Bearer KEY' (env CTXWARDEN_API_KEYS_FILE)",
    )
    sec.add_argument(
        "--jwt-jwks-file",
        default=_env("CTXWARDEN_JWT_JWKS_FILE", ""),
        help="JWKS file with the keys that sign accepted JWTs (HS256, RS256, ES256) "
        "(env CTXWARDEN_JWT_JWKS_FILE)",
    )
    sec.add_argument("--jwt-issuer", default=_env("CTXWARDEN_JWT_ISSUER", ""), help="required iss")
    sec.add_argument(
        "--jwt-audience", default=_env("CTXWARDEN_JWT_AUDIENCE", ""), help="required aud"
    )
    sec.add_argument(
        "--jwt-tenant-claim",
        default=_env("CTXWARDEN_JWT_TENANT_CLAIM", "tenant"),
        help="claim holding the tenant ID (default %(default)s)",
    )
    sec.add_argument("--tls-cert", default=_env("CTXWARDEN_TLS_CERT", ""), help="server cert PEM")
    sec.add_argument("--tls-key", default=_env("CTXWARDEN_TLS_KEY", ""), help="server key PEM")
    sec.add_argument(
        "--tls-client-ca",
        default=_env("CTXWARDEN_TLS_CLIENT_CA", ""),
        help="CA bundle; when set, clients must present a certificate it signed (mTLS); "
        "without a bearer credential the certificate's common name is the tenant",
    )
    sec.add_argument("--no-reflection", action="store_true", help="turn off gRPC server reflection")
    sec.add_argument(
        "--insecure-allow-unauthenticated",
        action="store_true",
        help="DANGEROUS: allow listening on a non-loopback address without authentication",
    )
    sec.add_argument(
        "--rate-limit-rps",
        type=float,
        default=float(_env("CTXWARDEN_RATE_LIMIT_RPS", "0")),
        help="requests per second per tenant, burst 2 s worth; 0 = unlimited "
        "(env CTXWARDEN_RATE_LIMIT_RPS)",
    )
    sec.add_argument(
        "--max-sessions-per-tenant",
        type=int,
        default=_env_int("CTXWARDEN_MAX_SESSIONS_PER_TENANT", 0),
        help="live sessions per tenant; 0 = unlimited (env CTXWARDEN_MAX_SESSIONS_PER_TENANT)",
    )
    sec.add_argument(
        "--max-stored-bytes-per-tenant",
        type=int,
        default=_env_int("CTXWARDEN_MAX_STORED_BYTES_PER_TENANT", 0),
        help="content bytes stored per tenant (live sessions); 0 = unlimited "
        "(env CTXWARDEN_MAX_STORED_BYTES_PER_TENANT)",
    )
    sec.add_argument(
        "--max-concurrent-streams",
        type=int,
        default=_env_int("CTXWARDEN_MAX_CONCURRENT_STREAMS", 100),
        help="concurrent calls per connection (env CTXWARDEN_MAX_CONCURRENT_STREAMS; "
        "default %(default)s)",
    )
    sec.add_argument(
        "--max-connections",
        type=int,
        default=_env_int("CTXWARDEN_MAX_CONNECTIONS", 1000),
        help="client connections at once; more are refused "
        "(env CTXWARDEN_MAX_CONNECTIONS; default %(default)s)",
    )
    sec.add_argument(
        "--max-concurrent-rpcs",
        type=int,
        default=_env_int("CTXWARDEN_MAX_CONCURRENT_RPCS", 1000),
        help="calls in progress server-wide; more get RESOURCE_EXHAUSTED "
        "(env CTXWARDEN_MAX_CONCURRENT_RPCS; default %(default)s)",
    )
    sec.add_argument(
        "--max-concurrent-reads",
        type=int,
        default=_env_int("CTXWARDEN_MAX_CONCURRENT_READS", 32),
        help="authenticated requests being received at once, server-wide; each holds "
        "at most 64 MiB (env CTXWARDEN_MAX_CONCURRENT_READS; default %(default)s)",
    )
    sec.add_argument(
        "--request-read-timeout",
        type=float,
        default=float(_env("CTXWARDEN_REQUEST_READ_TIMEOUT", "30")),
        help="seconds a request message may take to arrive; slower ones are dropped "
        "with DEADLINE_EXCEEDED (env CTXWARDEN_REQUEST_READ_TIMEOUT; default %(default)s)",
    )
    sec.add_argument(
        "--reuse-port",
        action="store_true",
        help="set SO_REUSEPORT so several servers share one port (default: refuse to "
        "start when the address is taken)",
    )
    sec.add_argument(
        "--unix-socket-mode",
        default=_env("CTXWARDEN_UNIX_SOCKET_MODE", "0660"),
        help="octal file mode of a unix:PATH listening socket "
        "(env CTXWARDEN_UNIX_SOCKET_MODE; default %(default)s: owner and group)",
    )

    obs = serve.add_argument_group("observability")
    obs.add_argument(
        "--log-format",
        choices=["json", "text"],
        default=_env("CTXWARDEN_LOG_FORMAT", "json"),
        help="json: one JSON object per line; text: readable lines "
        "(env CTXWARDEN_LOG_FORMAT; default %(default)s)",
    )
    obs.add_argument(
        "--metrics-listen",
        default=_env("CTXWARDEN_METRICS_LISTEN", ""),
        help="HOST:PORT for Prometheus metrics over HTTP (GET /metrics; port 0 picks a free "
        "port) (env CTXWARDEN_METRICS_LISTEN; default: off)",
    )
    obs.add_argument(
        "--otel-endpoint",
        default=_env("OTEL_EXPORTER_OTLP_ENDPOINT", ""),
        help="OTLP endpoint for OpenTelemetry traces, e.g. http://localhost:4317; needs "
        "opentelemetry-sdk (env OTEL_EXPORTER_OTLP_ENDPOINT; default: off)",
    )
    obs.add_argument(
        "--max-read-staleness",
        type=float,
        default=float(_env("CTXWARDEN_MAX_READ_STALENESS", "0")),
        help="seconds a replica may serve a hot session without checking that no other "
        "replica changed it; 0: every read checks (one primary-key read) "
        "(env CTXWARDEN_MAX_READ_STALENESS; default %(default)s)",
    )
    obs.add_argument(
        "--db-timeout",
        type=float,
        default=float(_env("CTXWARDEN_DB_TIMEOUT", "5")),
        help="seconds any database call may take before the RPC fails with UNAVAILABLE "
        "(a hung database); 0: unbounded (env CTXWARDEN_DB_TIMEOUT; default %(default)s)",
    )
    obs.add_argument(
        "--db-connect-timeout",
        type=float,
        default=float(_env("CTXWARDEN_DB_CONNECT_TIMEOUT", "5")),
        help="seconds to open a MySQL connection (env CTXWARDEN_DB_CONNECT_TIMEOUT; "
        "default %(default)s)",
    )
    obs.add_argument(
        "--db-pool-timeout",
        type=float,
        default=float(_env("CTXWARDEN_DB_POOL_TIMEOUT", "5")),
        help="seconds a call waits for a free pooled connection before UNAVAILABLE "
        "(env CTXWARDEN_DB_POOL_TIMEOUT; default %(default)s)",
    )
    obs.add_argument(
        "--health-interval",
        type=float,
        default=float(_env("CTXWARDEN_HEALTH_INTERVAL", "2")),
        help="seconds between database probes driving grpc.health.v1 "
        "(env CTXWARDEN_HEALTH_INTERVAL; default %(default)s)",
    )

    serve.add_argument(
        "--config",
        default=_env("CTXWARDEN_CONFIG", ""),
        help="TOML config file; flags beat environment variables, which beat the file "
        "(env CTXWARDEN_CONFIG)",
    )
    serve.add_argument(
        "--model-table",
        default=_env("CTXWARDEN_MODEL_TABLE", ""),
        help="TOML/JSON file overriding or extending the built-in model table "
        "(env CTXWARDEN_MODEL_TABLE)",
    )
    serve.add_argument(
        "--hf-tokenizer-dir",
        action="append",
        default=[d for d in _env("CTXWARDEN_HF_TOKENIZER_DIRS", "").split(",") if d],
        help="directory under which clients may name hf: tokenizers in policy.tokenizer "
        "(repeatable; env CTXWARDEN_HF_TOKENIZER_DIRS, comma-separated)",
    )

    conf = sub.add_parser("config", help="configuration tools")
    conf_sub = conf.add_subparsers(dest="config_command", required=True)
    check = conf_sub.add_parser(
        "check", help="validate a config file and print the effective settings (secrets masked)"
    )
    check.add_argument("file", nargs="?", default=_env("CTXWARDEN_CONFIG", ""))

    purge = sub.add_parser(
        "purge", help="remove soft-deleted sessions older than a retention period"
    )
    _add_database(purge)
    purge.add_argument(
        "--older-than",
        default=_env("CTXWARDEN_PURGE_OLDER_THAN", "30d"),
        help="retention of deleted sessions, e.g. 30d, 12h, 90m (default %(default)s)",
    )

    for name, help_text in (
        ("sessions", "list sessions or show one (history vs effective context)"),
        ("context", "print a session's model input, optionally in a provider's format"),
        ("compact", "compact a session with the server's summariser"),
        ("rollback", "roll back a session's failed turn, or rewind it"),
    ):
        cmd = sub.add_parser(name, help=help_text)
        if name == "sessions":
            ssub = cmd.add_subparsers(dest="sessions_command", required=True)
            lst = ssub.add_parser("list", help="list sessions, newest first")
            _add_client(lst)
            lst.add_argument("--user-id", default="")
            lst.add_argument("--project-id", default="")
            show = ssub.add_parser("show", help="history, effective context, checkpoints")
            _add_client(show)
            show.add_argument("session_id")
            continue
        _add_client(cmd)
        cmd.add_argument("session_id")
        if name == "context":
            from ctxwarden.admin import FORMATS

            cmd.add_argument("--format", choices=sorted(FORMATS), default="native")
        if name == "compact":
            cmd.add_argument("--instructions", default="")
        if name == "rollback":
            cmd.add_argument("--to-seq", type=int, default=None)

    mig = sub.add_parser("migrate", help="apply database schema migrations")
    _add_database(mig)
    return parser


def _duration_seconds(text: str) -> float:
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400}
    try:
        return float(text[:-1]) * units[text[-1]] if text[-1] in units else float(text)
    except (ValueError, IndexError):
        raise SystemExit(f"ctxwarden: {text!r} is not a duration like 30d, 12h or 90m") from None


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    """Parse, applying ``serve --config FILE`` (below env vars and flags)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "serve" and args.config:
        serve = _subparser(parser, "serve")
        try:
            configfile.apply(serve, configfile.load(args.config), args.config)
        except ValueError as exc:
            raise SystemExit(f"ctxwarden: {exc}") from None
        args = parser.parse_args(argv)
    return args


def _subparser(parser: argparse.ArgumentParser, name: str) -> argparse.ArgumentParser:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            sub: argparse.ArgumentParser = action.choices[name]
            return sub
    raise KeyError(name)


def _config_check(path: str) -> int:
    from ctxwarden.app import BadConfig, make_authenticator, make_summarizer

    parser = build_parser()
    argv = ["serve"] + (["--config", path] if path else [])
    try:
        if path:
            configfile.apply(_subparser(parser, "serve"), configfile.load(path), path)
        args = parser.parse_args(argv)
        wrong = checks.problems(args)
        if wrong:
            raise ValueError("\n  " + "\n  ".join(wrong))
        settings = _settings(args)
        make_authenticator(settings)
        make_summarizer(settings)
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


def _purge(args: argparse.Namespace) -> int:
    import asyncio

    from ctxwarden import ids
    from ctxwarden.store.engine import make_engine
    from ctxwarden.store.repository import Repository, purge_deleted

    cutoff = ids.now_us() - int(_duration_seconds(args.older_than) * 1_000_000)

    spinner = _Spinner("purging deleted sessions")

    async def run() -> int:
        repo = Repository(make_engine(args.database_url))
        try:
            return await purge_deleted(
                repo, deleted_before_us=cutoff, progress=lambda n: spinner.update(f"{n} purged")
            )
        finally:
            await repo.close()

    count = asyncio.run(run())
    spinner.done()
    print(f"purged {count} deleted sessions (deleted more than {args.older_than} ago)")
    return 0


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


def _settings(args: argparse.Namespace) -> Settings:
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
        otel_endpoint=args.otel_endpoint,
        health_interval_seconds=args.health_interval,
        max_read_staleness_seconds=args.max_read_staleness,
        db_timeout_seconds=args.db_timeout,
        db_connect_timeout_seconds=args.db_connect_timeout,
        db_pool_timeout_seconds=args.db_pool_timeout,
        hf_tokenizer_dirs=tuple(args.hf_tokenizer_dir),
        model_table_file=args.model_table,
    )


def main(argv: Sequence[str] | None = None) -> int:
    args = _parse(argv)
    if args.command == "config":
        return _config_check(args.file)
    if args.command == "purge":
        return _purge(args)
    if args.command in ("sessions", "context", "compact", "rollback"):
        from ctxwarden import admin

        return admin.run(args)
    if args.command == "migrate":
        from ctxwarden.store import migrate

        spinner = _Spinner("applying migrations")
        spinner.update()
        try:
            before = migrate.schema_status(args.database_url).current
            status = migrate.upgrade(args.database_url)
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

    wrong = checks.problems(args)
    if wrong:
        print("ctxwarden: invalid settings:\n  " + "\n  ".join(wrong), file=sys.stderr)
        return 2
    settings = _settings(args)
    from ctxwarden.app import run  # configures logging first

    try:
        return run(settings)
    except UnsupportedDatabase as exc:
        print(f"ctxwarden: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
