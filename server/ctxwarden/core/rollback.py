"""Which messages a rollback removes from the effective history."""

from __future__ import annotations

from collections.abc import Sequence

from ctxwarden.core.messages import Message, Role


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


def last_failure_message(active: Sequence[Message], seqs: Sequence[int]) -> str:
    """The error message of the newest failed message among ``seqs``."""
    wanted = set(seqs)
    for m in reversed(active):
        if m.seq in wanted and m.failed and m.error_message:
            return m.error_message
    return ""
