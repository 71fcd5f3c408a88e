"""The ``ctxwarden serve`` options (the :class:`Settings` they describe: build.py).

Each option's default comes from its environment variable when that is set
(env.py). A config file (``file.apply``) sets defaults by dest, so each option's
dest is also its config-file key, and ``CTXWARDEN_<DEST>`` the variable that
beats the file.
"""

from __future__ import annotations

import argparse
import os

from ctxwarden.config import DEFAULT_DATABASE_URL, DEFAULT_LISTEN, Limits
from ctxwarden.config.env import from_env
from ctxwarden.config.lifecycle_options import add_lifecycle


def add_database(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--database-url",
        **from_env("CTXWARDEN_DATABASE_URL", DEFAULT_DATABASE_URL),
        help="sqlite:///PATH, mysql+aiomysql://USER:PASS@HOST:PORT/DB or "
        "postgresql+asyncpg://USER:PASS@HOST:PORT/DB "
        "(env CTXWARDEN_DATABASE_URL; default %(default)s)",
    )


def add_serve_arguments(serve: argparse.ArgumentParser) -> None:
    """Every ``ctxwarden serve`` option, by group."""
    _general(serve)
    _summarizer(serve)
    _compaction(serve)
    sec = serve.add_argument_group("security and limits")
    _security(sec)
    _limits(sec)
    _processes(sec)
    _observability(serve)
    _files(serve)
    add_lifecycle(serve)


def _general(serve: argparse.ArgumentParser) -> None:
    serve.add_argument(
        "--listen",
        **from_env("CTXWARDEN_LISTEN", DEFAULT_LISTEN),
        help="HOST:PORT (port 1-65535, or 0 to pick a free one) or unix:PATH to listen on "
        "(env CTXWARDEN_LISTEN; default %(default)s)",
    )
    add_database(serve)
    serve.add_argument(
        "--max-hot-sessions",
        **from_env("CTXWARDEN_MAX_HOT_SESSIONS", 1000),
        help="sessions kept in memory (LRU) (env CTXWARDEN_MAX_HOT_SESSIONS; default %(default)s)",
    )
    serve.add_argument(
        "--encoding-cache-mb",
        **from_env("CTXWARDEN_ENCODING_CACHE_MB", 32),
        help="memory for encoded messages of recently built sessions, which makes "
        "BuildModelInput of long sessions fast, and as much for rendered provider JSON "
        "(LRU; env CTXWARDEN_ENCODING_CACHE_MB; default %(default)s; 0 turns them off)",
    )
    serve.add_argument(
        "--append-writers",
        **from_env("CTXWARDEN_APPEND_WRITERS", -1),
        help="database connections that group-commit appends: concurrent appends share "
        "one transaction (env CTXWARDEN_APPEND_WRITERS; default: 1 on SQLite, 2 on "
        "MySQL and PostgreSQL; 0 turns group commit off)",
    )
    serve.add_argument(
        "--max-message-bytes",
        **from_env("CTXWARDEN_MAX_MESSAGE_BYTES", Limits().max_message_bytes),
        help="largest accepted message (env CTXWARDEN_MAX_MESSAGE_BYTES; default %(default)s)",
    )
    serve.add_argument(
        "--max-messages-per-request",
        **from_env("CTXWARDEN_MAX_MESSAGES_PER_REQUEST", Limits().max_messages_per_request),
        help="messages per append (env CTXWARDEN_MAX_MESSAGES_PER_REQUEST; default %(default)s)",
    )
    serve.add_argument(
        "--max-retries",
        **from_env("CTXWARDEN_MAX_RETRIES", 3),
        help="transient failures answered with RETRY before FAIL "
        "(env CTXWARDEN_MAX_RETRIES; default %(default)s)",
    )
    serve.add_argument(
        "--log-level",
        **from_env("CTXWARDEN_LOG_LEVEL", "INFO"),
        help="DEBUG, INFO, WARNING or ERROR (env CTXWARDEN_LOG_LEVEL; default %(default)s)",
    )


