"""CountTokens: what a model would count for messages, tools and text (no session)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from ctxwarden.core.context import counting_profile, tools_text
from ctxwarden.core.messages import Message
from ctxwarden.core.models import lookup_model
from ctxwarden.core.session import ToolDefinition
from ctxwarden.core.tokens import count_text
from ctxwarden.service.results import TokenCount
from ctxwarden.service.runtime import SessionRuntime
from ctxwarden.service.tokenizer_access import check_client_tokenizer, tokenizer_for


class TokenCounts:
    def __init__(self, runtime: SessionRuntime) -> None:
        self.runtime = runtime

    async def count_tokens(
        self,
        model: str,
        tokenizer_spec: str,
        messages: Sequence[Message],
        tools: Sequence[ToolDefinition],
        text: str,
    ) -> TokenCount:
        """What ``model`` (or ``tokenizer_spec``) counts for the messages, tools and text."""
        info = lookup_model(model)
        check_client_tokenizer(tokenizer_spec, self.runtime.settings.hf_tokenizer_dirs, "tokenizer")
        tokenizer = await tokenizer_for(tokenizer_spec or info.tokenizer)
        profile = counting_profile(model, tokenizer)

        def count() -> tuple[list[int], int, int]:
            # A history-only message is never sent to a model: it costs nothing.
            per = [0 if m.history_only else profile.message(m) for m in messages]
            return per, count_text(tools_text(tools), tokenizer), count_text(text, tokenizer)

        per, tools_tokens, text_tokens = await asyncio.to_thread(count)
        total = (
            sum(per)
            + tools_tokens
            + text_tokens
            + (profile.reply if any(not m.history_only for m in messages) else 0)
        )
        exact = tokenizer.exact and info.known
        return TokenCount(total, per, tokenizer.spec, exact, tools_tokens, text_tokens)
