"""The price table: what a token of each kind costs, per model, so the usage
ledger's totals become a cost.

A JSON object (the file of ``serve --price-table``)::

    {
      "currency": "USD",
      "per_tokens": 1000000,
      "models": {
        "claude-sonnet-4-5": {"input": 3, "cache_read": 0.3, "cache_write": 3.75, "output": 15},
        "gpt-5*": {"input": 1.25, "cache_read": 0.125, "output": 10}
      }
    }

Prices are per ``per_tokens`` tokens (default one million). A kind left out
costs 0. A model name ending in ``*`` is a prefix: the longest matching prefix
wins after an exact name. Reasoning tokens are part of output tokens and cost
what output costs (a ``reasoning`` price is refused, so nothing is counted twice).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ctxwarden.core.usage_ledger import TokenTotals

KINDS = ("input", "cache_read", "cache_write", "output")


class PriceTableError(ValueError):
    """A price table that cannot be used, with what to fix."""


@dataclass(frozen=True, slots=True)
class ModelPrice:
    """Currency units per token, by kind."""

    input: float = 0.0
    cache_read: float = 0.0
    cache_write: float = 0.0
    output: float = 0.0

    def cost(self, t: TokenTotals) -> float:
        return (
            t.input_tokens * self.input
            + t.cache_read_tokens * self.cache_read
            + t.cache_write_tokens * self.cache_write
            + t.output_tokens * self.output
        )


@dataclass(frozen=True, slots=True)
class PriceTable:
    currency: str
    exact: Mapping[str, ModelPrice]
    prefixes: tuple[tuple[str, ModelPrice], ...]
    """Longest prefix first."""

    def price(self, model: str) -> ModelPrice | None:
        found = self.exact.get(model)
        if found is not None:
            return found
        for prefix, price in self.prefixes:
            if model.startswith(prefix):
                return price
        return None


def _number(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise PriceTableError(f"{where} must be a non-negative number, not {value!r}")
    return float(value)


def _model_price(name: str, prices: Any, per_tokens: float) -> ModelPrice:
    if not isinstance(prices, Mapping):
        raise PriceTableError(f"models.{name} must be an object of prices by token kind")
    unknown = sorted(set(prices) - set(KINDS))
    if unknown:
        raise PriceTableError(
            f"models.{name} has unknown token kinds {unknown}: use {', '.join(KINDS)} "
            "(reasoning tokens are output tokens)"
        )
    return ModelPrice(
        **{k: _number(v, f"models.{name}.{k}") / per_tokens for k, v in prices.items()}
    )


def parse_price_table(data: Any) -> PriceTable:
    """The table of a decoded JSON document (PriceTableError names what is wrong)."""
    if not isinstance(data, Mapping):
        raise PriceTableError("a price table is a JSON object with a 'models' object")
    unknown = sorted(set(data) - {"currency", "per_tokens", "models"})
    if unknown:
        raise PriceTableError(f"unknown keys {unknown}: use currency, per_tokens, models")
    currency = data.get("currency", "USD")
    if not isinstance(currency, str) or not currency:
        raise PriceTableError("currency must be a non-empty string, e.g. 'USD'")
    per_tokens = _number(data.get("per_tokens", 1_000_000), "per_tokens")
    if per_tokens == 0:
        raise PriceTableError("per_tokens must be more than 0")
    models = data.get("models")
    if not isinstance(models, Mapping) or not models:
        raise PriceTableError("models must be a non-empty object: model name -> prices")
    exact: dict[str, ModelPrice] = {}
    prefixes: list[tuple[str, ModelPrice]] = []
    for name, prices in models.items():
        price = _model_price(str(name), prices, per_tokens)
        if str(name).endswith("*"):
            prefixes.append((str(name)[:-1], price))
        else:
            exact[str(name)] = price
    prefixes.sort(key=lambda p: -len(p[0]))
    return PriceTable(currency, exact, tuple(prefixes))