def _summarizer(serve: argparse.ArgumentParser) -> None:
    summ = serve.add_argument_group("server-side summariser (for Compact and auto_compact)")
    summ.add_argument(
        "--summarizer",
        choices=["none", "openai", "anthropic", "extractive"],
        **from_env("CTXWARDEN_SUMMARIZER", "none"),
        help="openai: any OpenAI-compatible Chat Completions endpoint; anthropic: the "
        "Messages API; extractive: no LLM (env CTXWARDEN_SUMMARIZER; default %(default)s)",
    )
    summ.add_argument(
        "--summarizer-base-url",
        **from_env("CTXWARDEN_SUMMARIZER_BASE_URL", ""),
        help="API base URL, e.g. http://localhost:11434/v1 (env CTXWARDEN_SUMMARIZER_BASE_URL; "
        "default: the provider's public API)",
    )
    summ.add_argument(
        "--summarizer-model",
        **from_env("CTXWARDEN_SUMMARIZER_MODEL", ""),
        help="model that writes summaries (env CTXWARDEN_SUMMARIZER_MODEL)",
    )
    summ.add_argument(
        "--summarizer-api-key-env",
        **from_env("CTXWARDEN_SUMMARIZER_API_KEY_ENV", ""),
        help="name of the environment variable holding the API key "
        "(env CTXWARDEN_SUMMARIZER_API_KEY_ENV; default OPENAI_API_KEY / ANTHROPIC_API_KEY)",
    )
    summ.add_argument(
        "--summarizer-timeout",
        **from_env("CTXWARDEN_SUMMARIZER_TIMEOUT", 60.0),
        help="seconds per summariser request (env CTXWARDEN_SUMMARIZER_TIMEOUT; "
        "default %(default)s)",
    )
    summ.add_argument(
        "--summarizer-max-output-tokens",
        **from_env("CTXWARDEN_SUMMARIZER_MAX_OUTPUT_TOKENS", 16384),
        help="the summariser model's output limit; summaries are budgeted below it "
        "(env CTXWARDEN_SUMMARIZER_MAX_OUTPUT_TOKENS; default %(default)s)",
    )
    summ.add_argument(
        "--summarizer-context-window",
        **from_env("CTXWARDEN_SUMMARIZER_CONTEXT_WINDOW", 0),
        help="tokens a summary prompt may take, output included; a longer history is "
        "summarised in chunks (env CTXWARDEN_SUMMARIZER_CONTEXT_WINDOW; default 0: the "
        "summariser model's window from the model table)",
    )


def _compaction(serve: argparse.ArgumentParser) -> None:
    comp = serve.add_argument_group("compaction")
    comp.add_argument(
        "--compaction-plan-ttl",
        **from_env("CTXWARDEN_COMPACTION_PLAN_TTL", 600.0),
        help="seconds a PrepareCompaction plan stays committable "
        "(env CTXWARDEN_COMPACTION_PLAN_TTL; default %(default)s)",
    )
    comp.add_argument(
        "--file-read-tools",
        **from_env("CTXWARDEN_FILE_READ_TOOLS", "read"),
        help="comma-separated tool names that read a file (default %(default)s)",
    )
    comp.add_argument(
        "--file-write-tools",
        **from_env("CTXWARDEN_FILE_WRITE_TOOLS", "write"),
        help="comma-separated tool names that write a file (default %(default)s)",
    )
    comp.add_argument(
        "--file-edit-tools",
        **from_env("CTXWARDEN_FILE_EDIT_TOOLS", "edit"),
        help="comma-separated tool names that edit a file (default %(default)s)",
    )
    comp.add_argument(
        "--file-path-argument",
        **from_env("CTXWARDEN_FILE_PATH_ARGUMENT", "path"),
        help="tool-call argument holding the file path (default %(default)s)",
    )
    comp.add_argument(
        "--background-compactions",
        **from_env("CTXWARDEN_BACKGROUND_COMPACTIONS", -1),
        help="background compactions (policy.background_compaction_percent) running at "
        "once, server-wide; 0: none; more than 0 needs --summarizer (env "
        "CTXWARDEN_BACKGROUND_COMPACTIONS; default: 2 with a summariser, 0 without)",
    )
    comp.add_argument(
        "--background-retry-seconds",
        **from_env("CTXWARDEN_BACKGROUND_RETRY_SECONDS", 5.0),
        help="backoff after a failed background compaction, doubled per attempt "
        "(env CTXWARDEN_BACKGROUND_RETRY_SECONDS; default %(default)s)",
    )
    comp.add_argument(
        "--background-retry-max-seconds",
        **from_env("CTXWARDEN_BACKGROUND_RETRY_MAX_SECONDS", 300.0),
        help="longest backoff (env CTXWARDEN_BACKGROUND_RETRY_MAX_SECONDS; default %(default)s)",
    )
    comp.add_argument(
        "--background-max-attempts",
        **from_env("CTXWARDEN_BACKGROUND_MAX_ATTEMPTS", 5),
        help="attempts per background compaction before giving up until the session grows "
        "(env CTXWARDEN_BACKGROUND_MAX_ATTEMPTS; default %(default)s)",
    )


