"""The usage ledger: what providers reported for a session, summed per model and
source (the agent's model outputs, the server's summariser calls).

Totals only grow. The ledger moves with the write that brings the usage (an
append, a compaction), in the same compare-and-set, so a request answered from
its idempotency record, or a message re-sent with its message_id, adds nothing.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from ctxwarden.core.cache_prefix import CacheBreak, CachePrefix
from ctxwarden.core.messages import Message, Usage


class UsageSource(enum.IntEnum):
    """Who made the calls (the proto's UsageSource values)."""

    AGENT = 1
    SUMMARIZER = 2


@dataclass(frozen=True, slots=True)
class TokenTotals:
    """Totals by token kind; input, cache read and cache write are disjoint
    parts of the prompt, reasoning is part of output."""

    calls: int = 0
    input_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    output_tokens: int = 0
    reasoning_tokens: int = 0

    @staticmethod
    def of(usage: Usage) -> TokenTotals:
        """One call's usage."""
        return TokenTotals(
            1,
            usage.input_tokens,
            usage.cache_read_tokens,
            usage.cache_write_tokens,
            usage.output_tokens,
            usage.reasoning_tokens,
        )

    def __add__(self, other: TokenTotals) -> TokenTotals:
        return TokenTotals(
            self.calls + other.calls,
            self.input_tokens + other.input_tokens,
            self.cache_read_tokens + other.cache_read_tokens,
            self.cache_write_tokens + other.cache_write_tokens,
            self.output_tokens + other.output_tokens,
            self.reasoning_tokens + other.reasoning_tokens,
        )

    def counts(self) -> tuple[int, ...]:
        """The fields' values in field order (written out: every append adds these)."""
        return (
            self.calls,
            self.input_tokens,
            self.cache_read_tokens,
            self.cache_write_tokens,
            self.output_tokens,
            self.reasoning_tokens,
        )

    def as_usage(self) -> Usage:
        """The totals as one Usage (total_tokens: input, cache and output summed)."""
        return Usage(
            self.input_tokens,
            self.output_tokens,
            self.cache_read_tokens,
            self.cache_write_tokens,
            self.input_tokens
            + self.cache_read_tokens
            + self.cache_write_tokens
            + self.output_tokens,
            self.reasoning_tokens,
        )


NO_TOKENS = TokenTotals()


@dataclass(frozen=True, slots=True)
class CacheTotals:
    """The cache ledger's totals (core.cache_prefix): what the inputs built for
    the session shared with the one before (predicted cacheable), and, for the
    provider calls that reported usage right after a build, predicted and
    observed side by side."""

    builds: int = 0
    input_tokens: int = 0
    predicted_tokens: int = 0
    paired_calls: int = 0
    paired_predicted_tokens: int = 0
    paired_cache_read_tokens: int = 0
    """What the provider reported as read from its cache, for those calls."""
    paired_prompt_tokens: int = 0
    """Their whole prompt as reported: input, cache read and cache write."""
    breaks: tuple[tuple[int, int, int], ...] = ()
    """(CacheBreak value, times, tokens lost), by reason."""
    pending: int = -1
    """Predicted tokens of the last build no reported usage was paired with yet (-1: none)."""

    def counts(self) -> tuple[int, ...]:
        return (
            self.builds,
            self.input_tokens,
            self.predicted_tokens,
            self.paired_calls,
            self.paired_predicted_tokens,
            self.paired_cache_read_tokens,
            self.paired_prompt_tokens,
        )

    def after_build(self, prefix: CachePrefix) -> CacheTotals:
        breaks = self.breaks
        if prefix.reason is not CacheBreak.NONE:
            found = {r: (c, t) for r, c, t in breaks}
            c, t = found.get(int(prefix.reason), (0, 0))
            found[int(prefix.reason)] = (c + 1, t + prefix.lost_tokens)
            breaks = tuple(sorted((r, c, t) for r, (c, t) in found.items()))
        return replace(
            self,
            builds=self.builds + 1,
            input_tokens=self.input_tokens + prefix.input_tokens,
            predicted_tokens=self.predicted_tokens + prefix.shared_tokens,
            breaks=breaks,
            pending=prefix.shared_tokens,
        )

    def paired(self, usage: Usage) -> CacheTotals:
        """The first reported usage after a build pairs with its prediction."""
        if self.pending < 0:
            return self
        prompt = usage.input_tokens + usage.cache_read_tokens + usage.cache_write_tokens
        return replace(
            self,
            paired_calls=self.paired_calls + 1,
            paired_predicted_tokens=self.paired_predicted_tokens + self.pending,
            paired_cache_read_tokens=self.paired_cache_read_tokens + usage.cache_read_tokens,
            paired_prompt_tokens=self.paired_prompt_tokens + prompt,
            pending=-1,
        )

    def __add__(self, other: CacheTotals) -> CacheTotals:
        found = {r: (c, t) for r, c, t in self.breaks}
        for r, c, t in other.breaks:
            c0, t0 = found.get(r, (0, 0))
            found[r] = (c0 + c, t0 + t)
        return _cache_totals(
            [a + b for a, b in zip(self.counts(), other.counts(), strict=True)],
            tuple(sorted((r, c, t) for r, (c, t) in found.items())),
        )


def _cache_totals(
    counts: list[int], breaks: tuple[tuple[int, int, int], ...], pending: int = -1
) -> CacheTotals:
    """Totals from ``counts()``'s values (in its order)."""
    b, i, p, pc, pp, pr, pt = counts
    return CacheTotals(b, i, p, pc, pp, pr, pt, breaks, pending)


NO_CACHE = CacheTotals()

Key = tuple[UsageSource, str]
"""(source, model)."""


@dataclass(frozen=True, slots=True)
class UsageLedger:
    """Per (source, model) totals, sorted by key: equal ledgers compare equal."""

    entries: tuple[tuple[UsageSource, str, TokenTotals], ...] = ()
    cache: CacheTotals = NO_CACHE

    def add(self, source: UsageSource, model: str, totals: TokenTotals) -> UsageLedger:
        if totals == NO_TOKENS:
            return self
        merged = dict(self.by_key())
        key = (source, model)
        merged[key] = merged.get(key, NO_TOKENS) + totals
        return UsageLedger.of(merged, self.cache)

    def merge(self, other: UsageLedger) -> UsageLedger:
        out = self
        for source, model, totals in other.entries:
            out = out.add(source, model, totals)
        return replace(out, cache=out.cache + other.cache)

    def after_build(self, prefix: CachePrefix) -> UsageLedger:
        return replace(self, cache=self.cache.after_build(prefix))

    @staticmethod
    def of(by_key: Mapping[Key, TokenTotals], cache: CacheTotals = NO_CACHE) -> UsageLedger:
        return UsageLedger(tuple((s, m, t) for (s, m), t in sorted(by_key.items())), cache)

    def by_key(self) -> dict[Key, TokenTotals]:
        return {(s, m): t for s, m, t in self.entries}

    def total(self, source: UsageSource | None = None) -> TokenTotals:
        out = NO_TOKENS
        for s, _, t in self.entries:
            if source is None or s is source:
                out = out + t
        return out


EMPTY_LEDGER = UsageLedger()


def ledger_after_messages(
    ledger: UsageLedger, new: Iterable[Message], session_model: str
) -> UsageLedger:
    """``ledger`` plus the usage the newly stored messages report (a message
    without a model is counted under the session's)."""
    out = ledger
    for m in new:
        if m.usage is not None:
            out = out.add(UsageSource.AGENT, m.model or session_model, TokenTotals.of(m.usage))
            if out.cache.pending >= 0:
                out = replace(out, cache=out.cache.paired(m.usage))
    return out


def summed_usage(usages: Iterable[Usage]) -> Usage | None:
    """Several calls' usage as one (None when there is none)."""
    total = NO_TOKENS
    for u in usages:
        total = total + TokenTotals.of(u)
    return None if total == NO_TOKENS else total.as_usage()


_SOURCES = {"agent": UsageSource.AGENT, "summarizer": UsageSource.SUMMARIZER}
_NAMES = {v: k for k, v in _SOURCES.items()}


def ledger_json(ledger: UsageLedger) -> str | None:
    """As stored (sessions.usage_json): ``{"u": [[source, model, counts...]...],
    "c": [cache counts..., [[reason, times, tokens lost]...], pending]}``; None
    for an empty ledger."""
    if ledger == EMPTY_LEDGER:
        return None
    rows = [[_NAMES[s], m, *t.counts()] for s, m, t in ledger.entries]
    c = ledger.cache
    cache = [*c.counts(), [list(b) for b in c.breaks], c.pending]
    # Canonical (sorted keys, as store.codec.compact_json): an imported copy stores the same text.
    return json.dumps(
        {"u": rows, "c": cache}, ensure_ascii=False, separators=(",", ":"), sort_keys=True
    )


def ledger_of_json(text: str | None) -> UsageLedger:
    if not text:
        return EMPTY_LEDGER
    data: dict[str, Any] = json.loads(text)
    rows: list[list[Any]] = data.get("u", [])
    c: list[Any] = data.get("c") or [0] * 7 + [[], -1]
    cache = _cache_totals(
        [int(n) for n in c[:7]],
        tuple((int(r), int(n), int(t)) for r, n, t in c[7]),
        int(c[8]),
    )
    return UsageLedger.of(
        {(_SOURCES[r[0]], str(r[1])): TokenTotals(*(int(n) for n in r[2:])) for r in rows}, cache
    )


@dataclass(frozen=True, slots=True)
class SummarizerSpend:
    """What one compaction's server-side summariser calls reported."""

    model: str
    totals: TokenTotals

    @staticmethod
    def of(summarizer: object, calls: Iterable[Usage]) -> SummarizerSpend | None:
        """None when no call reported usage (an extractive summariser)."""
        totals = NO_TOKENS
        for u in calls:
            totals = totals + TokenTotals.of(u)
        if totals == NO_TOKENS:
            return None
        model = getattr(summarizer, "model", "")
        return SummarizerSpend(model if isinstance(model, str) else "", totals)

    @property
    def usage(self) -> Usage:
        return self.totals.as_usage()


def spent_on(ledger: UsageLedger, spent: SummarizerSpend | None) -> UsageLedger:
    """``ledger`` plus a compaction's summariser calls."""
    if spent is None:
        return ledger
    return ledger.add(UsageSource.SUMMARIZER, spent.model, spent.totals)
