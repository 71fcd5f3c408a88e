"""Reads of a hot session's history that a compaction step makes, in time of
its chunk rather than of the whole history.

A chunked compaction of a 100,000-message history takes a hundred steps or
more, and each one checks that its plan is still current and reads its chunk.
Walking all the history for that on every step makes the compaction quadratic
(seconds per step). The session's entries are in seq order and only grow in
place (every other change, a rollback or a checkpoint, replaces the list; see
SessionContext), so a chunk is found by bisection and the fingerprint of the
history up to a seq, once computed for a list, stays valid for that list.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from weakref import WeakKeyDictionary

from ctxwarden.core.compaction.planner import covered_digest
from ctxwarden.core.context import SessionContext
from ctxwarden.core.messages import Message
from ctxwarden.core.view import Entry


@dataclass(frozen=True, slots=True)
class _Digest:
    entries: list[Entry]
    """The list it was computed on (compared by identity)."""
    covered: int
    """How many of its entries (a prefix) have seq <= at_seq."""
    at_seq: int
    digest: str


_digests: WeakKeyDictionary[SessionContext, _Digest] = WeakKeyDictionary()


def _seq(entry: Entry) -> int:
    return entry.message.seq


def covered_digest_of(ctx: SessionContext, at_seq: int) -> str:
    """``covered_digest(ctx.active_messages, at_seq)``, walking the history only
    when the entries changed other than by appends since the last call."""
    entries = ctx.entries
    assert isinstance(entries, list)
    known = _digests.get(ctx)
    if (
        known is not None
        and known.entries is entries
        and known.at_seq == at_seq
        and (len(entries) == known.covered or _seq(entries[known.covered]) > at_seq)
    ):
        return known.digest
    covered = bisect.bisect_right(entries, at_seq, key=_seq)
    digest = covered_digest([e.original for e in entries[:covered]], at_seq)
    _digests[ctx] = _Digest(entries, covered, at_seq, digest)
    return digest


def messages_between(ctx: SessionContext, lo: int, hi: int) -> tuple[Message, ...]:
    """The kept active messages with lo <= seq < hi, as stored."""
    entries = ctx.entries
    start = bisect.bisect_left(entries, lo, key=_seq)
    end = bisect.bisect_left(entries, hi, lo=start, key=_seq)
    return tuple(e.original for e in entries[start:end])
