"""Session settings and their defaults."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ctxwarden.core.models import lookup_model

DEFAULT_RESERVE_TOKENS = 16384
DEFAULT_KEEP_RECENT_TOKENS = 20000
DEFAULT_TOOL_OUTPUT_MAX_BYTES = 51200
DEFAULT_TOOL_OUTPUT_MAX_LINES = 2000


@dataclass(frozen=True, slots=True)
class ToolDefinition:
    name: str
    description: str = ""
    parameters_json: str = ""


@dataclass(frozen=True, slots=True)
class ContextPolicy:
    """As the client set it: 0 or empty means "use the default"."""

    context_window: int = 0
    reserve_tokens: int = 0
    keep_recent_tokens: int = 0
    tool_output_max_bytes: int = 0
    tool_output_max_lines: int = 0
    tokenizer: str = ""
    keep_tool_results: int = 0
    background_compaction_percent: int = 0


@dataclass(frozen=True, slots=True)
class EffectivePolicy:
    """A policy with every default filled in for a given model."""

    context_window: int
    reserve_tokens: int
    keep_recent_tokens: int
    tool_output_max_bytes: int
    tool_output_max_lines: int
    tokenizer: str
    keep_tool_results: int = 0
    """0: every tool result in full; N: only the newest N, older ones stubbed."""
    background_compaction_percent: int = 0
    """0: off; N: compact in the background past N% of the compaction threshold."""


def effective_policy(policy: ContextPolicy, model: str) -> EffectivePolicy:
    info = lookup_model(model)
    return EffectivePolicy(
        context_window=policy.context_window or info.context_window,
        reserve_tokens=policy.reserve_tokens or DEFAULT_RESERVE_TOKENS,
        keep_recent_tokens=policy.keep_recent_tokens or DEFAULT_KEEP_RECENT_TOKENS,
        tool_output_max_bytes=policy.tool_output_max_bytes or DEFAULT_TOOL_OUTPUT_MAX_BYTES,
        tool_output_max_lines=policy.tool_output_max_lines or DEFAULT_TOOL_OUTPUT_MAX_LINES,
        tokenizer=policy.tokenizer or info.tokenizer,
        keep_tool_results=policy.keep_tool_results,
        background_compaction_percent=policy.background_compaction_percent,
    )


@dataclass(frozen=True, slots=True)
class Session:
    session_id: str
    user_id: str = ""
    project_id: str = ""
    title: str = ""
    system_prompt: str = ""
    tools: tuple[ToolDefinition, ...] = ()
    model: str = ""
    policy: ContextPolicy = field(default_factory=ContextPolicy)
    pinned_state: str = ""
    labels: Mapping[str, str] = field(default_factory=dict)
    last_seq: int = 0
    context_tokens: int = 0
    revision: int = 1
    consecutive_failures: int = 0
    create_time_us: int = 0
    update_time_us: int = 0
    delete_time_us: int = 0
    estimate_ratio: float = 1.0
    """Smoothed reported/estimated token ratio (see core.calibration)."""
    estimate_samples: int = 0
    version: int = 0
    """Advanced by every change of the session (appends too); the store
    compares-and-sets it, so a replica never writes or serves a stale copy."""
    state: Mapping[str, Any] = field(default_factory=dict)
    """The session's JSON object state (see core.state)."""

    @property
    def etag(self) -> str:
        return f'"{self.revision}"'

    @property
    def deleted(self) -> bool:
        return self.delete_time_us != 0


class CompactionTrigger(enum.IntEnum):
    """What started a compaction (stored as these integers)."""

    MANUAL = 1
    """An explicit Compact or CommitCompaction call."""
    THRESHOLD = 2
    """BuildModelInput with auto_compact crossed the threshold."""
    OVERFLOW = 3
    """The provider rejected the input as too long."""
    BACKGROUND = 4
    """The context crossed the policy's soft threshold (a background compaction)."""


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """A compaction checkpoint: how the effective context was shortened."""

    compaction_id: str
    session_id: str
    summary: str
    first_kept_seq: int
    tokens_before: int
    create_time_us: int
    turn_prefix_summary: str = ""
    tokens_after: int = 0
    split_turn: bool = False
    read_files: tuple[str, ...] = ()
    modified_files: tuple[str, ...] = ()
    summarizer: str = ""
    trigger: CompactionTrigger = CompactionTrigger.MANUAL
    at_seq: int = 0
    superseded: bool = False

    @property
    def carried_summary(self) -> str:
        """The text a later compaction updates: the summary and any turn prefix."""
        if not self.turn_prefix_summary:
            return self.summary
        return f"{self.summary}\n\n---\n\nTurn context (split turn):\n\n{self.turn_prefix_summary}"