def _security(sec: argparse._ArgumentGroup) -> None:
    sec.add_argument(
        "--api-keys-file",
        **from_env("CTXWARDEN_API_KEYS_FILE", ""),
        help="lines of TENANT_ID:SHA256_HEX_OF_KEY ('#' comments); clients send "
        "'authorization: Bearer KEY' (env CTXWARDEN_API_KEYS_FILE)",
    )
    sec.add_argument(
        "--jwt-jwks-file",
        **from_env("CTXWARDEN_JWT_JWKS_FILE", ""),
        help="JWKS file with the keys that sign accepted JWTs (HS256, RS256, ES256) "
        "(env CTXWARDEN_JWT_JWKS_FILE)",
    )
    sec.add_argument("--jwt-issuer", **from_env("CTXWARDEN_JWT_ISSUER", ""), help="required iss")
    sec.add_argument(
        "--jwt-audience", **from_env("CTXWARDEN_JWT_AUDIENCE", ""), help="required aud"
    )
    sec.add_argument(
        "--jwt-tenant-claim",
        **from_env("CTXWARDEN_JWT_TENANT_CLAIM", "tenant"),
        help="claim holding the tenant ID (default %(default)s)",
    )
    sec.add_argument("--tls-cert", **from_env("CTXWARDEN_TLS_CERT", ""), help="server cert PEM")
    sec.add_argument("--tls-key", **from_env("CTXWARDEN_TLS_KEY", ""), help="server key PEM")
    sec.add_argument(
        "--tls-client-ca",
        **from_env("CTXWARDEN_TLS_CLIENT_CA", ""),
        help="CA bundle; when set, clients must present a certificate it signed (mTLS); "
        "without a bearer credential the certificate's common name is the tenant",
    )
    sec.add_argument("--no-reflection", action="store_true", help="turn off gRPC server reflection")
    sec.add_argument(
        "--insecure-allow-unauthenticated",
        action="store_true",
        help="DANGEROUS: allow listening on a non-loopback address without authentication",
    )


def _limits(sec: argparse._ArgumentGroup) -> None:
    sec.add_argument(
        "--rate-limit-rps",
        **from_env("CTXWARDEN_RATE_LIMIT_RPS", 0.0),
        help="requests per second per tenant, burst 2 s worth; 0 = unlimited "
        "(env CTXWARDEN_RATE_LIMIT_RPS)",
    )
    sec.add_argument(
        "--max-sessions-per-tenant",
        **from_env("CTXWARDEN_MAX_SESSIONS_PER_TENANT", 0),
        help="live sessions per tenant; 0 = unlimited (env CTXWARDEN_MAX_SESSIONS_PER_TENANT)",
    )
    sec.add_argument(
        "--max-stored-bytes-per-tenant",
        **from_env("CTXWARDEN_MAX_STORED_BYTES_PER_TENANT", 0),
        help="content bytes stored per tenant (live sessions); 0 = unlimited "
        "(env CTXWARDEN_MAX_STORED_BYTES_PER_TENANT)",
    )
    sec.add_argument(
        "--max-concurrent-streams",
        **from_env("CTXWARDEN_MAX_CONCURRENT_STREAMS", 100),
        help="concurrent calls per connection (env CTXWARDEN_MAX_CONCURRENT_STREAMS; "
        "default %(default)s)",
    )
    sec.add_argument(
        "--max-connections",
        **from_env("CTXWARDEN_MAX_CONNECTIONS", 1000),
        help="client connections at once; more are refused "
        "(env CTXWARDEN_MAX_CONNECTIONS; default %(default)s)",
    )
    sec.add_argument(
        "--max-concurrent-rpcs",
        **from_env("CTXWARDEN_MAX_CONCURRENT_RPCS", 1000),
        help="calls in progress server-wide; more get RESOURCE_EXHAUSTED "
        "(env CTXWARDEN_MAX_CONCURRENT_RPCS; default %(default)s)",
    )
    sec.add_argument(
        "--max-concurrent-reads",
        **from_env("CTXWARDEN_MAX_CONCURRENT_READS", 32),
        help="authenticated requests being received at once, server-wide; each holds "
        "at most 64 MiB (env CTXWARDEN_MAX_CONCURRENT_READS; default %(default)s)",
    )
    sec.add_argument(
        "--request-read-timeout",
        **from_env("CTXWARDEN_REQUEST_READ_TIMEOUT", 30.0),
        help="seconds a request message may take to arrive; slower ones are dropped "
        "with DEADLINE_EXCEEDED (env CTXWARDEN_REQUEST_READ_TIMEOUT; default %(default)s)",
    )


def _processes(sec: argparse._ArgumentGroup) -> None:
    """The listening socket and the processes that share it."""
    sec.add_argument(
        "--reuse-port",
        action="store_true",
        help="set SO_REUSEPORT so several servers share one port (default: refuse to "
        "start when the address is taken)",
    )
    sec.add_argument(
        "--workers",
        **from_env("CTXWARDEN_WORKERS", 1),
        help="server processes sharing the port (SO_REUSEPORT), each with its own event "
        "loop: about one per CPU core; MySQL/MariaDB and PostgreSQL only "
        "(env CTXWARDEN_WORKERS; default %(default)s)",
    )
    sec.add_argument(
        "--unix-socket-mode",
        **from_env("CTXWARDEN_UNIX_SOCKET_MODE", "0660"),
        help="octal file mode of a unix:PATH listening socket "
        "(env CTXWARDEN_UNIX_SOCKET_MODE; default %(default)s: owner and group)",
    )


