"""Session settings and their defaults."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from ctxwarden.core.anchor_report import LossReport
from ctxwarden.core.memory import EMPTY_BLOCK, MemoryBlock, MemoryWrite
from ctxwarden.core.messages import Usage
from ctxwarden.core.models import lookup_model
from ctxwarden.core.usage_ledger import EMPTY_LEDGER, UsageLedger

DEFAULT_RESERVE_TOKENS = 16384
DEFAULT_KEEP_RECENT_TOKENS = 20000
DEFAULT_TOOL_OUTPUT_MAX_BYTES = 51200
DEFAULT_TOOL_OUTPUT_MAX_LINES = 2000
DEFAULT_CLEAR_TOOL_RESULTS_KEEP = 3
CLEARING_SUMMARIZER = "tool-result-clearing"
"""The ``summarizer`` of a checkpoint that only cleared tool results."""


@dataclass(frozen=True, slots=True)
class ToolDefinition:
    name: str
    description: str = ""
    parameters_json: str = ""


_SHARED_TOOLS: dict[tuple[ToolDefinition, ...], tuple[ToolDefinition, ...]] = {}
_SHARED_TOOLS_MAX = 1024
"""Distinct tool sets remembered; past this the table starts over."""


def shared_tools(tools: tuple[ToolDefinition, ...]) -> tuple[ToolDefinition, ...]:
    """An equal tuple of tools already in use, else ``tools``: the hot sessions
    of one agent hold one copy of its tool definitions."""
    found = _SHARED_TOOLS.get(tools)
    if found is not None:
        return found
    if len(_SHARED_TOOLS) >= _SHARED_TOOLS_MAX:
        _SHARED_TOOLS.clear()
    _SHARED_TOOLS[tools] = tools
    return tools


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
    clear_tool_results_at_least: int = 0
    clear_tool_results_keep: int = 0
    background_compaction_percent: int = 0
    cache_lifetime_seconds: int = 0
    """0: background compaction starts at once; N: it waits for an idle gap of
    N seconds, the provider's cache lifetime (core.background)."""
    memory_max_tokens: int = 0
    """0: no memory block; N: a block of at most N tokens (core.memory)."""
    memory_write: int = 0
    """A MemoryWrite value; 0 means OFF."""
    preserve_lost_anchors: int = 0
    """Anchor categories (core.anchors) a compaction puts back into the pinned
    state when the summary lost them: bit ``1 << category``; 0: none."""
    preserve_lost_anchors_max_tokens: int = 0
    """Their budget; 0 means DEFAULT_PRESERVE_TOKENS (core.anchor_report)."""

    @property
    def memory_write_mode(self) -> MemoryWrite:
        return MemoryWrite(self.memory_write) if self.memory_write else MemoryWrite.OFF


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
    clear_tool_results_at_least: int = 0
    """0: no layered clearing; N: clear old tool results first if that frees >= N tokens."""
    clear_tool_results_keep: int = DEFAULT_CLEAR_TOOL_RESULTS_KEEP
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
        clear_tool_results_at_least=policy.clear_tool_results_at_least,
        clear_tool_results_keep=policy.clear_tool_results_keep or DEFAULT_CLEAR_TOOL_RESULTS_KEEP,
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
    parent_session_id: str = ""
    """A fork's parent (internal key; "" for a session that is no fork)."""
    parent_seq: int = 0
    """The last seq a fork inherits from its parent."""
    fork_seq: int = 0
    """The seq a fork was made at (it sees its parent as it was just before)."""
    archive_time_us: int = 0
    """When ArchiveSession archived it (0: not archived): read-only until unarchived."""
    memory: MemoryBlock = EMPTY_BLOCK
    """The frozen memory block (core.memory): selected at creation, compaction or
    an explicit refresh, stored with the session row."""
    usage: UsageLedger = EMPTY_LEDGER
    """What providers reported for this session (core.usage_ledger): moved on by
    the appends and compactions that bring usage, never by a rollback."""

    @property
    def etag(self) -> str:
        return f'"{self.revision}"'

    @property
    def deleted(self) -> bool:
        return self.delete_time_us != 0

    @property
    def archived(self) -> bool:
        return self.archive_time_us != 0


def born(session: Session, session_id: str, last_seq: int, now_us: int, **changes: Any) -> Session:
    """``session`` as the first incarnation of a new, live session ``session_id``
    (CreateSession, ForkSession): revision and version 1, no failures, created
    now, never deleted; ``changes`` set the rest."""
    return replace(
        session,
        session_id=session_id,
        last_seq=last_seq,
        revision=1,
        version=1,
        consecutive_failures=0,
        create_time_us=now_us,
        update_time_us=now_us,
        delete_time_us=0,
        **changes,
    )


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
    tool_results_cleared_through: int = 0
    """Tool results with a seq up to this one are stubs in the model input."""
    tool_results_cleared: int = 0
    tool_result_tokens_cleared: int = 0

    @property
    def clearing_only(self) -> bool:
        """Only cleared tool results: summary and cut are the previous checkpoint's."""
        return self.summarizer == CLEARING_SUMMARIZER

    proposed_memory_ids: tuple[str, ...] = ()
    """Memories stored from this compaction's durable facts (policy.memory_write)."""
    memory_tokens: int = 0
    """Tokens of the memory block selected at this compaction."""
    preserved_anchors: str = ""
    """Lost anchors put back by the policy's preserve_lost_anchors (one line each),
    shown in the pinned state; computed once, at the compaction."""
    loss_report: LossReport | None = None
    """What the compacted span held and where it survives (core.anchor_report);
    None for checkpoints made before loss reports."""
    summarizer_usage: Usage | None = None
    """What the server's summariser calls of this compaction reported, summed."""

    @property
    def carried_summary(self) -> str:
        """The text a later compaction updates: the summary and any turn prefix."""
        if not self.turn_prefix_summary:
            return self.summary
        return f"{self.summary}\n\n---\n\nTurn context (split turn):\n\n{self.turn_prefix_summary}"
