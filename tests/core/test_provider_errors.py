"""Provider errors in, decisions out: every row of the docs' table, tested."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pytest

from ctxwarden.core.provider_errors import ProviderError, classify_provider_error, retry_after
from ctxwarden.core.recovery import RecoveryAction, decide

NOW = 1_800_000_000.0
PAGE = Path(__file__).resolve().parents[2] / "docs" / "concepts" / "failures.md"


@dataclass(frozen=True)
class Case:
    provider: str
    status: int
    code: str
    """As the docs show it: the provider's error code/type/status."""
    message: str
    headers: dict[str, str]
    action: RecoveryAction
    delay: float
    """The retry delay the first failure gets (2.0 is the default backoff)."""

    def body(self) -> str:
        if self.provider == "OpenAI":
            error = {"message": self.message, "type": "invalid_request_error", "code": self.code}
            if self.code in ("rate_limit_exceeded", "insufficient_quota", "server_error"):
                error["type"] = self.code
            return json.dumps({"error": error})
        if self.provider == "Anthropic":
            return json.dumps(
                {"type": "error", "error": {"type": self.code, "message": self.message}}
            )
        if self.provider == "Gemini":
            status: dict[str, object] = {
                "code": self.status,
                "message": self.message,
                "status": self.code,
            }
            if "retryDelay" in self.headers:
                status["details"] = [
                    {
                        "@type": "type.googleapis.com/google.rpc.RetryInfo",
                        "retryDelay": self.headers["retryDelay"],
                    }
                ]
            return json.dumps({"error": status})
        return self.message

    def header_map(self) -> dict[str, str]:
        return {k: v for k, v in self.headers.items() if k != "retryDelay"}


def _at(seconds: float) -> str:
    return datetime.fromtimestamp(NOW + seconds, UTC).isoformat().replace("+00:00", "Z")


RETRY, COMPACT, FAIL = RecoveryAction.RETRY, RecoveryAction.COMPACT_AND_RETRY, RecoveryAction.FAIL
CASES = [
    Case(
        "OpenAI",
        400,
        "context_length_exceeded",
        "This model's maximum context length is 128000 tokens.",
        {},
        COMPACT,
        0,
    ),
    Case(
        "OpenAI",
        429,
        "rate_limit_exceeded",
        "Rate limit reached for gpt-4o.",
        {"retry-after": "20"},
        RETRY,
        20,
    ),
    Case(
        "OpenAI",
        429,
        "rate_limit_exceeded",
        "Rate limit reached for gpt-4o.",
        {"x-ratelimit-reset-tokens": "1.5s"},
        RETRY,
        1.5,
    ),
    Case("OpenAI", 429, "insufficient_quota", "You exceeded your current quota.", {}, FAIL, 0),
    Case("OpenAI", 401, "invalid_api_key", "Incorrect API key provided.", {}, FAIL, 0),
    Case(
        "OpenAI",
        500,
        "server_error",
        "The server had an error.",
        {"retry-after-ms": "750"},
        RETRY,
        0.75,
    ),
    Case("Anthropic", 529, "overloaded_error", "Overloaded", {}, RETRY, 2),
    Case(
        "Anthropic",
        429,
        "rate_limit_error",
        "Number of request tokens has exceeded your rate limit.",
        {"anthropic-ratelimit-tokens-reset": "+30"},
        RETRY,
        30,
    ),
    Case("Anthropic", 429, "rate_limit_error", "Rate limited.", {"retry-after": "12"}, RETRY, 12),
    Case(
        "Anthropic",
        400,
        "invalid_request_error",
        "prompt is too long: 210000 tokens > 200000 maximum",
        {},
        COMPACT,
        0,
    ),
    Case("Anthropic", 401, "authentication_error", "invalid x-api-key", {}, FAIL, 0),
    Case(
        "Gemini",
        429,
        "RESOURCE_EXHAUSTED",
        "Resource has been exhausted (e.g. check quota).",
        {"retryDelay": "30s"},
        RETRY,
        30,
    ),
    Case(
        "Gemini",
        400,
        "INVALID_ARGUMENT",
        "The input token count (1200000) exceeds the maximum number of tokens allowed (1048576).",
        {},
        COMPACT,
        0,
    ),
    Case(
        "Gemini",
        503,
        "UNAVAILABLE",
        "The model is overloaded. Please try again later.",
        {},
        RETRY,
        2,
    ),
    Case("Gemini", 403, "PERMISSION_DENIED", "Permission denied on resource project.", {}, FAIL, 0),
    Case("any", 0, "", "connection reset by peer", {}, RETRY, 2),
]


def _resolve(case: Case) -> ProviderError:
    headers = {
        k: (_at(float(v[1:])) if v.startswith("+") else v) for k, v in case.header_map().items()
    }
    return ProviderError(case.status, case.body(), headers)


@pytest.mark.parametrize(
    "case", CASES, ids=[f"{c.provider}-{c.status}-{c.code or 'text'}" for c in CASES]
)
def test_each_classification(case: Case) -> None:
    seen = classify_provider_error(_resolve(case), NOW)
    recovery = decide(seen.kind, seen.message, 1, 3, seen.retry_after_seconds)
    assert recovery.action is case.action, (seen, recovery)
    assert recovery.retry_after_seconds == pytest.approx(case.delay, abs=0.01)
    if case.code:
        assert seen.code == case.code.lower()
    assert case.message[:40] in seen.message


def test_the_docs_table_lists_exactly_these_cases() -> None:
    text = PAGE.read_text()
    section = text[text.index("## Provider errors") :]
    end = section.find("\n#", 1)
    section = section if end < 0 else section[:end]
    rows = re.findall(
        r"^\| (OpenAI|Anthropic|Gemini|any) \| (\d+) \| ?`?(\w*)`? ?\|", section, re.M
    )
    assert sorted(rows) == sorted((c.provider, str(c.status), c.code) for c in CASES)


def test_retry_after_forms() -> None:
    assert retry_after({"Retry-After": "7"}, NOW) == 7
    assert retry_after({"retry-after": "0"}, NOW) == 0  # "now", not "not said"
    assert retry_after({"retry-after-ms": "250"}, NOW) == 0.25
    assert retry_after({"x-ratelimit-reset-requests": "6m0s"}, NOW) == 360
    assert retry_after({"x-ratelimit-reset-requests": "20ms"}, NOW) == pytest.approx(0.02)
    assert retry_after({"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"}, NOW) == 0  # in the past
    assert retry_after({"retry-after": "99999"}, NOW) == 3600  # capped
    assert retry_after({"x-ratelimit-reset-tokens": "soon"}, NOW) is None
    assert retry_after({}, NOW) is None


def test_repeated_transient_failures_still_give_up() -> None:
    case = CASES[1]
    seen = classify_provider_error(_resolve(case), NOW)
    assert decide(seen.kind, seen.message, 4, 3, seen.retry_after_seconds).action is FAIL
