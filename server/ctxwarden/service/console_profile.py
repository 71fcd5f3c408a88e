"""The token profile behind the console's chart, kept per session and grown with it.

The first look at a session reads its whole history once (one aggregate query); after
that a change reads only the seqs from the last bucket seen on: an agent that appends
costs the chart a short range read, not a scan of 100,000 rows. The buckets widen
(and the history is read again) when the session outgrows them; a rollback that reaches
further back than the last bucket shows after ``rescan_seconds`` at the latest.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field

from ctxwarden.core.session import Session
from ctxwarden.service.runtime import SessionRuntime
from ctxwarden.store.console_reads import ConsoleReads, TokenProfile


@dataclass(slots=True)
class _Entry:
    version: int
    last_seq: int
    width: int
    tokens: dict[int, int]
    rolled: dict[int, int]
    scanned_at: float
    prefix: dict[int, int] = field(default_factory=dict)
    """Active tokens up to a checkpoint's at_seq, by at_seq."""


class TokenProfiles:
    def __init__(
        self,
        runtime: SessionRuntime,
        reads: ConsoleReads,
        *,
        capacity: int = 64,
        rescan_seconds: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.runtime = runtime
        self.reads = reads
        self.capacity = capacity
        self.rescan_seconds = rescan_seconds
        self.clock = clock
        self._entries: OrderedDict[tuple[str, int], _Entry] = OrderedDict()

    async def profile(self, session: Session, points: int, tool_cap: int) -> TokenProfile:
        sid, last = session.session_id, session.last_seq
        key = (sid, tool_cap)
        entry = self._entries.get(key)
        now = self.clock()
        width = max(1, -(-last // max(1, points)))
        stale = entry is not None and (
            entry.version != session.version and now - entry.scanned_at > self.rescan_seconds
        )
        if entry is None or stale or last < entry.last_seq or -(-last // entry.width) > 2 * points:
            tokens, rolled = await self.runtime.db(
                lambda: self.reads.bucket_sums(sid, width=width, after_seq=0, tool_cap=tool_cap)
            )
            entry = _Entry(session.version, last, width, tokens, rolled, now)
        elif entry.version != session.version:
            first = (entry.last_seq - 1) // entry.width if entry.last_seq else 0
            w = entry.width
            tokens, rolled = await self.runtime.db(
                lambda: self.reads.bucket_sums(sid, width=w, after_seq=first * w, tool_cap=tool_cap)
            )
            for table, fresh in ((entry.tokens, tokens), (entry.rolled, rolled)):
                for b in [b for b in table if b >= first]:
                    del table[b]
                table.update(fresh)
            entry.prefix = {s: n for s, n in entry.prefix.items() if s <= first * w}
            entry.version, entry.last_seq = session.version, last
        self._entries[key] = entry
        self._entries.move_to_end(key)
        while len(self._entries) > self.capacity:
            self._entries.popitem(last=False)
        marks = await self.runtime.db(lambda: self.reads.checkpoint_marks(sid))
        for mark in marks:
            if mark.at_seq not in entry.prefix:
                entry.prefix[mark.at_seq] = await self._prefix(sid, entry, mark.at_seq, tool_cap)
        return TokenProfile(
            last, entry.width, dict(entry.tokens), dict(entry.rolled), marks, dict(entry.prefix)
        )

    async def _prefix(self, sid: str, entry: _Entry, at_seq: int, tool_cap: int) -> int:
        """The active tokens of seqs 1..at_seq: whole buckets from the profile, the
        rest of at_seq's own bucket from a short range read."""
        own = (at_seq - 1) // entry.width if at_seq > 0 else 0
        start = own * entry.width
        part = await self.runtime.db(lambda: self.reads.range_tokens(sid, start, at_seq, tool_cap))
        return sum(entry.tokens.get(i, 0) for i in range(own)) + part
