"""Where to cut: the first message kept verbatim.

Walk back from the newest message adding stored token counts until
``keep_recent_tokens`` is reached, then cut at the nearest valid cut point
at or after that message. Valid cut points are user and assistant messages,
never a tool result or a history-only message, so a call and its result
always stay together. This
matches pi-mono's ``findCutPoint`` for the same transcript and budget, with
two deliberate differences: a pending tool call (no result yet) and
everything after it is always kept, and when the budget runs out inside the
trailing tool results we cut at the assistant message that made the calls
(pi keeps everything then, so a large tool output blocks compaction).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ctxwarden.core.messages import Message, Role


@dataclass(frozen=True, slots=True)
class CutPoint:
    first_kept_index: int
    """Index of the first message kept verbatim (0: nothing to summarise)."""
    turn_start_index: int
    """Index of the user message starting the split turn, or -1."""
    split_turn: bool
    """The cut fell on an assistant message in the middle of a turn."""


def _pending_call_index(messages: Sequence[Message]) -> int | None:
    """Index of the last assistant message if some of its calls have no result yet."""
    for i in range(len(messages) - 1, -1, -1):
        m = messages[i]
        if m.role is Role.TOOL_RESULT or m.failed or m.history_only:
            continue  # failed and history-only messages are not in the view
        if m.role is not Role.ASSISTANT or not m.tool_calls:
            return None
        answered = {
            r.tool_call_id
            for r in messages[i + 1 :]
            if r.role is Role.TOOL_RESULT and not r.history_only
        }
        pending = any(c.tool_call_id not in answered for c in m.tool_calls)
        return i if pending else None
    return None


def _turn_start(messages: Sequence[Message], index: int) -> int:
    for i in range(index, -1, -1):
        if messages[i].role is Role.USER and not messages[i].history_only:
            return i
    return -1


def is_cut_point(message: Message) -> bool:
    """User and assistant messages the model sees; never a tool result, never a
    history-only message (one may sit between a tool call and its result)."""
    return message.role is not Role.TOOL_RESULT and not message.history_only


def find_cut_point(messages: Sequence[Message], keep_recent_tokens: int) -> CutPoint:
    cut_points = [i for i, m in enumerate(messages) if is_cut_point(m)]
    if not cut_points:
        return CutPoint(0, -1, False)
    cut = cut_points[0]
    accumulated = 0
    for i in range(len(messages) - 1, -1, -1):
        accumulated += messages[i].token_count
        if accumulated >= keep_recent_tokens:
            after = [c for c in cut_points if c >= i]
            # If the budget ran out inside the trailing tool results, pi-mono
            # keeps everything (and so can never compact); we cut at the
            # assistant message that made those calls instead.
            cut = after[0] if after else max(c for c in cut_points if c < i)
            break
    pending = _pending_call_index(messages)
    if pending is not None and cut > pending:
        cut = pending
    return cut_at(messages, cut)


def cut_at(messages: Sequence[Message], index: int) -> CutPoint:
    """The cut keeping ``messages[index]`` onwards (a cut point): what
    find_cut_point returns when it chooses that message."""
    if messages[index].role is Role.USER:
        return CutPoint(index, -1, False)
    start = _turn_start(messages, index)
    return CutPoint(index, start, start != -1)
