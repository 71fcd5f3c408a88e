"""A fake provider with a context window, as real models have one: a request
whose prompt plus its output limit exceeds the window gets the provider's own
"context length exceeded" 400, and every reply is made from its request (so a
test can follow the running summary from one chunk to the next).
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ctxwarden.tokenizers import load_tokenizer
from tests.summarizers.fake_providers import FakeProvider, Kind, _Failure

FRAMING_TOKENS = 4
"""Charged per chat message, as OpenAI's chat format does (about 3-4 tokens)."""

_LAST_TAG = re.compile(r"<(m\d+)>")


@dataclass(frozen=True)
class Answered:
    """One request the fake answered: its prompt and its reply."""

    system: str
    user: str
    max_tokens: int
    prompt_tokens: int
    reply: str


def last_tag(text: str) -> str:
    """The last ``<mNNN>`` message tag in ``text`` ("" if none)."""
    tags = _LAST_TAG.findall(text)
    return tags[-1] if tags else ""


def default_reply(user: str, n: int) -> str:
    """A summary naming its request number and the last message it saw."""
    return f"## Goal\nsummary {n} through {last_tag(user) or 'nothing'}"


class WindowedProvider(FakeProvider):
    def __init__(
        self,
        kind: Kind,
        *,
        context_window: int,
        tokenizer: str = "tiktoken:o200k_base",
        reply: Callable[[str, int], str] = default_reply,
    ) -> None:
        super().__init__(kind)
        self.context_window = context_window
        self.count = load_tokenizer(tokenizer).count
        self.reply = reply
        self.answered: list[Answered] = []
        self.rejected: list[int] = []
        """Prompt tokens of the requests refused as too long."""
        self._answer_lock = threading.Lock()

    def _prompt(self, body: Any) -> tuple[str, str, int, int]:
        if self.kind == "openai":
            messages = body.get("messages") or []
            system = next((m["content"] for m in messages if m.get("role") == "system"), "")
            user = next((m["content"] for m in messages if m.get("role") == "user"), "")
            limit = body.get("max_tokens") or body.get("max_completion_tokens") or 0
        else:
            system = str(body.get("system", ""))
            user = str((body.get("messages") or [{}])[0].get("content", ""))
            limit = body.get("max_tokens") or 0
        framing = FRAMING_TOKENS * (2 if system else 1)
        return system, user, int(limit), self.count(system) + self.count(user) + framing

    def _answer(self, body: Any) -> tuple[str, int, int] | None:
        """(reply, prompt tokens, limit), or None when the request is too long."""
        system, user, limit, prompt = self._prompt(body)
        if prompt + limit > self.context_window:
            with self._answer_lock:
                self.rejected.append(prompt)
            return None
        with self._answer_lock:
            text = self.reply(user, len(self.answered) + 1)
            self.answered.append(Answered(system, user, limit, prompt, text))
        return text, prompt, limit

    def _openai(
        self,
        method: str,
        path: str,
        headers: dict[str, str],
        body: Any,
        failure: _Failure | None,
    ) -> tuple[int, dict[str, str], Any]:
        status, extra, reply = super()._openai(method, path, headers, body, failure)
        if status != 200:
            return status, extra, reply
        answer = self._answer(body)
        if answer is None:
            _, _, limit, prompt = self._prompt(body)
            return self._openai_error(
                400,
                f"This model's maximum context length is {self.context_window} tokens. "
                f"However, you requested {prompt + limit} tokens ({prompt} in the messages, "
                f"{limit} in the completion). Please reduce the length of the messages or "
                "completion.",
                param="messages",
                code="context_length_exceeded",
            )
        text, prompt, _ = answer
        reply["choices"][0]["message"]["content"] = text
        reply["usage"]["prompt_tokens"] = prompt
        return status, extra, reply

    def _anthropic(
        self,
        method: str,
        path: str,
        headers: dict[str, str],
        body: Any,
        failure: _Failure | None,
    ) -> tuple[int, dict[str, str], Any]:
        status, extra, reply = super()._anthropic(method, path, headers, body, failure)
        if status != 200:
            return status, extra, reply
        answer = self._answer(body)
        if answer is None:
            _, _, limit, prompt = self._prompt(body)
            return self._anthropic_error(
                400, f"prompt is too long: {prompt + limit} tokens > {self.context_window} maximum"
            )
        text, prompt, _ = answer
        reply["content"] = [{"type": "text", "text": text}]
        reply["usage"]["input_tokens"] = prompt
        return status, extra, reply
