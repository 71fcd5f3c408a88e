"""The pure rule of cache-aware background compaction: wait for an idle gap of
the cache lifetime, but never past the wait limit."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from ctxwarden.core.background import (
    Moment,
    background_moment,
    idle_remaining,
    soft_threshold,
    wait_limit,
    wants_background_compaction,
)

thresholds = st.integers(min_value=1, max_value=10_000_000)
percents = st.integers(min_value=0, max_value=99)
tokens = st.integers(min_value=0, max_value=20_000_000)
afters = st.one_of(st.none(), tokens)
lifetimes = st.integers(min_value=1, max_value=86_400)


@given(thresholds, percents, tokens, afters)
def test_without_a_lifetime_it_is_todays_rule(
    threshold: int, percent: int, size: int, after: int | None
) -> None:
    wanted = wants_background_compaction(size, threshold, percent, after)
    moment = background_moment(size, threshold, percent, after, 0)
    assert moment is (Moment.NOW if wanted else Moment.NOT_YET)


@given(thresholds, percents, tokens, afters, lifetimes)
def test_a_lifetime_changes_when_never_whether(
    threshold: int, percent: int, size: int, after: int | None, lifetime: int
) -> None:
    wanted = wants_background_compaction(size, threshold, percent, after)
    moment = background_moment(size, threshold, percent, after, lifetime)
    assert (moment is not Moment.NOT_YET) == wanted


@given(thresholds, percents, tokens, afters, lifetimes)
def test_it_never_waits_at_or_past_the_compaction_threshold(
    threshold: int, percent: int, size: int, after: int | None, lifetime: int
) -> None:
    if background_moment(size, threshold, percent, after, lifetime) is Moment.WHEN_IDLE:
        assert size < wait_limit(threshold, percent, after) <= threshold
        assert size > soft_threshold(threshold, percent)


@given(thresholds, percents, tokens, afters, lifetimes, st.integers(0, 1_000_000))
def test_once_it_must_compact_now_more_tokens_do_not_make_it_wait(
    threshold: int, percent: int, size: int, after: int | None, lifetime: int, more: int
) -> None:
    if background_moment(size, threshold, percent, after, lifetime) is Moment.NOW:
        assert background_moment(size + more, threshold, percent, after, lifetime) is Moment.NOW


@given(thresholds, st.integers(1, 99), lifetimes)
def test_without_a_checkpoint_it_waits_from_soft_to_halfway(
    threshold: int, percent: int, lifetime: int
) -> None:
    soft = soft_threshold(threshold, percent)
    limit = wait_limit(threshold, percent, None)
    assert limit == soft + (threshold - soft) // 2
    for size in {soft + 1, limit - 1}:
        if 0 < soft < size < limit:
            assert background_moment(size, threshold, percent, None, lifetime) is Moment.WHEN_IDLE
    if soft > 0:  # at the limit (or just past the soft threshold, if that is further): now
        now = max(limit, soft + 1)
        assert background_moment(now, threshold, percent, None, lifetime) is Moment.NOW


@given(
    st.floats(min_value=0, max_value=1e9),
    st.floats(min_value=0, max_value=1e6),
    st.integers(min_value=1, max_value=86_400),
)
def test_the_idle_timer_fires_once_the_lifetime_passed(
    last: float, elapsed: float, lifetime: int
) -> None:
    remaining = idle_remaining(last, last + elapsed, lifetime)
    assert 0 <= remaining <= lifetime
    assert (remaining == 0) == (elapsed >= lifetime)


def test_an_example() -> None:
    # Threshold 100,000 tokens, soft threshold 60%: waits from 60,001 up to 80,000.
    assert wait_limit(100_000, 60, None) == 80_000
    assert background_moment(60_000, 100_000, 60, None, 300) is Moment.NOT_YET
    assert background_moment(60_001, 100_000, 60, None, 300) is Moment.WHEN_IDLE
    assert background_moment(79_999, 100_000, 60, None, 300) is Moment.WHEN_IDLE
    assert background_moment(80_000, 100_000, 60, None, 300) is Moment.NOW
    # The last compaction left 70,000 (above the soft threshold): wanted from
    # 90,000 (half the 40,000 gap more), waits up to halfway to 100,000.
    assert wait_limit(100_000, 60, 70_000) == 95_000
    assert background_moment(91_000, 100_000, 60, 70_000, 300) is Moment.WHEN_IDLE
    assert background_moment(95_000, 100_000, 60, 70_000, 300) is Moment.NOW
    assert idle_remaining(1000.0, 1200.0, 300) == 100.0
    assert idle_remaining(1000.0, 1300.0, 300) == 0.0
