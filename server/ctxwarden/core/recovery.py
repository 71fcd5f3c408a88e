"""Classify a provider error into what the agent should do next."""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass

RETRY_BASE_SECONDS = 2.0
RETRY_CAP_SECONDS = 60.0
DEFAULT_MAX_RETRIES = 3


class RecoveryAction(enum.IntEnum):
    UNSPECIFIED = 0
    RETRY = 1
    COMPACT_AND_RETRY = 2
    FAIL = 3


class ErrorClass(enum.Enum):
    NONE = "none"
    OVERFLOW = "context_overflow"
    TRANSIENT = "transient"
    FATAL = "fatal"


_OVERFLOW = re.compile(
    r"prompt is too long|maximum context length|context[_ ]length[_ ]exceeded"
    r"|exceeds? the context window|too many tokens|context window|input is too long"
    r"|reduce the length of the messages|request too large for model"
    r"|exceeds the maximum number of tokens",
    re.IGNORECASE,
)
_TRANSIENT = re.compile(
    r"\b429\b|rate[ _-]?limit|too many requests|overloaded|\b5(?:00|02|03|04|29)\b"
    r"|internal server error"
    r"|bad gateway|service unavailable|gateway timeout|timed? ?out|timeout"
    r"|connection (reset|refused|aborted|closed|error)|ECONNRESET|socket hang up"
    r"|temporarily unavailable|try again",
    re.IGNORECASE,
)


def classify_error(message: str) -> ErrorClass:
    if not message.strip():
        return ErrorClass.NONE
    if _OVERFLOW.search(message):
        return ErrorClass.OVERFLOW
    if _TRANSIENT.search(message):
        return ErrorClass.TRANSIENT
    return ErrorClass.FATAL


@dataclass(frozen=True, slots=True)
class Recovery:
    action: RecoveryAction
    retry_after_seconds: float
    reason: str


def decide_recovery(
    error_message: str, consecutive_failures: int, max_retries: int = DEFAULT_MAX_RETRIES
) -> Recovery:
    """What to do after a failure described by ``error_message`` (see ``decide``)."""
    return decide(classify_error(error_message), error_message, consecutive_failures, max_retries)


def decide(
    kind: ErrorClass,
    error_message: str,
    consecutive_failures: int,
    max_retries: int = DEFAULT_MAX_RETRIES,
    retry_after_seconds: float | None = None,
) -> Recovery:
    """What to do after a failure of class ``kind``.

    ``consecutive_failures`` counts this failure too (1 for the first one).
    Transient failures back off exponentially (2 s, 4 s, 8 s, ...), or wait what
    the provider asked for (``retry_after_seconds``), until ``max_retries``
    retries were spent, then fail.
    """
    if kind is ErrorClass.NONE:
        return Recovery(RecoveryAction.UNSPECIFIED, 0.0, "no error to classify")
    if kind is ErrorClass.OVERFLOW:
        return Recovery(
            RecoveryAction.COMPACT_AND_RETRY, 0.0, "context overflow: compact, then retry"
        )
    if kind is ErrorClass.FATAL:
        return Recovery(RecoveryAction.FAIL, 0.0, "not retryable: " + error_message[:200])
    attempt = max(consecutive_failures, 1)
    if attempt > max_retries:
        return Recovery(
            RecoveryAction.FAIL,
            0.0,
            f"transient error persisted after {max_retries} retries: {error_message[:200]}",
        )
    delay = min(RETRY_BASE_SECONDS * 2 ** (attempt - 1), RETRY_CAP_SECONDS)
    if retry_after_seconds is not None:
        delay = retry_after_seconds
    return Recovery(
        RecoveryAction.RETRY,
        delay,
        f"transient error (retry {attempt} of {max_retries}): {error_message[:200]}",
    )