def _observability(serve: argparse.ArgumentParser) -> None:
    obs = serve.add_argument_group("observability")
    obs.add_argument(
        "--log-format",
        choices=["json", "text"],
        **from_env("CTXWARDEN_LOG_FORMAT", "json"),
        help="json: one JSON object per line; text: readable lines "
        "(env CTXWARDEN_LOG_FORMAT; default %(default)s)",
    )
    obs.add_argument(
        "--metrics-listen",
        **from_env("CTXWARDEN_METRICS_LISTEN", ""),
        help="HOST:PORT for Prometheus metrics over HTTP (GET /metrics; port 0 picks a free "
        "port) (env CTXWARDEN_METRICS_LISTEN; default: off)",
    )
    obs.add_argument(
        "--console-listen",
        **from_env("CTXWARDEN_CONSOLE_LISTEN", ""),
        help="HOST:PORT for the read-only web console over HTTP (HTTPS with --tls-cert); same "
        "credentials and tenants as the API; port 0 picks a free port "
        "(env CTXWARDEN_CONSOLE_LISTEN; default: off)",
    )
    obs.add_argument(
        "--otel-endpoint",
        **from_env("OTEL_EXPORTER_OTLP_ENDPOINT", ""),
        help="OTLP endpoint for OpenTelemetry traces, e.g. http://localhost:4317; needs "
        "opentelemetry-sdk (env OTEL_EXPORTER_OTLP_ENDPOINT; default: off)",
    )
    obs.add_argument(
        "--max-read-staleness",
        **from_env("CTXWARDEN_MAX_READ_STALENESS", 0.0),
        help="seconds a replica may serve a hot session without checking that no other "
        "replica changed it; 0: every read checks (one primary-key read) "
        "(env CTXWARDEN_MAX_READ_STALENESS; default %(default)s)",
    )
    obs.add_argument(
        "--db-timeout",
        **from_env("CTXWARDEN_DB_TIMEOUT", 5.0),
        help="seconds any database call may take before the RPC fails with UNAVAILABLE "
        "(a hung database); 0: unbounded (env CTXWARDEN_DB_TIMEOUT; default %(default)s)",
    )
    obs.add_argument(
        "--db-connect-timeout",
        **from_env("CTXWARDEN_DB_CONNECT_TIMEOUT", 5.0),
        help="seconds to open a MySQL connection (env CTXWARDEN_DB_CONNECT_TIMEOUT; "
        "default %(default)s)",
    )
    obs.add_argument(
        "--db-pool-timeout",
        **from_env("CTXWARDEN_DB_POOL_TIMEOUT", 5.0),
        help="seconds a call waits for a free pooled connection before UNAVAILABLE "
        "(env CTXWARDEN_DB_POOL_TIMEOUT; default %(default)s)",
    )
    obs.add_argument(
        "--health-interval",
        **from_env("CTXWARDEN_HEALTH_INTERVAL", 2.0),
        help="seconds between database probes driving grpc.health.v1 "
        "(env CTXWARDEN_HEALTH_INTERVAL; default %(default)s)",
    )


def _files(serve: argparse.ArgumentParser) -> None:
    serve.add_argument(
        "--config",
        **from_env("CTXWARDEN_CONFIG", ""),
        help="TOML config file; flags beat environment variables, which beat the file "
        "(env CTXWARDEN_CONFIG)",
    )
    serve.add_argument(
        "--model-table",
        **from_env("CTXWARDEN_MODEL_TABLE", ""),
        help="TOML/JSON file overriding or extending the built-in model table "
        "(env CTXWARDEN_MODEL_TABLE)",
    )
    serve.add_argument(
        "--price-table",
        **from_env("CTXWARDEN_PRICE_TABLE", ""),
        help="JSON file of token prices per model and kind: GetUsage, the console and "
        "the metrics then show costs (env CTXWARDEN_PRICE_TABLE)",
    )
    serve.add_argument(
        "--hf-tokenizer-dir",
        action="append",
        default=[d for d in os.environ.get("CTXWARDEN_HF_TOKENIZER_DIRS", "").split(",") if d],
        help="directory under which clients may name hf: tokenizers in policy.tokenizer "
        "(repeatable; env CTXWARDEN_HF_TOKENIZER_DIRS, comma-separated)",
    )
