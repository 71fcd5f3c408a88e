"""Which messages a rollback removes from the effective history."""

from __future__ import annotations

from collections.abc import Sequence

from ctxwarden.core.errors import InvalidArgument
from ctxwarden.core.messages import Message, Role
from ctxwarden.core.reasons import ErrorReason


def trailing_failed_turn(active: Sequence[Message]) -> list[int]:
    """Seqs of the trailing run of failed assistant messages and their tool results.

    The trailing window is the run of failed assistant messages and tool
    results at the end of the history; within it, failed messages and the
    results of their calls are rolled back, results of successful calls stay.
    """
    failed_calls: set[str] = set()
    # Tool results come after their call, so collect calls of failed messages
    # in the trailing window first.
    window_start = len(active)
    for i in range(len(active) - 1, -1, -1):
        m = active[i]
        if m.failed or m.role is Role.TOOL_RESULT or m.history_only:
            window_start = i
            continue
        break
    for m in active[window_start:]:
        if m.failed:
            failed_calls.update(c.tool_call_id for c in m.tool_calls)
    # Results that answer a successful call stay: they pair with that call.
    return [
        m.seq
        for m in active[window_start:]
        if not m.history_only
        and (m.failed or (m.role is Role.TOOL_RESULT and m.tool_call_id in failed_calls))
    ]


def rewind_to(active: Sequence[Message], to_seq: int) -> list[int]:
    """Seqs of every active message after ``to_seq``."""
    return [m.seq for m in active if m.seq > to_seq]


def rolled_back(active: Sequence[Message], last_seq: int, to_seq: int | None) -> list[int]:
    """Seqs a RollbackTurn removes: the trailing failed turn (``to_seq`` None),
    else everything after ``to_seq``; INVALID_SEQ past the session's ``last_seq``."""
    if to_seq is None:
        return trailing_failed_turn(active)
    if to_seq < 0:
        raise InvalidArgument("to_seq must be >= 0", reason=ErrorReason.INVALID_SEQ, field="to_seq")
    if to_seq > last_seq:
        raise InvalidArgument(
            f"to_seq {to_seq} is beyond the session's last_seq {last_seq}",
            reason=ErrorReason.INVALID_SEQ,
            field="to_seq",
        )
    return rewind_to(active, to_seq)


def last_failure_message(active: Sequence[Message], seqs: Sequence[int]) -> str:
    """The error message of the newest failed message among ``seqs``."""
    wanted = set(seqs)
    for m in reversed(active):
        if m.seq in wanted and m.failed and m.error_message:
            return m.error_message
    return ""
