"""The HTTP plumbing shared by the LLM summarisers: one JSON POST with retries.

Retried: HTTP 408, 409, 429 and every 5xx (Anthropic's 529 "overloaded"
included), connection errors and timeouts. Each retry waits for the
provider's ``Retry-After`` (or ``retry-after-ms``) when it sent one, else
for an exponential backoff with a little jitter. Any other 4xx fails at
once with ``retryable=False`` and the provider's own error message; running
out of retries fails with ``retryable=True`` so the caller may try later.
"""

from __future__ import annotations

import asyncio
import email.utils
import functools
import ipaddress
import json
import logging
import math
import random
import ssl
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar
from urllib.parse import urlsplit

import httpx

from ctxwarden.core.compaction.types import SummarizerError

log = logging.getLogger(__name__)

RETRYABLE_STATUSES = frozenset({408, 409, 429})
"""Besides every 5xx. 408/409 are retried as the official SDKs do."""

ERROR_TEXT_LIMIT = 1000


class ProviderError(SummarizerError):
    """A summariser call failed; ``status`` is the last HTTP status, if any."""

    def __init__(
        self,
        message: str,
        *,
        retryable: bool,
        status: int | None = None,
        provider_message: str = "",
        body: Any = None,
    ) -> None:
        super().__init__(message, retryable=retryable)
        self.status = status
        self.provider_message = provider_message
        self.body = body
        """The decoded JSON error body, when there was one."""


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    max_retries: int = 3
    """Retries after the first attempt (so ``max_retries + 1`` attempts in all)."""
    backoff_base: float = 0.5
    """Seconds before the first retry; doubled for each further one."""
    backoff_max: float = 20.0
    max_retry_after: float = 60.0
    """Longest ``Retry-After`` honoured; a longer one is shortened to this."""

    def backoff(self, retry: int) -> float:
        """Seconds to wait before retry number ``retry`` (0-based) without a hint."""
        delay = min(self.backoff_max, self.backoff_base * (2.0**retry))
        return delay * (1.0 - 0.25 * random.random())


Sleep = Callable[[float], Awaitable[None]]


def normalize_base_url(base_url: str) -> str:
    url = base_url.strip().rstrip("/")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError(f"summarizer base URL must be an http(s) URL, got {base_url!r}")
    return url


def is_loopback_url(base_url: str) -> bool:
    """True for http(s) URLs on this machine: localhost, 127.0.0.0/8, ::1."""
    host = (urlsplit(base_url.strip()).hostname or "").lower()
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def retry_after_seconds(headers: httpx.Headers, *, now: float | None = None) -> float | None:
    """The provider's wait hint: ``retry-after-ms``, else ``Retry-After`` in
    seconds or as an HTTP date. None when absent or unreadable."""
    ms = headers.get("retry-after-ms")
    if ms is not None:
        try:
            value = float(ms) / 1000.0
        except ValueError:
            value = math.nan
        if math.isfinite(value):
            return max(value, 0.0)
    raw = headers.get("retry-after")
    if raw is None:
        return None
    raw = raw.strip()
    try:
        value = float(raw)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(raw)
        except (TypeError, ValueError, IndexError):
            return None
        current = time.time() if now is None else now
        return max(when.timestamp() - current, 0.0)
    return max(value, 0.0) if math.isfinite(value) else None


def _clip(text: str, limit: int = ERROR_TEXT_LIMIT) -> str:
    text = text.strip()
    return text if len(text) <= limit else text[:limit] + "..."


def error_message_of(body: Any, fallback: str) -> str:
    """The human-readable message in a provider's error body.

    Understands OpenAI's ``{"error": {"message": ...}}``, Anthropic's
    ``{"type": "error", "error": {"type": ..., "message": ...}}``, the
    ``{"error": "text"}``, ``{"message": ...}`` and ``{"detail": ...}``
    shapes of OpenAI-compatible servers (vLLM, Ollama, llama.cpp, proxies).
    """
    if isinstance(body, dict):
        error = body.get("error")
        if isinstance(error, dict):
            message = error.get("message")
            kind = error.get("type")
            if isinstance(message, str) and message:
                if isinstance(kind, str) and kind and kind not in message:
                    return _clip(f"{kind}: {message}")
                return _clip(message)
        if isinstance(error, str) and error:
            return _clip(error)
        for key in ("message", "detail"):
            value = body.get(key)
            if isinstance(value, str) and value:
                return _clip(value)
            if value:
                return _clip(json.dumps(value, ensure_ascii=False))
    return _clip(fallback) or "(empty response body)"


@functools.cache
def _ssl_context() -> ssl.SSLContext:
    """httpx's default verifying context, built once (it costs tens of ms)."""
    return httpx.create_ssl_context()


def _parse_json(response: httpx.Response) -> Any:
    try:
        return response.json()
    except ValueError:
        return None


async def post_json(
    *,
    label: str,
    url: str,
    headers: Mapping[str, str],
    body: Mapping[str, Any],
    attempt_timeout: float,
    policy: RetryPolicy,
    client: httpx.AsyncClient | None = None,
    sleep: Sleep = asyncio.sleep,
) -> dict[str, Any]:
    """POST ``body`` as JSON and return the decoded JSON object of a 2xx reply.

    ``label`` (e.g. "openai:gpt-4o-mini") starts every error message. Each
    attempt is abandoned after ``attempt_timeout`` seconds. ``client`` is used as is
    and not closed; without one a client is opened for this call only.
    """
    post = _Post(label, url, headers, body, attempt_timeout)
    if client is not None:
        return await post.with_retries(policy, client, sleep)
    async with httpx.AsyncClient(
        timeout=httpx.Timeout(attempt_timeout), verify=_ssl_context()
    ) as owned:
        return await post.with_retries(policy, owned, sleep)


