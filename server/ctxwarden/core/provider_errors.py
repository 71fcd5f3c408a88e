"""Classifying a model provider's raw error (HTTP status, body, headers).

An agent that hands RollbackTurn the provider's own error gets a decision made
from what the provider said rather than from a message it paraphrased: the
error codes of each API (OpenAI ``context_length_exceeded``, Anthropic
``overloaded_error``/529, Gemini ``RESOURCE_EXHAUSTED``, ...) and the retry
delay the provider asked for (``retry-after``, ``retry-after-ms``,
``x-ratelimit-reset-*``, ``anthropic-ratelimit-*-reset``, Gemini's RetryInfo).
Pure: the current time comes in as an argument.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from email.utils import parsedate_to_datetime

from ctxwarden.core.recovery import ErrorClass, classify_error

MAX_RETRY_AFTER_SECONDS = 3600.0
"""A provider's delay is taken as given up to this (an hour); longer is capped."""


@dataclass(frozen=True, slots=True)
class ProviderError:
    http_status: int = 0
    body: str = ""
    headers: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Classified:
    kind: ErrorClass
    code: str
    """The provider's own name for it, e.g. ``context_length_exceeded`` or ``http 529``."""
    message: str
    """The provider's error message (or the body), for the reason text."""
    retry_after_seconds: float | None
    """The delay the provider asked for, if it said."""


_OVERFLOW_CODES = frozenset({"context_length_exceeded", "string_above_max_length"})
_TRANSIENT_CODES = frozenset(
    {
        "rate_limit_exceeded",
        "rate_limit_error",
        "overloaded_error",
        "api_error",
        "server_error",
        "timeout_error",
        "resource_exhausted",
        "unavailable",
        "deadline_exceeded",
        "internal",
        "aborted",
    }
)
_FATAL_CODES = frozenset(
    {
        "insufficient_quota",
        "invalid_api_key",
        "authentication_error",
        "permission_error",
        "permission_denied",
        "unauthenticated",
        "not_found_error",
        "model_not_found",
        "billing_error",
    }
)
_TRANSIENT_STATUSES = frozenset({408, 409, 425, 429, 500, 502, 503, 504, 529})


def classify_provider_error(error: ProviderError, now_unix: float) -> Classified:
    """What kind of failure ``error`` is, by the provider's code first, then the
    HTTP status, then the words of its message."""
    payload = _error_object(error.body)
    codes = _codes(payload)
    message = _message(payload) or error.body.strip()[:500]
    delay = retry_after(error.headers, now_unix)
    if delay is None:
        delay = _retry_info_delay(payload)
    kind = _kind(codes, error.http_status, message)
    code = next(iter(codes), "") or (f"http {error.http_status}" if error.http_status else "")
    return Classified(kind, code, message, delay)


def _kind(codes: list[str], status: int, message: str) -> ErrorClass:
    if classify_error(message) is ErrorClass.OVERFLOW or any(c in _OVERFLOW_CODES for c in codes):
        return ErrorClass.OVERFLOW
    if any(c in _FATAL_CODES for c in codes):
        return ErrorClass.FATAL
    if any(c in _TRANSIENT_CODES for c in codes) or status in _TRANSIENT_STATUSES:
        return ErrorClass.TRANSIENT
    if status >= 500:
        return ErrorClass.TRANSIENT
    if 400 <= status < 500:
        return ErrorClass.FATAL
    return classify_error(message) if message else ErrorClass.NONE


def _error_object(body: str) -> dict[str, object]:
    """The ``error`` object of an OpenAI/Anthropic/Gemini error body ({} if none)."""
    try:
        value = json.loads(body) if body.strip() else None
    except ValueError:
        return {}
    if isinstance(value, list) and value and isinstance(value[0], dict):
        value = value[0]  # Gemini's REST errors sometimes come as a one-element array
    if not isinstance(value, dict):
        return {}
    inner = value.get("error")
    return inner if isinstance(inner, dict) else value


def _codes(payload: Mapping[str, object]) -> list[str]:
    """The provider's codes, lower case: OpenAI ``code``/``type``, Anthropic
    ``type``, Gemini ``status``."""
    out = []
    for key in ("code", "type", "status"):
        value = payload.get(key)
        if isinstance(value, str) and value:
            out.append(value.lower())
    return out


def _message(payload: Mapping[str, object]) -> str:
    value = payload.get("message")
    return value.strip()[:500] if isinstance(value, str) else ""


_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|h|m|s)")
_UNIT = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def _duration(text: str) -> float | None:
    """``1s``, ``6m0s``, ``20ms``, ``1.5s`` (OpenAI's reset headers, Gemini's retryDelay)."""
    text = text.strip()
    parts = _DURATION.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        return None
    return sum(float(n) * _UNIT[u] for n, u in parts)


def retry_after(headers: Mapping[str, str], now_unix: float) -> float | None:
    """The delay asked for in the headers (the longest of the ones given)."""
    h = {k.lower(): v.strip() for k, v in headers.items()}
    found: list[float] = []
    millis = _number(h.get("retry-after-ms", ""))
    if millis is not None:
        found.append(millis / 1000)
    seconds = _retry_after_value(h["retry-after"], now_unix) if "retry-after" in h else None
    if seconds is not None:
        found.append(seconds)
    if not found:
        for name in ("x-ratelimit-reset-requests", "x-ratelimit-reset-tokens"):
            if name in h and (d := _duration(h[name])) is not None:
                found.append(d)
        for name, value in h.items():
            if name.startswith("anthropic-ratelimit-") and name.endswith("-reset"):
                when = _timestamp(value)
                if when is not None:
                    found.append(when - now_unix)
    if not found:
        return None
    return min(max(max(found), 0.0), MAX_RETRY_AFTER_SECONDS)


def _retry_after_value(text: str, now_unix: float) -> float | None:
    """``retry-after``: seconds, or an HTTP date."""
    seconds = _number(text)
    return seconds if seconds is not None else _http_date(text, now_unix)


def _number(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return value if value >= 0 else None


def _http_date(text: str, now_unix: float) -> float | None:
    try:
        when = parsedate_to_datetime(text)
    except (TypeError, ValueError):
        return None
    return when.timestamp() - now_unix


def _timestamp(text: str) -> float | None:
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def _retry_info_delay(payload: Mapping[str, object]) -> float | None:
    """Gemini: ``details: [{"@type": ".../google.rpc.RetryInfo", "retryDelay": "30s"}]``."""
    details = payload.get("details")
    if not isinstance(details, list):
        return None
    for d in details:
        if isinstance(d, dict) and str(d.get("@type", "")).endswith("RetryInfo"):
            delay = d.get("retryDelay")
            if isinstance(delay, str) and (seconds := _duration(delay)) is not None:
                return min(seconds, MAX_RETRY_AFTER_SECONDS)
    return None
