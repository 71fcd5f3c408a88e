"""Server-side summarisers and the factory that builds one from settings.

``kind`` selects the summariser:

- ``""`` or ``"none"``: no server-side summariser (agents summarise with
  their own LLM through PrepareCompaction/CommitCompaction);
- ``"openai"``: any OpenAI-compatible Chat Completions endpoint;
- ``"anthropic"``: Anthropic's Messages API;
- ``"extractive"``: no LLM at all (air-gapped use, tests).

The API key is read from the environment variable named by ``api_key_env``
(``OPENAI_API_KEY`` / ``ANTHROPIC_API_KEY`` when that is empty), never from
the settings themselves, so it does not end up in config files or logs.
"""

from __future__ import annotations

import os

from ctxwarden.core.compaction.extractive import ExtractiveSummarizer
from ctxwarden.core.compaction.types import Summarizer
from ctxwarden.summarizers._http import is_loopback_url
from ctxwarden.summarizers.anthropic import DEFAULT_BASE_URL as ANTHROPIC_BASE_URL
from ctxwarden.summarizers.anthropic import AnthropicMessagesSummarizer
from ctxwarden.summarizers.openai import DEFAULT_BASE_URL as OPENAI_BASE_URL
from ctxwarden.summarizers.openai import OpenAIChatSummarizer

__all__ = [
    "ANTHROPIC_BASE_URL",
    "DEFAULT_KEY_ENV",
    "KINDS",
    "OPENAI_BASE_URL",
    "AnthropicMessagesSummarizer",
    "ExtractiveSummarizer",
    "OpenAIChatSummarizer",
    "build_summarizer",
]

KINDS = ("", "none", "openai", "anthropic", "extractive")
DEFAULT_KEY_ENV = {"openai": "OPENAI_API_KEY", "anthropic": "ANTHROPIC_API_KEY"}


def _api_key(kind: str, api_key_env: str, base_url: str) -> str:
    env = api_key_env.strip() or DEFAULT_KEY_ENV[kind]
    key = os.environ.get(env, "").strip()
    if key:
        return key
    if kind == "openai" and is_loopback_url(base_url):
        return ""  # local servers (Ollama, vLLM, llama.cpp) usually need no key
    raise ValueError(
        f"the {kind} summarizer needs an API key in the environment variable {env}, "
        "which is not set (name another variable with the summarizer API key env setting)"
    )


def build_summarizer(
    kind: str,
    *,
    base_url: str,
    model: str,
    api_key_env: str,
    timeout: float,
    max_output_tokens: int,
) -> Summarizer | None:
    """The configured summariser, or None for ``""``/``"none"``.

    Raises ValueError for an unknown kind, a missing model, a malformed
    base URL or a missing API key (a key is optional only for ``openai``
    on a loopback address such as ``http://localhost:11434/v1``).
    """
    normalized = kind.strip().lower()
    if normalized in ("", "none"):
        return None
    if normalized == "extractive":
        if max_output_tokens > 0:
            return ExtractiveSummarizer(max_output_tokens=max_output_tokens)
        return ExtractiveSummarizer()
    if normalized not in DEFAULT_KEY_ENV:
        raise ValueError(
            f"unknown summarizer kind {kind!r}; expected one of: none, openai, anthropic, "
            "extractive"
        )
    if not model.strip():
        raise ValueError(f"the {normalized} summarizer needs a model name")
    if timeout <= 0:
        raise ValueError(f"summarizer timeout must be positive, got {timeout}")
    if normalized == "openai":
        url = base_url.strip() or OPENAI_BASE_URL
        return OpenAIChatSummarizer(
            url,
            model.strip(),
            _api_key(normalized, api_key_env, url),
            timeout=timeout,
            max_output_tokens=max_output_tokens,
        )
    url = base_url.strip() or ANTHROPIC_BASE_URL
    return AnthropicMessagesSummarizer(
        url,
        model.strip(),
        _api_key(normalized, api_key_env, url),
        timeout=timeout,
        max_output_tokens=max_output_tokens,
    )
