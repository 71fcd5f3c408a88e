"""The pure rules of background compaction: the soft threshold and the backoff."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from ctxwarden.core.background import retry_delay, soft_threshold, wants_background_compaction

thresholds = st.integers(min_value=1, max_value=10_000_000)
percents = st.integers(min_value=1, max_value=99)
tokens = st.integers(min_value=0, max_value=20_000_000)


@given(thresholds, percents)
def test_the_soft_threshold_lies_below_the_hard_one(threshold: int, percent: int) -> None:
    soft = soft_threshold(threshold, percent)
    assert 0 <= soft < threshold
    assert soft == threshold * percent // 100


@given(thresholds, tokens, st.one_of(st.none(), tokens))
def test_percent_zero_is_off(threshold: int, size: int, after: int | None) -> None:
    assert not wants_background_compaction(size, threshold, 0, after)


@given(thresholds, percents, tokens)
def test_without_a_checkpoint_it_starts_exactly_past_the_soft_threshold(
    threshold: int, percent: int, size: int
) -> None:
    soft = soft_threshold(threshold, percent)
    assert wants_background_compaction(size, threshold, percent, None) == (soft > 0 and size > soft)


@given(thresholds, percents, tokens, tokens)
def test_a_checkpoint_left_above_the_soft_threshold_needs_growth_first(
    threshold: int, percent: int, size: int, after: int
) -> None:
    soft = soft_threshold(threshold, percent)
    wanted = wants_background_compaction(size, threshold, percent, after)
    if wanted:
        assert size > soft
    if after >= soft and wanted:
        assert size - after >= max(1, (threshold - soft) // 2)
    if after < soft:
        assert wanted == (soft > 0 and size > soft)


def test_an_example() -> None:
    assert soft_threshold(100_000, 80) == 80_000
    assert not wants_background_compaction(80_000, 100_000, 80, None)
    assert wants_background_compaction(80_001, 100_000, 80, None)
    assert wants_background_compaction(80_001, 100_000, 80, 30_000)
    # The last compaction left 85,000: wait for 10,000 more.
    assert not wants_background_compaction(94_999, 100_000, 80, 85_000)
    assert wants_background_compaction(95_000, 100_000, 80, 85_000)


@given(
    st.integers(min_value=1, max_value=10_000),
    st.floats(min_value=0.001, max_value=100.0),
    st.floats(min_value=0.001, max_value=10_000.0),
)
def test_the_backoff_doubles_up_to_its_cap(attempt: int, base: float, cap: float) -> None:
    delay = retry_delay(attempt, base, cap)
    assert 0 < delay <= cap
    assert delay >= retry_delay(attempt - 1, base, cap) if attempt > 1 else True
    if attempt < 40:
        assert delay == min(cap, base * 2 ** (attempt - 1))


def test_backoff_examples() -> None:
    assert [retry_delay(a, 5.0, 300.0) for a in range(1, 9)] == [
        5.0, 10.0, 20.0, 40.0, 80.0, 160.0, 300.0, 300.0,
    ]  # fmt: skip
    assert retry_delay(0, 5.0, 300.0) == 0.0
    assert retry_delay(3, 0.0, 300.0) == 0.0
