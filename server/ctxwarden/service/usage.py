"""GetUsage: the usage ledger of a session or a tenant, priced by the server's
price table (core.prices) when it has one."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ctxwarden.core.prices import PriceTable, PriceTableError, parse_price_table
from ctxwarden.core.usage_ledger import (
    NO_CACHE,
    NO_TOKENS,
    CacheTotals,
    TokenTotals,
    UsageLedger,
    UsageSource,
)

if TYPE_CHECKING:
    from ctxwarden.service.runtime import SessionRuntime


def load_price_table(path: str) -> PriceTable:
    """The table in a JSON file (PriceTableError: unreadable or malformed, with the path)."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise PriceTableError(f"{path}: {exc}") from exc
    try:
        return parse_price_table(data)
    except PriceTableError as exc:
        raise PriceTableError(f"{path}: {exc}") from exc


@dataclass(frozen=True, slots=True)
class ModelLine:
    source: UsageSource
    model: str
    totals: TokenTotals
    cost: float
    priced: bool


@dataclass(frozen=True, slots=True)
class UsageView:
    """A ledger as GetUsage shows it."""

    session_id: str
    session_count: int
    lines: tuple[ModelLine, ...]
    currency: str
    """"" without a price table."""
    cache: CacheTotals = NO_CACHE

    def totals(self, source: UsageSource | None = None) -> tuple[TokenTotals, float]:
        tokens, cost = NO_TOKENS, 0.0
        for line in self.lines:
            if source is None or line.source is source:
                tokens, cost = tokens + line.totals, cost + line.cost
        return tokens, cost


def usage_view(
    session_id: str, count: int, ledger: UsageLedger, prices: PriceTable | None
) -> UsageView:
    lines = []
    for source, model, totals in ledger.entries:
        price = prices.price(model) if prices is not None else None
        cost = price.cost(totals) if price is not None else 0.0
        lines.append(ModelLine(source, model, totals, cost, price is not None))
    currency = prices.currency if prices else ""
    return UsageView(session_id, count, tuple(lines), currency, ledger.cache)


def observe_ledger(rt: SessionRuntime, added: UsageLedger) -> None:
    """Record what a committed write added to a ledger in the metrics, priced."""
    prices = rt.prices
    for source, model, totals in added.entries:
        price = prices.price(model) if prices is not None else None
        cost = price.cost(totals) if price is not None else 0.0
        currency = prices.currency if prices is not None else ""
        rt.metrics.observe_usage(source.name.lower(), totals, cost, currency)


class UsageReports:
    def __init__(self, runtime: SessionRuntime, prices: PriceTable | None) -> None:
        self.rt = runtime
        self.prices = runtime.prices = prices

    async def session(self, session_id: str) -> UsageView:
        """NOT_FOUND for an unknown or deleted session."""
        session = await self.rt.get_session(session_id)
        return usage_view(session_id, 1, session.usage, self.prices)

    async def tenant(self, tenant: str) -> UsageView:
        count, ledger = await self.rt.db(lambda: self.rt.store.usage.tenant(tenant))
        return usage_view("", count, ledger, self.prices)
