"""Server settings: defaults, environment variables and command-line flags."""

from __future__ import annotations

from dataclasses import dataclass, field

from ctxwarden.core.compaction.types import FileToolNames
from ctxwarden.core.retention import RetentionRules

DEFAULT_LISTEN = "127.0.0.1:50051"
DEFAULT_DATABASE_URL = "sqlite:///./ctxwarden.db"
"""An embedded SQLite file in the working directory."""


@dataclass(frozen=True, slots=True)
class Limits:
    max_message_bytes: int = 8 * 1024 * 1024
    max_messages_per_request: int = 1000
    max_request_bytes: int = 64 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class Settings:
    listen: str = DEFAULT_LISTEN
    database_url: str = DEFAULT_DATABASE_URL
    max_hot_sessions: int = 1000
    max_retries: int = 3
    db_pool_size: int = 10
    max_read_staleness_seconds: float = 0.0
    """How long a replica may serve a hot session it last verified against the
    database without checking again (0: every read checks)."""
    db_timeout_seconds: float = 5.0
    """Bound on any database call (a hung database is UNAVAILABLE after this); 0: none."""
    db_connect_timeout_seconds: float = 5.0
    db_pool_timeout_seconds: float = 5.0
    """Wait for a free pooled connection before UNAVAILABLE."""
    encoding_cache_mb: int = 32
    """Budget for cached message encodings (BuildModelInput); 0: no cache."""
    append_writers: int | None = None
    """Group-commit connections for appends; None: per backend; 0: off."""
    shutdown_grace_seconds: float = 10.0
    limits: Limits = Limits()
    log_level: str = "INFO"
    plan_ttl_seconds: float = 600.0
    file_tools: FileToolNames = field(default_factory=FileToolNames)
    summarizer_kind: str = ""
    summarizer_base_url: str = ""
    summarizer_model: str = ""
    summarizer_api_key_env: str = ""
    summarizer_timeout: float = 60.0
    summarizer_max_output_tokens: int = 16384
    summarizer_context_window: int = 0
    """Tokens a summary prompt may take (0: the summariser model's window from the model table)."""
    background_compactions: int = 2
    """Background compactions running at once, server-wide (0: none)."""
    background_retry_seconds: float = 5.0
    """Backoff after a failed background compaction, doubled per attempt."""
    background_retry_max_seconds: float = 300.0
    background_max_attempts: int = 5
    # observability
    log_format: str = "json"
    metrics_listen: str = ""
    console_listen: str = ""
    """HOST:PORT of the read-only web console ("": off)."""
    otel_endpoint: str = ""
    health_interval_seconds: float = 2.0
    max_sessions_per_tenant: int = 0
    """0: unlimited."""
    max_stored_bytes_per_tenant: int = 0
    """0: unlimited."""
    api_keys_file: str = ""
    jwt_jwks_file: str = ""
    jwt_issuer: str = ""
    jwt_audience: str = ""
    jwt_tenant_claim: str = "tenant"
    tls_cert: str = ""
    tls_key: str = ""
    tls_client_ca: str = ""
    reflection: bool = True
    insecure_allow_unauthenticated: bool = False
    rate_limit_rps: float = 0.0
    """Requests per second per tenant (burst: 2 s worth); 0: unlimited."""
    max_concurrent_streams: int = 100
    """Concurrent calls per connection."""
    max_connections: int = 1000
    """Client connections at once; more are refused."""
    max_concurrent_rpcs: int = 1000
    """Calls in progress server-wide; more are refused with RESOURCE_EXHAUSTED."""
    max_concurrent_reads: int = 32
    """ContextService requests being received at once, server-wide."""
    request_read_timeout: float = 30.0
    """Seconds a request message may take to arrive; slower ones are dropped."""
    reuse_port: bool = False
    """SO_REUSEPORT: let several servers share the port (off: refuse a taken address)."""
    unix_socket_mode: int = 0o660
    """File mode of a ``unix:`` listening socket."""
    hf_tokenizer_dirs: tuple[str, ...] = ()
    """Directories clients may name hf: tokenizers in (policy.tokenizer)."""
    model_table_file: str = ""
    price_table_file: str = ""
    """JSON price table (core.prices) that prices the usage ledger ("": no costs)."""
    retention: RetentionRules = field(default_factory=RetentionRules)
    """Per-tenant and server-wide retention rules (core.retention)."""
    purge_interval_seconds: float = 0.0
    """Seconds between the server's runs of the retention rules; 0: never."""
    idle_evict_seconds: float = 0.0
    """Evict a hot session nobody touched for this long; 0: only LRU pressure."""
