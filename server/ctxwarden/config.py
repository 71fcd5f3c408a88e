"""Server settings: defaults, environment variables and command-line flags."""

from __future__ import annotations

from dataclasses import dataclass, field

from ctxwarden.core.compaction.types import FileToolNames
from ctxwarden.store.urls import DEFAULT_DATABASE_URL

DEFAULT_LISTEN = "127.0.0.1:50051"


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
