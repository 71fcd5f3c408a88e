"""What a model input is made of: its token breakdown and the helpers that
count and fingerprint its fixed parts (system prompt, tools, summary)."""

from __future__ import annotations

import enum
import hashlib
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from ctxwarden.core.cache_prefix import CachePrefix
from ctxwarden.core.calibration import Calibration
from ctxwarden.core.messages import Message
from ctxwarden.core.models import lookup_model
from ctxwarden.core.rendered import Rendered
from ctxwarden.core.session import Session, ToolDefinition
from ctxwarden.core.tokens import CountingProfile, Tokenizer
from ctxwarden.core.view import Notice


class TokenCountMethod(enum.IntEnum):
    """How a token total was obtained."""

    EXACT = 1
    """Counted with the model's real tokenizer."""
    ANCHORED = 2
    """The provider's last reported usage plus an estimate of what came after."""
    ESTIMATED = 3
    """A (calibrated) estimate."""


@dataclass(frozen=True, slots=True)
class TokenBreakdown:
    system_tokens: int
    tools_tokens: int
    summary_tokens: int
    message_tokens: int
    total_tokens: int
    context_window: int
    compaction_threshold: int
    estimated: bool
    anchored_total_tokens: int = 0
    estimate_error_ratio: float = 1.0
    method: TokenCountMethod = TokenCountMethod.ESTIMATED
    memory_tokens: int = 0
    """The memory block message (core.memory); counted in total_tokens."""


@dataclass(frozen=True, slots=True)
class ModelInputView:
    session: Session
    messages: tuple[Message, ...]
    notices: tuple[Notice, ...]
    tokens: TokenBreakdown
    compaction_recommended: bool
    first_kept_seq: int
    last_seq: int
    compaction_id: str
    prefix_hash: str
    summary: str
    live: bool = field(default=False, compare=False)
    """The hot session's current input (False: a one-off, such as a replay); the
    api layer keeps encodings of live inputs only."""
    stable_messages: int = 0
    """Leading messages that later inputs start with, until history is rewritten."""
    summary_messages: int = 0
    """Leading messages the program adds before the kept ones: the memory block
    and the summary of compacted history (0, 1 or 2)."""
    digests: Sequence[int] = field(default=(), compare=False)
    """digests[i] fingerprints the first i messages after those (the api
    layer turns them into resume tokens); empty: the input cannot be resumed."""
    rendered: Rendered | None = field(default=None, compare=False)
    """The input in a provider's wire schema (when a format was asked for)."""
    cache: CachePrefix | None = field(default=None, compare=False)
    """What it shares with the previous input (core.cache_prefix), when asked for."""

    @property
    def rendered_json(self) -> str:
        return "" if self.rendered is None else self.rendered.json


def tools_text(tools: Iterable[ToolDefinition]) -> str:
    """The text of tool definitions a tokenizer is charged for."""
    return "".join(t.name + t.description + t.parameters_json for t in tools)


def counting_profile(model: str, tokenizer: Tokenizer) -> CountingProfile:
    """How a model's messages are counted: its tokenizer, framing and image rule."""
    info = lookup_model(model)
    return CountingProfile(tokenizer, info.framing_tokens, info.reply_tokens, info.image_rule)


def prefix_hash(session: Session, summary: str) -> str:
    """Hash of the stable prompt prefix (system prompt, tools, memory block, summary)."""
    parts = {
        "system": session.system_prompt,
        "tools": [[t.name, t.description, t.parameters_json] for t in session.tools],
        "summary": summary,
    }
    if session.memory:  # only then, so sessions without memory hash as before
        parts["memory"] = session.memory.text
    payload = json.dumps(
        parts,
        sort_keys=True,
        ensure_ascii=False,
        separators=(",", ":"),
    )
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()


def token_breakdown(
    system_tokens: int,
    tools_tokens: int,
    summary_tokens: int,
    message_tokens: int,
    *,
    anchored: int,
    calibration: Calibration,
    exact: bool,
    context_window: int,
    threshold: int,
    memory_tokens: int = 0,
) -> TokenBreakdown:
    """The parts' counts and the best total: anchored on reported usage when that
    is larger than the calibrated estimate, exact when the tokenizer is exact and
    nothing was calibrated, else the estimate."""
    counted = system_tokens + tools_tokens + memory_tokens + summary_tokens + message_tokens
    estimate = calibration.apply(counted)
    if anchored > estimate:
        total, method = anchored, TokenCountMethod.ANCHORED
    elif exact and calibration.samples == 0:
        total, method = counted, TokenCountMethod.EXACT
    else:
        total, method = estimate, TokenCountMethod.ESTIMATED
    return TokenBreakdown(
        system_tokens=system_tokens,
        tools_tokens=tools_tokens,
        summary_tokens=summary_tokens,
        message_tokens=message_tokens,
        total_tokens=total,
        context_window=context_window,
        compaction_threshold=threshold,
        estimated=not exact,
        anchored_total_tokens=anchored,
        estimate_error_ratio=calibration.ratio,
        method=method,
        memory_tokens=memory_tokens,
    )
