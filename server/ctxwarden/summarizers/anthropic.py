"""Summaries from Anthropic's Messages API (``POST {base_url}/v1/messages``)."""

from __future__ import annotations

from typing import Any

from ctxwarden.core.compaction.types import SummarizerError, SummaryRequest
from ctxwarden.core.summarizer_usage import anthropic_usage, report_usage
from ctxwarden.summarizers._http import HttpSummarizer

DEFAULT_BASE_URL = "https://api.anthropic.com"
ANTHROPIC_VERSION = "2023-06-01"


class AnthropicMessagesSummarizer(HttpSummarizer):
    """One Messages API call: ``system`` plus one user message, no streaming.

    Retries 429, 5xx (529 "overloaded" included), connection errors and
    timeouts; see :mod:`ctxwarden.summarizers._http`.
    """

    kind = "anthropic"
    default_base_url = DEFAULT_BASE_URL
    path = "/v1/messages"

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
        body: dict[str, Any] = {
            "model": self._model,
            "max_tokens": self._output_limit(prompt.max_tokens),
        }
        if prompt.system:
            body["system"] = prompt.system
        body["messages"] = [{"role": "user", "content": prompt.user}]
        return body

    async def summarize(self, request: SummaryRequest) -> str:
        reply = await self._post(self._body(request))
        report_usage(anthropic_usage(reply))
        return self._text_of(reply)

    def _text_of(self, reply: dict[str, Any]) -> str:
        if reply.get("type") == "error":
            raise self._provider_error(reply.get("error"))
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
