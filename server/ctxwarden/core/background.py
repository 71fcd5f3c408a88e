"""When to compact in the background, and how long to wait before a retry.

Pure rules for the background compaction scheduler
(``service.background_compaction``): a session is compacted early once its
context passes a soft threshold, a percentage of the compaction threshold, so
the agent's BuildModelInput rarely has to wait for a summariser.
"""

from __future__ import annotations


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


def retry_delay(attempt: int, base_seconds: float, max_seconds: float) -> float:
    """Seconds to wait after failed attempt number ``attempt`` (1, 2, ...):
    ``base_seconds`` doubled per attempt, at most ``max_seconds``."""
    if attempt < 1 or base_seconds <= 0:
        return 0.0
    # 2**60 already exceeds any sane cap; bounding the exponent avoids overflow.
    return float(min(max_seconds, base_seconds * 2 ** min(attempt - 1, 60)))
