"""Summaries from Anthropic's Messages API (``POST {base_url}/v1/messages``)."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx

from ctxwarden.core.compaction.types import SummarizerError, SummaryRequest
from ctxwarden.summarizers._http import RetryPolicy, Sleep, normalize_base_url, post_json

DEFAULT_BASE_URL = "https://api.anthropic.com"
ANTHROPIC_VERSION = "2023-06-01"


class AnthropicMessagesSummarizer:
    """One Messages API call: ``system`` plus one user message, no streaming.

    Retries 429, 5xx (529 "overloaded" included), connection errors and
    timeouts; see :mod:`ctxwarden.summarizers._http`.
    """

    def __init__(
        self,
        base_url: str = DEFAULT_BASE_URL,
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
            raise ValueError("AnthropicMessagesSummarizer needs a model name")
        self._base_url = normalize_base_url(base_url or DEFAULT_BASE_URL)
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
        return f"anthropic:{self._model}"

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
        headers = {
            "anthropic-version": ANTHROPIC_VERSION,
            "content-type": "application/json",
            "accept": "application/json",
        }
        if self._api_key:
            headers["x-api-key"] = self._api_key
        return headers

    def _body(self, request: SummaryRequest) -> dict[str, Any]:
        prompt = request.prompt
        limit = prompt.max_tokens
        if self._max_output_tokens > 0:
            limit = min(limit, self._max_output_tokens)
        body: dict[str, Any] = {"model": self._model, "max_tokens": max(limit, 1)}
        if prompt.system:
            body["system"] = prompt.system
        body["messages"] = [{"role": "user", "content": prompt.user}]
        return body

    async def summarize(self, request: SummaryRequest) -> str:
        reply = await post_json(
            label=self.name,
            url=f"{self._base_url}/v1/messages",
            headers=self._headers(),
            body=self._body(request),
            attempt_timeout=self._timeout,
            policy=self._policy,
            client=self._client,
            sleep=self._sleep,
        )
        return self._text_of(reply)

    def _text_of(self, reply: dict[str, Any]) -> str:
        if reply.get("type") == "error":
            error = reply.get("error")
            detail = error.get("message") if isinstance(error, dict) else error
            raise SummarizerError(f"{self.name}: provider error: {detail}", retryable=True)
        content = reply.get("content")
        if not isinstance(content, list):
            raise SummarizerError(f"{self.name}: response has no content list", retryable=True)
        text = "".join(
            block["text"]
            for block in content
            if isinstance(block, dict)
            and block.get("type") == "text"
            and isinstance(block.get("text"), str)
        ).strip()
        if not text:
            stop = reply.get("stop_reason")
            # A refusal or an answer cut off before any text comes back the same.
            raise SummarizerError(
                f"{self.name}: empty summary (stop_reason={stop!r})",
                retryable=stop not in ("refusal", "max_tokens"),
            )
        return text
