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
