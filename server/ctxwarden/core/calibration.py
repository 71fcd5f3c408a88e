"""Calibrating local token estimates against what the provider reported.

An assistant message's ``usage`` is ground truth for the context that
produced it. Comparing it with our own count of that context gives a
correction factor (actual / estimated), smoothed over turns, applied to
later estimates. The newest valid usage also anchors the context size
directly: usage + an estimate of what came after it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ctxwarden.core.messages import Message, Role, Usage

SMOOTHING = 0.5
"""Weight of the newest observation in the running ratio."""
RATIO_BOUNDS = (0.25, 4.0)
"""Observations outside these bounds are clamped (a usage from a different
context, e.g. right after a compaction, must not derail the estimate)."""


@dataclass(frozen=True, slots=True)
class Calibration:
    ratio: float = 1.0
    samples: int = 0

    def apply(self, tokens: int) -> int:
        return round(tokens * self.ratio)

    def observe(self, actual: int, estimated: int) -> Calibration:
        if actual <= 0 or estimated <= 0:
            return self
        low, high = RATIO_BOUNDS
        observed = min(max(actual / estimated, low), high)
        if self.samples == 0:
            ratio = observed
        else:
            ratio = (1 - SMOOTHING) * self.ratio + SMOOTHING * observed
        return Calibration(round(ratio, 6), self.samples + 1)


MAX_PRIORS = 10_000
"""(tenant, model) pairs remembered; beyond this the table starts over."""


class ModelCalibration:
    """Per-model correction factors, learned from every session of that model
    within one tenant.

    A new session starts from its model's factor instead of 1.0, so even its
    first estimates are corrected; from its own first reported usage on, the
    session's own factor takes over. Factors never cross tenants: what one
    tenant reports must not change another tenant's counts.
    """

    def __init__(self) -> None:
        self._by_model: dict[tuple[str, str], Calibration] = {}

    def prior(self, tenant: str, model: str) -> Calibration:
        known = self._by_model.get((tenant, model)) if model else None
        return Calibration(known.ratio, 0) if known is not None else Calibration()

    def learn(self, tenant: str, model: str, session_ratio: float) -> None:
        if not model:
            return  # sessions that name no model have nothing in common
        key = (tenant, model)
        current = self._by_model.get(key, Calibration())
        if current.samples == 0:
            if len(self._by_model) >= MAX_PRIORS:
                self._by_model.clear()
            self._by_model[key] = Calibration(session_ratio, 1)
        else:
            ratio = (1 - SMOOTHING) * current.ratio + SMOOTHING * session_ratio
            self._by_model[key] = Calibration(round(ratio, 6), current.samples + 1)


def prompt_tokens(usage: Usage) -> int:
    """The input context the provider billed for: uncached + cached input.

    ``input_tokens`` counts uncached input (Anthropic's convention); clients of
    OpenAI should send ``prompt_tokens - cached_tokens`` there and the cached
    part as ``cache_read_tokens``.
    """
    return usage.input_tokens + usage.cache_read_tokens + usage.cache_write_tokens


def context_tokens(usage: Usage) -> int:
    """The context size after the reply: its input plus its output."""
    if usage.total_tokens:
        return usage.total_tokens
    return prompt_tokens(usage) + usage.output_tokens


def usable(message: Message) -> bool:
    return message.usage is not None and not message.failed and prompt_tokens(message.usage) > 0


def anchored(view_messages: Sequence[Message], floor: int, calibration: Calibration) -> int:
    """Newest valid reported usage in ``view_messages`` plus the calibrated estimate
    of what followed it (0: none). A usage from before the current checkpoint
    (made at seq ``floor``) measured a context that no longer exists: it anchors
    nothing."""
    after = 0
    for m in reversed(view_messages):
        if m.role is Role.ASSISTANT and m.seq > floor and usable(m):
            assert m.usage is not None
            return context_tokens(m.usage) + calibration.apply(after)
        after += m.token_count
    return 0
