"""Layered compaction, first layer: clearing old tool results.

A clearing stubs every tool result up to a seq (``cleared_through``) except
the newest few, in one step, and only when that frees at least a configured
number of tokens. The boundary is recorded in a checkpoint, so the view of
a message depends only on the message and the checkpoint in effect: between
clearings the input only grows at the end (a provider's prompt cache is
invalidated once per clearing, not on every turn as with ``keep_tool_results``),
and a restored session shows the same bytes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ctxwarden.core.messages import Message, Role
from ctxwarden.core.session import EffectivePolicy
from ctxwarden.core.stepwise import EVERY, Steps, finish
from ctxwarden.core.tokens import CountingProfile, Tokenizer
from ctxwarden.core.view import Entry, ViewEntry, make_entry, make_stub


def is_cleared(message: Message, cleared_through: int) -> bool:
    """Whether the view shows ``message`` as a stub under a clearing through ``cleared_through``."""
    return (
        message.role is Role.TOOL_RESULT
        and not message.history_only
        and 0 < message.seq <= cleared_through
    )


def view_entry(
    message: Message,
    policy: EffectivePolicy,
    counter: Tokenizer | CountingProfile,
    cleared_through: int,
) -> ViewEntry:
    """The view entry of a stored message: a stub when cleared, else make_entry's."""
    if is_cleared(message, cleared_through):
        return make_stub(message, counter)
    return make_entry(message, policy, counter)


@dataclass(frozen=True, slots=True)
class Clearing:
    """A decided clearing: stub every tool result with seq <= ``through_seq``."""

    through_seq: int
    results: int
    """Tool results newly stubbed."""
    tokens_freed: int
    """Tokens the view loses (full entries minus their stubs)."""


def plan_clearing(
    entries: Sequence[Entry],
    *,
    cleared_through: int,
    keep: int,
    at_least: int,
    stub_tokens: Callable[[Message], int],
) -> Clearing | None:
    """Clear every tool result but the newest ``keep``, if that frees ``at_least`` tokens.

    ``entries`` are the kept active view entries in seq order, ``cleared_through``
    the boundary in effect, ``stub_tokens`` the token count of a message's stub.
    None when clearing is off (``at_least`` 0) or would free too little: a
    clearing changes earlier messages, so it must be worth a cache miss.
    """
    return finish(
        plan_clearing_steps(
            entries,
            cleared_through=cleared_through,
            keep=keep,
            at_least=at_least,
            stub_tokens=stub_tokens,
        )
    )


def plan_clearing_steps(
    entries: Sequence[Entry],
    *,
    cleared_through: int,
    keep: int,
    at_least: int,
    stub_tokens: Callable[[Message], int],
) -> Steps[Clearing | None]:
    """``plan_clearing`` in steps (core.stepwise): every tool result of a long
    session may be stubbed (each stub counted)."""
    if at_least <= 0:
        return None
    results = [
        e for e in entries if e.original.role is Role.TOOL_RESULT and not e.original.history_only
    ]
    if len(results) <= keep:
        return None
    eligible = results[: len(results) - keep]
    fresh = [e for e in eligible if not is_cleared(e.original, cleared_through)]
    if not fresh:
        return None
    freed = 0
    for i, e in enumerate(fresh):
        freed += e.token_count - stub_tokens(e.original)
        if i % EVERY == EVERY - 1:
            yield
    if freed < at_least:
        return None
    return Clearing(eligible[-1].original.seq, len(fresh), freed)
