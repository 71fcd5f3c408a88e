"""When to compact in the background, and how long to wait before a retry.

Pure rules for the background compaction scheduler
(``service.background_compaction``): a session is compacted early once its
context passes a soft threshold, a percentage of the compaction threshold, so
the agent's BuildModelInput rarely has to wait for a summariser.

With a cache lifetime (``ContextPolicy.cache_lifetime_seconds``) a session
past the soft threshold waits for a moment when the provider's prompt cache
has expired anyway (an idle gap of at least the lifetime): a compaction
rewrites the input's prefix, so compacting then costs no cache. It waits at
most until its context is halfway from where it became wanted to the
compaction threshold (``wait_limit``), so the hard threshold keeps its margin.
"""

from __future__ import annotations

import enum

MAX_CACHE_LIFETIME_SECONDS = 86_400
"""The longest cache lifetime a policy may set (a day; providers keep minutes to an hour)."""


class Moment(enum.Enum):
    """When a session should be compacted in the background."""

    NOT_YET = "not_yet"
    """Below the soft threshold (or too little new since the last checkpoint)."""
    NOW = "now"
    WHEN_IDLE = "when_idle"
    """Once the session has been idle for the cache lifetime."""


def soft_threshold(threshold: int, percent: int) -> int:
    """``percent`` (1-99) of the compaction threshold, in tokens; 0: off."""
    if percent <= 0 or threshold <= 0:
        return 0
    return threshold * min(percent, 99) // 100


def wants_background_compaction(
    tokens: int, threshold: int, percent: int, checkpoint_tokens_after: int | None
) -> bool:
    """Whether a context of ``tokens`` should be compacted in the background.

    ``checkpoint_tokens_after``: what the current checkpoint left (None: no
    checkpoint). When that was already above the soft threshold (the kept
    recent history alone is that large), compacting again at once would free
    almost nothing: wait until the context grew by half the gap between the
    two thresholds, so one compaction is not started per append."""
    soft = soft_threshold(threshold, percent)
    if soft <= 0 or tokens <= soft:
        return False
    if checkpoint_tokens_after is not None and checkpoint_tokens_after >= soft:
        return tokens - checkpoint_tokens_after >= max(1, (threshold - soft) // 2)
    return True


def wait_limit(threshold: int, percent: int, checkpoint_tokens_after: int | None) -> int:
    """Tokens at which a session waiting for an idle gap is compacted anyway:
    halfway from where it became wanted (the soft threshold, or what the last
    checkpoint left plus the regrowth ``wants_background_compaction`` asks for)
    to the compaction threshold."""
    soft = soft_threshold(threshold, percent)
    start = soft
    if checkpoint_tokens_after is not None and checkpoint_tokens_after >= soft:
        start = checkpoint_tokens_after + max(1, (threshold - soft) // 2)
    return start + max(0, threshold - start) // 2


def background_moment(
    tokens: int,
    threshold: int,
    percent: int,
    checkpoint_tokens_after: int | None,
    cache_lifetime_seconds: int,
) -> Moment:
    """When to compact a context of ``tokens`` in the background: not yet, now,
    or when the session is idle for ``cache_lifetime_seconds`` (0: never wait)."""
    if not wants_background_compaction(tokens, threshold, percent, checkpoint_tokens_after):
        return Moment.NOT_YET
    if cache_lifetime_seconds <= 0:
        return Moment.NOW
    if tokens >= wait_limit(threshold, percent, checkpoint_tokens_after):
        return Moment.NOW
    return Moment.WHEN_IDLE


def idle_remaining(last_active: float, now: float, cache_lifetime_seconds: float) -> float:
    """Seconds until a session last active at ``last_active`` has been idle for
    the cache lifetime (0: it has; its provider cache has expired)."""
    return max(0.0, last_active + cache_lifetime_seconds - now)


def retry_delay(attempt: int, base_seconds: float, max_seconds: float) -> float:
    """Seconds to wait after failed attempt number ``attempt`` (1, 2, ...):
    ``base_seconds`` doubled per attempt, at most ``max_seconds``."""
    if attempt < 1 or base_seconds <= 0:
        return 0.0
    # 2**60 already exceeds any sane cap; bounding the exponent avoids overflow.
    return float(min(max_seconds, base_seconds * 2 ** min(attempt - 1, 60)))