@dataclass(frozen=True, slots=True)
class _Failure:
    """A failed attempt that may be retried."""

    description: str
    status: int | None = None
    message: str = ""
    retry_after: float | None = None


@dataclass(frozen=True, slots=True)
class _Post:
    """One request, as ``post_json`` was asked for it."""

    label: str
    url: str
    headers: Mapping[str, str]
    body: Mapping[str, Any]
    attempt_timeout: float

    async def attempt(self, client: httpx.AsyncClient) -> dict[str, Any] | _Failure:
        """One POST: the JSON answer, a retryable failure, or ProviderError (for good)."""
        label, timeout = self.label, self.attempt_timeout
        try:
            async with asyncio.timeout(timeout):
                response = await client.post(
                    self.url, json=dict(self.body), headers=dict(self.headers), timeout=timeout
                )
        except (TimeoutError, httpx.TimeoutException):
            return _Failure(f"no response within {timeout:g}s")
        except httpx.TransportError as exc:
            return _Failure(f"connection error: {type(exc).__name__}: {exc}".rstrip(": "))
        status = response.status_code
        parsed = _parse_json(response)
        if 200 <= status < 300:
            if isinstance(parsed, dict):
                return parsed
            raise ProviderError(
                f"{label}: HTTP {status} with a body that is not a JSON object: "
                f"{_clip(response.text, 200)!r}",
                retryable=True,
                status=status,
            )
        message = error_message_of(parsed, response.text)
        if status not in RETRYABLE_STATUSES and status < 500:
            raise ProviderError(
                f"{label}: HTTP {status}: {message}",
                retryable=False,
                status=status,
                provider_message=message,
                body=parsed,
            )
        return _Failure(
            f"HTTP {status}: {message}", status, message, retry_after_seconds(response.headers)
        )

    async def with_retries(
        self, policy: RetryPolicy, client: httpx.AsyncClient, sleep: Sleep
    ) -> dict[str, Any]:
        attempts = max(policy.max_retries, 0) + 1
        failure = _Failure("no attempt made")
        for attempt in range(attempts):
            result = await self.attempt(client)
            if not isinstance(result, _Failure):
                return result
            failure = result
            if attempt + 1 >= attempts:
                break
            hint = failure.retry_after
            delay = policy.backoff(attempt) if hint is None else min(hint, policy.max_retry_after)
            log.warning(
                "%s: attempt %d of %d failed (%s); retrying in %.2fs",
                self.label,
                attempt + 1,
                attempts,
                failure.description,
                delay,
            )
            await sleep(delay)
        raise ProviderError(
            f"{self.label}: gave up after {attempts} attempt{'s' if attempts != 1 else ''}: "
            f"{failure.description}",
            retryable=True,
            status=failure.status,
            provider_message=failure.message,
        )


class HttpSummarizer:
    """What the HTTP summarisers share: their settings, the properties the server
    reads, and one JSON POST with retries to the provider.

    A subclass names its provider (``kind``, the start of ``name``), its default
    base URL and endpoint path, and writes the request headers.
    """

    kind: ClassVar[str]
    default_base_url: ClassVar[str]
    path: ClassVar[str]
    """Appended to the base URL, e.g. "/chat/completions"."""

    def __init__(
        self,
        base_url: str = "",
        model: str = "",
        api_key: str = "",
        *,
        timeout: float = 60.0,
        max_retries: int = 3,
        max_output_tokens: int = 16384,
        http_client: httpx.AsyncClient | None = None,
        backoff_base: float = 0.5,
        backoff_max: float = 20.0,
        sleep: Sleep = asyncio.sleep,
    ) -> None:
        if not model:
            raise ValueError(f"{type(self).__name__} needs a model name")
        self._base_url = normalize_base_url(base_url or self.default_base_url)
        self._model = model
        self._api_key = api_key
        self._timeout = timeout
        self._max_output_tokens = max_output_tokens
        self._client = http_client
        self._policy = RetryPolicy(
            max_retries=max_retries, backoff_base=backoff_base, backoff_max=backoff_max
        )
        self._sleep = sleep

    @property
    def name(self) -> str:
        return f"{self.kind}:{self._model}"

    @property
    def model(self) -> str:
        return self._model

    @property
    def base_url(self) -> str:
        return self._base_url

    @property
    def max_output_tokens(self) -> int:
        return self._max_output_tokens

    def _headers(self) -> dict[str, str]:
        raise NotImplementedError

    def _output_limit(self, requested: int) -> int:
        """The output token limit to send: ``requested``, capped by ``max_output_tokens``."""
        limit = requested
        if self._max_output_tokens > 0:
            limit = min(limit, self._max_output_tokens)
        return max(limit, 1)

    async def _post(self, body: Mapping[str, Any]) -> dict[str, Any]:
        return await post_json(
            label=self.name,
            url=f"{self._base_url}{self.path}",
            headers=self._headers(),
            body=body,
            attempt_timeout=self._timeout,
            policy=self._policy,
            client=self._client,
            sleep=self._sleep,
        )

    def _provider_error(self, error: Any) -> SummarizerError:
        """The error for a reply that carries the provider's ``error`` instead of an answer."""
        detail = error.get("message") if isinstance(error, dict) else error
        return SummarizerError(f"{self.name}: provider error: {detail}", retryable=True)
