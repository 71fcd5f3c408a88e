"""Metrics of the usage ledger (core.usage_ledger): the tokens providers
reported, by source and kind, the calls, and their cost by the price table."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter

from ctxwarden.core.cache_prefix import CacheBreak, CachePrefix
from ctxwarden.core.usage_ledger import TokenTotals
from ctxwarden.observability.label_cache import LabelCache

KINDS = ("input", "cache_read", "cache_write", "output", "reasoning")


class UsageMetrics:
    """Declared on a server's registry by ``Metrics``; recorded by ``observe_usage``."""

    def __init__(self, r: CollectorRegistry) -> None:
        self.tokens = Counter(
            "ctxwarden_provider_tokens",
            "Tokens providers reported, by source (agent: appended model outputs; "
            "summarizer: the server's compactions) and kind (input, cache_read, "
            "cache_write, output, reasoning; reasoning is part of output)",
            ["source", "kind"],
            registry=r,
        )
        self.calls = Counter(
            "ctxwarden_provider_calls",
            "Provider calls that reported usage, by source",
            ["source"],
            registry=r,
        )
        self.cost = Counter(
            "ctxwarden_provider_cost",
            "Cost of the reported tokens by the price table (serve --price-table), "
            "by source and currency",
            ["source", "currency"],
            registry=r,
        )
        self.calls_by = LabelCache(self.calls)
        self.tokens_by = LabelCache(self.tokens)
        self.cost_by = LabelCache(self.cost)
        self.cache = CacheMetrics(r)

    def observe_prefix(self, prefix: CachePrefix) -> None:
        self.cache.observe(prefix)

    def observe(self, source: str, totals: TokenTotals, cost: float, currency: str) -> None:
        if not totals.calls:
            return
        self.calls_by(source).inc(totals.calls)
        counts = (
            totals.input_tokens,
            totals.cache_read_tokens,
            totals.cache_write_tokens,
            totals.output_tokens,
            totals.reasoning_tokens,
        )
        for kind, n in zip(KINDS, counts, strict=True):
            if n:
                self.tokens_by((source, kind)).inc(n)
        if currency and cost > 0:
            self.cost_by((source, currency)).inc(cost)


class CacheMetrics:
    """The cache ledger's (core.cache_prefix): per live input built."""

    def __init__(self, r: CollectorRegistry) -> None:
        self.tokens = Counter(
            "ctxwarden_cache_prefix_tokens",
            "Tokens of the live inputs BuildModelInput returned (kind=input) and of the "
            "prefix each shared with the previous input of its session and format "
            "(kind=predicted_cached): what a provider's prompt cache can serve",
            ["kind"],
            registry=r,
        )
        self.breaks = Counter(
            "ctxwarden_cache_prefix_breaks",
            "Inputs that shared less than the previous input held, by reason",
            ["reason"],
            registry=r,
        )
        self.lost = Counter(
            "ctxwarden_cache_prefix_lost_tokens",
            "Tokens of previous inputs not shared by the next one, by reason",
            ["reason"],
            registry=r,
        )

    def observe(self, prefix: CachePrefix) -> None:
        self.tokens.labels("input").inc(prefix.input_tokens)
        self.tokens.labels("predicted_cached").inc(prefix.shared_tokens)
        if prefix.reason is not CacheBreak.NONE:
            self.breaks.labels(prefix.reason.label).inc()
            self.lost.labels(prefix.reason.label).inc(prefix.lost_tokens)
