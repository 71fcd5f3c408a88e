"""The usage ledger and the price table (core.usage_ledger, core.prices): pure parts,
with properties over generated usage."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ctxwarden.core.cache_prefix import CacheBreak, CachePrefix
from ctxwarden.core.messages import Message, Role, Usage
from ctxwarden.core.prices import PriceTableError, parse_price_table
from ctxwarden.core.summarizer_usage import (
    anthropic_usage,
    collecting,
    openai_chat_usage,
    report_usage,
)
from ctxwarden.core.usage_ledger import (
    EMPTY_LEDGER,
    NO_TOKENS,
    SummarizerSpend,
    TokenTotals,
    UsageSource,
    ledger_after_messages,
    ledger_json,
    ledger_of_json,
    spent_on,
)
from ctxwarden.store.codec import compact_json

COUNT = st.integers(0, 10**9)
usages = st.builds(
    Usage,
    input_tokens=COUNT,
    output_tokens=COUNT,
    cache_read_tokens=COUNT,
    cache_write_tokens=COUNT,
    total_tokens=COUNT,
    reasoning_tokens=COUNT,
)
MODELS = st.sampled_from(["", "m-a", "m-b", "gpt-5-mini"])
messages = st.builds(
    lambda u, model: Message(Role.ASSISTANT, usage=u, model=model),
    st.none() | usages,
    MODELS,
)


def _sum(us: list[Usage]) -> TokenTotals:
    out = NO_TOKENS
    for u in us:
        out = out + TokenTotals.of(u)
    return out


@given(usages)
def test_usage_keeps_all_six_counts(u: Usage) -> None:
    again = Usage(*u.counts())
    assert again == u and again.reasoning_tokens == u.reasoning_tokens


@given(st.lists(messages, max_size=12), st.integers(0, 12), MODELS)
def test_ledger_is_the_sum_of_the_reported_usage_in_any_split(
    batch: list[Message], cut: int, session_model: str
) -> None:
    whole = ledger_after_messages(EMPTY_LEDGER, batch, session_model)
    split = ledger_after_messages(
        ledger_after_messages(EMPTY_LEDGER, batch[:cut], session_model),
        batch[cut:],
        session_model,
    )
    assert split == whole
    reported = [m.usage for m in batch if m.usage is not None]
    assert whole.total() == _sum(reported)
    assert whole.total(UsageSource.AGENT) == whole.total()
    for _, model, totals in whole.entries:
        mine = [m.usage for m in batch if m.usage and (m.model or session_model) == model]
        assert totals == _sum(mine)
    assert ledger_of_json(ledger_json(whole)) == whole


@given(st.lists(messages, max_size=6), st.lists(usages, max_size=3))
def test_summariser_spend_is_apart_and_additive(batch: list[Message], calls: list[Usage]) -> None:
    agent = ledger_after_messages(EMPTY_LEDGER, batch, "m-a")
    spend = SummarizerSpend.of(type("S", (), {"model": "summ"})(), calls)
    after = spent_on(agent, spend)
    assert after.total(UsageSource.AGENT) == agent.total()
    assert (
        after.total(UsageSource.SUMMARIZER) == _sum(calls) == (spend.totals if spend else NO_TOKENS)
    )
    assert after.total() == agent.total() + after.total(UsageSource.SUMMARIZER)
    if spend is not None:
        assert TokenTotals.of(spend.usage).counts()[1:] == spend.totals.counts()[1:]


def test_empty_ledger_is_stored_as_null() -> None:
    assert ledger_json(EMPTY_LEDGER) is None and ledger_of_json(None) == EMPTY_LEDGER
    assert EMPTY_LEDGER.add(UsageSource.AGENT, "m", NO_TOKENS) is EMPTY_LEDGER


TABLE = {
    "currency": "EUR",
    "per_tokens": 1000,
    "models": {
        "m-a": {"input": 1, "cache_read": 0.1, "cache_write": 1.25, "output": 5},
        "gpt-*": {"input": 2},
        "gpt-5*": {"input": 3, "output": 7},
    },
}


@given(usages, usages)
def test_cost_is_linear_in_the_totals(a: Usage, b: Usage) -> None:
    price = parse_price_table(TABLE).price("m-a")
    assert price is not None
    ta, tb = TokenTotals.of(a), TokenTotals.of(b)
    assert price.cost(ta + tb) == pytest.approx(price.cost(ta) + price.cost(tb))
    expected = (
        a.input_tokens + 0.1 * a.cache_read_tokens + 1.25 * a.cache_write_tokens
    ) + 5 * a.output_tokens  # reasoning is output: never priced twice
    assert price.cost(ta) == pytest.approx(expected / 1000)


def test_exact_name_then_longest_prefix() -> None:
    table = parse_price_table(TABLE)
    assert table.currency == "EUR"
    inputs = {
        m: p.input * 1000 if p else None
        for m in ("gpt-5-mini", "gpt-4o", "m-a", "claude")
        for p in [table.price(m)]
    }
    assert inputs == {"gpt-5-mini": 3, "gpt-4o": 2, "m-a": 1, "claude": None}


@pytest.mark.parametrize(
    ("data", "says"),
    [
        ([], "JSON object"),
        ({"models": {}}, "non-empty"),
        ({"models": {"m": {"reasoning": 1}}}, "reasoning tokens are output tokens"),
        ({"models": {"m": {"input": -1}}}, "non-negative"),
        ({"models": {"m": {"input": True}}}, "non-negative"),
        ({"models": {"m": {}}, "per_tokens": 0}, "more than 0"),
        ({"models": {"m": {}}, "price": 1}, "unknown keys"),
        ({"models": {"m": {}}, "currency": ""}, "currency"),
    ],
)
def test_a_bad_table_says_what_to_fix(data: object, says: str) -> None:
    with pytest.raises(PriceTableError, match=says):
        parse_price_table(data)


def test_summariser_replies_are_read_and_gathered() -> None:
    anthropic = {
        "usage": {
            "input_tokens": 10,
            "output_tokens": 4,
            "cache_read_input_tokens": 100,
            "cache_creation_input_tokens": 7,
        }
    }
    openai = {
        "usage": {
            "prompt_tokens": 50,
            "completion_tokens": 9,
            "total_tokens": 59,
            "prompt_tokens_details": {"cached_tokens": 30},
            "completion_tokens_details": {"reasoning_tokens": 6},
        }
    }
    assert anthropic_usage(anthropic) == Usage(10, 4, 100, 7)
    assert openai_chat_usage(openai) == Usage(20, 9, 30, 0, 59, 6)
    assert openai_chat_usage({"usage": {"prompt_tokens": "many"}}) == Usage()
    assert anthropic_usage({}) is None and openai_chat_usage({"usage": None}) is None
    report_usage(Usage(1))  # outside collecting(): dropped
    with collecting() as calls:
        report_usage(Usage(2))
        report_usage(None)
    assert calls == [Usage(2)]


prefixes = st.builds(
    CachePrefix,
    st.integers(0, 10**6),
    st.integers(0, 10**6),
    st.integers(0, 10**6),
    st.integers(0, 10**6),
    st.sampled_from(list(CacheBreak)),
)


@given(st.lists(st.tuples(prefixes, st.none() | usages), max_size=10))
def test_cache_totals_sum_builds_and_pair_each_build_once(
    steps: list[tuple[CachePrefix, Usage | None]],
) -> None:
    ledger = EMPTY_LEDGER
    paired: list[tuple[int, Usage]] = []
    for prefix, answer in steps:
        ledger = ledger.after_build(prefix)
        if answer is not None:
            reply = Message(Role.ASSISTANT, usage=answer)
            ledger = ledger_after_messages(ledger, [reply, reply], "m")  # the second: unpaired
            paired.append((prefix.shared_tokens, answer))
    c = ledger.cache
    assert c.builds == len(steps)
    assert c.input_tokens == sum(p.input_tokens for p, _ in steps)
    assert c.predicted_tokens == sum(p.shared_tokens for p, _ in steps)
    assert c.paired_calls == len(paired)
    assert c.paired_predicted_tokens == sum(s for s, _ in paired)
    assert c.paired_cache_read_tokens == sum(u.cache_read_tokens for _, u in paired)
    breaks = [p for p, _ in steps if p.reason is not CacheBreak.NONE]
    assert sum(n for _, n, _ in c.breaks) == len(breaks)
    assert sum(t for _, _, t in c.breaks) == sum(p.lost_tokens for p in breaks)
    text = ledger_json(ledger)
    assert ledger_of_json(text) == ledger
    if text is not None:  # canonical: what an import stores again (store.codec.compact_json)
        assert compact_json(json.loads(text)) == text
    assert EMPTY_LEDGER.merge(ledger).merge(ledger).cache.builds == 2 * c.builds
