"""bench.cache_schedule on one small scenario: the cache-aware schedule sends
fewer tokens uncached than eager background compaction, never lets the input
reach the compaction threshold, and the measurement is deterministic."""

from __future__ import annotations

from bench.cache_schedule import POLICY, run_on_sqlite, table

from ctxwarden.core.background import soft_threshold, wait_limit

THRESHOLD = POLICY.context_window - POLICY.reserve_tokens


def test_the_cache_aware_schedule_saves_cache_tokens_within_the_threshold() -> None:
    results = run_on_sqlite(["coding"], [1], 300)
    eager, aware = results["coding"]["eager"], results["coding"]["aware"]
    assert eager.inputs == aware.inputs > 50  # the same agent loop, input for input
    assert aware.uncached < eager.uncached
    assert aware.cache_read > eager.cache_read
    assert aware.compactions < eager.compactions
    assert eager.at_hard_threshold == aware.at_hard_threshold == 0
    percent = POLICY.background_compaction_percent
    assert eager.peak_tokens <= soft_threshold(THRESHOLD, percent) < aware.peak_tokens
    assert aware.peak_tokens < wait_limit(THRESHOLD, percent, None) < THRESHOLD
    again = run_on_sqlite(["coding"], [1], 300)
    assert table(again) == table(results)
