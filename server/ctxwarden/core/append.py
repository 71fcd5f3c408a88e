"""What planning an append produces, and the tool-call bookkeeping that tool
results are checked against."""

from __future__ import annotations

from dataclasses import dataclass, field

from ctxwarden.core.calibration import Calibration
from ctxwarden.core.errors import FailedPrecondition
from ctxwarden.core.messages import Message
from ctxwarden.core.reasons import ErrorReason
from ctxwarden.core.session import Session


@dataclass(frozen=True, slots=True)
class AppendPlan:
    """Result of planning an append: stored duplicates and new messages."""

    messages: tuple[Message, ...]
    """Every requested message, in request order, as it is (or will be) stored."""
    new: tuple[Message, ...]
    """Only the messages to insert."""
    last_seq: int
    context_tokens: int
    session: Session
    """The session as the append leaves it (next version, last_seq, tokens,
    failures, calibration): what the store writes and the context installs."""
    calibration: Calibration = field(default_factory=Calibration)


@dataclass(slots=True)
class CallState:
    """An active tool call: the seq of its assistant message, and whether it has a result."""

    seq: int
    answered: bool


def answer_call(calls: dict[str, CallState], tool_call_id: str, i: int) -> None:
    """Mark the call a tool result (``messages[i]``) answers; it must be open."""
    call = calls.get(tool_call_id)
    if call is None:
        raise FailedPrecondition(
            f"messages[{i}].tool_call_id {tool_call_id!r} matches no "
            "active tool call in this session; append the assistant message "
            "with that call first",
            reason=ErrorReason.UNKNOWN_TOOL_CALL,
            field=f"messages[{i}].tool_call_id",
        )
    if call.answered:
        raise FailedPrecondition(
            f"messages[{i}]: tool call {tool_call_id!r} already has a result",
            reason=ErrorReason.TOOL_CALL_ALREADY_ANSWERED,
            field=f"messages[{i}].tool_call_id",
        )
    call.answered = True
