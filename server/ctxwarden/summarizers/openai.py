"""Summaries from any OpenAI-compatible Chat Completions endpoint.

Works with OpenAI itself and with the servers that copy its API: vLLM,
Ollama (``http://localhost:11434/v1``), llama.cpp's ``llama-server``,
DeepSeek, LiteLLM and other proxies.

The output limit parameter: OpenAI deprecated ``max_tokens`` in favour of
``max_completion_tokens`` and rejects ``max_tokens`` for its reasoning
models (o-series, gpt-5), while DeepSeek, older vLLM/Ollama/llama.cpp
releases and many proxies only know ``max_tokens`` (and a server that does
not know a field may reject the request, so both are never sent together).
``token_parameter="auto"`` (the default) therefore sends
``max_completion_tokens`` to OpenAI's own hosts (``api.openai.com`` and
Azure's ``*.openai.azure.com``) and ``max_tokens`` everywhere else. When a
server answers HTTP 400 saying the parameter sent is unsupported, the
request is repeated once with the other one, and that choice is kept for
later calls. ``"max_tokens"`` or ``"max_completion_tokens"`` pins one.

No ``temperature`` is sent: reasoning models reject non-default values.
"""

from __future__ import annotations

import asyncio
import re
from typing import Any, Literal
from urllib.parse import urlsplit

import httpx

from ctxwarden.core.compaction.types import SummarizerError, SummaryRequest
from ctxwarden.core.summarizer_usage import openai_chat_usage, report_usage
from ctxwarden.summarizers._http import HttpSummarizer, ProviderError, Sleep

DEFAULT_BASE_URL = "https://api.openai.com/v1"

TokenParameter = Literal["auto", "max_tokens", "max_completion_tokens"]
_TOKEN_PARAMETERS = ("max_tokens", "max_completion_tokens")

_UNSUPPORTED_WORDS = ("unsupported", "not supported", "unrecognized", "unknown", "extra")
_THINK_PREFIX = re.compile(r"^\s*<think>.*?</think>\s*", re.DOTALL)


def _uses_completion_tokens(base_url: str) -> bool:
    host = (urlsplit(base_url).hostname or "").lower()
    return host == "api.openai.com" or host.endswith(".openai.azure.com")


def _rejects_parameter(error: ProviderError, parameter: str) -> bool:
    """True when a 400 says ``parameter`` itself is not accepted."""
    if error.status != 400:
        return False
    detail = error.body.get("error") if isinstance(error.body, dict) else None
    param = detail.get("param") if isinstance(detail, dict) else None
    if isinstance(param, str) and param and param != parameter:
        return False
    message = error.provider_message.lower()
    return parameter in message and any(word in message for word in _UNSUPPORTED_WORDS)


def _content_text(content: Any) -> str:
    """``message.content`` as text: a string, or a list of text parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts: list[str] = []
        for part in content:
            if isinstance(part, str):
                parts.append(part)
            elif isinstance(part, dict) and isinstance(part.get("text"), str):
                parts.append(part["text"])
        return "".join(parts)
    return ""


class OpenAIChatSummarizer(HttpSummarizer):
    """``POST {base_url}/chat/completions`` with a system and a user message."""

    kind = "openai"
    default_base_url = DEFAULT_BASE_URL
    path = "/chat/completions"

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key: str,
        *,
        timeout: float = 60.0,
        max_retries: int = 3,
        max_output_tokens: int = 16384,
        http_client: httpx.AsyncClient | None = None,
        token_parameter: TokenParameter = "auto",
        backoff_base: float = 0.5,
        backoff_max: float = 20.0,
        sleep: Sleep = asyncio.sleep,
    ) -> None:
        super().__init__(
            base_url,
            model,
            api_key,
            timeout=timeout,
            max_retries=max_retries,
            max_output_tokens=max_output_tokens,
            http_client=http_client,
            backoff_base=backoff_base,
            backoff_max=backoff_max,
            sleep=sleep,
        )
        if token_parameter not in ("auto", *_TOKEN_PARAMETERS):
            raise ValueError(f"unknown token_parameter {token_parameter!r}")
        if token_parameter == "auto":
            self._token_parameter = (
                "max_completion_tokens" if _uses_completion_tokens(self._base_url) else "max_tokens"
            )
            self._may_switch = True
        else:
            self._token_parameter = token_parameter
            self._may_switch = False

    @property
    def token_parameter(self) -> str:
        """The output limit field sent now: ``max_tokens`` or ``max_completion_tokens``."""
        return self._token_parameter

    def _headers(self) -> dict[str, str]:
        headers = {"content-type": "application/json", "accept": "application/json"}
        if self._api_key:
            headers["authorization"] = f"Bearer {self._api_key}"
        return headers

    def _body(self, request: SummaryRequest, token_parameter: str) -> dict[str, Any]:
        prompt = request.prompt
        messages: list[dict[str, str]] = []
        if prompt.system:
            messages.append({"role": "system", "content": prompt.system})
        messages.append({"role": "user", "content": prompt.user})
        limit = self._output_limit(prompt.max_tokens)
        return {"model": self._model, "messages": messages, token_parameter: limit}

    async def summarize(self, request: SummaryRequest) -> str:
        parameter = self._token_parameter
        try:
            reply = await self._post(self._body(request, parameter))
        except ProviderError as exc:
            if not (self._may_switch and _rejects_parameter(exc, parameter)):
                raise
            other = _TOKEN_PARAMETERS[1 - _TOKEN_PARAMETERS.index(parameter)]
            reply = await self._post(self._body(request, other))
            self._token_parameter = other
        report_usage(openai_chat_usage(reply))
        return self._text_of(reply)

    def _text_of(self, reply: dict[str, Any]) -> str:
        choices = reply.get("choices")
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            error = reply.get("error")
            if error:
                raise self._provider_error(error)
            raise SummarizerError(f"{self.name}: response has no choices", retryable=True)
        choice = choices[0]
        message = choice.get("message")
        content = _content_text(message.get("content") if isinstance(message, dict) else None)
        text = _THINK_PREFIX.sub("", content, count=1).strip()
        if not text:
            finish = choice.get("finish_reason")
            # An empty answer cut off by the limit (a reasoning model spent its
            # whole budget thinking) comes back the same when retried.
            raise SummarizerError(
                f"{self.name}: empty summary (finish_reason={finish!r})",
                retryable=finish != "length",
            )
        return text
