"""What the use cases return, and the idempotency key they take."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ctxwarden.core.messages import Message
from ctxwarden.core.recovery import RecoveryAction


@dataclass(frozen=True, slots=True)
class AppendResult:
    messages: tuple[Message, ...]
    last_seq: int
    context_tokens: int


@dataclass(frozen=True, slots=True)
class RollbackResult:
    rolled_back_seqs: tuple[int, ...]
    action: RecoveryAction
    retry_after_seconds: float
    reason: str


@dataclass(frozen=True, slots=True)
class TokenCount:
    total: int
    per_message: list[int]
    tokenizer: str
    exact: bool
    """An exact tokenizer and a known model (else an estimate)."""
    tools: int
    text: int


@dataclass(frozen=True, slots=True)
class ToolOutputRange:
    content: str
    total_bytes: int
    total_lines: int
    next_offset: int
    """Where the next range starts (0: this one reached the end)."""


@dataclass(frozen=True, slots=True)
class IdempotencyKey:
    """AIP-155 request_id plus a hash of the request, to detect reuse."""

    request_id: str
    request_hash: str


def rollback_outcome(r: RollbackResult) -> dict[str, Any]:
    return {
        "seqs": list(r.rolled_back_seqs),
        "action": int(r.action),
        "retry_after": r.retry_after_seconds,
        "reason": r.reason,
    }


def rollback_from_outcome(o: dict[str, Any]) -> RollbackResult:
    return RollbackResult(
        tuple(int(s) for s in o["seqs"]),
        RecoveryAction(int(o["action"])),
        float(o["retry_after"]),
        str(o["reason"]),
    )
