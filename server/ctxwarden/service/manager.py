"""SessionManager: every RPC's use case, wired over one session runtime.

Each use case lives in its own module (sessions, messages, model_input,
rollback, compaction) and works through the runtime (hot sessions, version
checks, the database timeout and error map, idempotency records); this class
only puts them together and answers the two small reads (CountTokens,
GetToolOutput) itself.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence

from ctxwarden.config import Settings
from ctxwarden.core.compaction.types import Summarizer
from ctxwarden.core.context import counting_profile, tools_text
from ctxwarden.core.errors import InvalidArgument, NotFound
from ctxwarden.core.messages import Message, Role
from ctxwarden.core.models import lookup_model
from ctxwarden.core.reasons import ErrorReason
from ctxwarden.core.session import ToolDefinition
from ctxwarden.core.tenancy import visible_id
from ctxwarden.core.tokens import count_text
from ctxwarden.observability.metrics import ServiceMetrics
from ctxwarden.service.compaction import Compactor
from ctxwarden.service.messages import Messages
from ctxwarden.service.model_input import ModelInputs
from ctxwarden.service.pages import message_page_token
from ctxwarden.service.results import AppendResult, IdempotencyKey, RollbackResult
from ctxwarden.service.rollback import Rollbacks
from ctxwarden.service.runtime import SessionRuntime
from ctxwarden.service.sessions import Sessions
from ctxwarden.service.tokenizer_access import check_client_tokenizer, tokenizer_for
from ctxwarden.store.repository import Store


class SessionManager:
    def __init__(
        self,
        store: Store,
        settings: Settings,
        summarizer: Summarizer | None = None,
        clock: Callable[[], float] = time.monotonic,
        metrics: ServiceMetrics | None = None,
    ) -> None:
        self.runtime = runtime = SessionRuntime(store, settings, clock, metrics)
        self.store = store
        self.settings = settings
        self.hot = runtime.hot
        self.compactor = Compactor(runtime, summarizer)
        sessions = Sessions(runtime)
        messages = Messages(runtime)
        self.create_session = sessions.create_session
        self.get_session = runtime.get_session
        self.list_sessions = sessions.list_sessions
        self.update_session = sessions.update_session
        self.delete_session = sessions.delete_session
        self.append = messages.append
        self.list_messages = messages.list_messages
        self.build_model_input = ModelInputs(runtime, self.compactor).build_model_input
        self.rollback = Rollbacks(runtime).rollback

    @property
    def restores(self) -> int:
        """Sessions restored from the database since start (for metrics and tests)."""
        return self.runtime.restores

    # -- token counting ---------------------------------------------------------

    async def count_tokens(
        self,
        model: str,
        tokenizer_spec: str,
        messages: Sequence[Message],
        tools: Sequence[ToolDefinition],
        text: str,
    ) -> tuple[int, list[int], str, bool, int, int]:
        """(total, per message, tokenizer spec, exact, tools, text) for a model."""
        info = lookup_model(model)
        check_client_tokenizer(tokenizer_spec, self.runtime.settings.hf_tokenizer_dirs, "tokenizer")
        tokenizer = await tokenizer_for(tokenizer_spec or info.tokenizer)
        profile = counting_profile(model, tokenizer)

        def count() -> tuple[list[int], int, int]:
            per = [profile.message(m) for m in messages]
            return per, count_text(tools_text(tools), tokenizer), count_text(text, tokenizer)

        per, tools_tokens, text_tokens = await asyncio.to_thread(count)
        total = sum(per) + tools_tokens + text_tokens + (profile.reply if messages else 0)
        return total, per, tokenizer.spec, tokenizer.exact and info.known, tools_tokens, text_tokens

    # -- tool output ------------------------------------------------------------

    async def get_tool_output(
        self, session_id: str, seq: int, offset: int, limit: int
    ) -> tuple[str, int, int, int]:
        """A byte range of a stored tool result: (content, total bytes, lines, next offset)."""
        if seq <= 0:
            raise InvalidArgument("seq must be > 0", reason=ErrorReason.INVALID_SEQ, field="seq")
        if offset < 0 or limit < 0:
            raise InvalidArgument(
                "offset and limit must be >= 0", reason=ErrorReason.INVALID_RANGE, field="offset"
            )
        limit = min(limit or 51200, 1024 * 1024)
        ctx = await self.runtime.context(session_id)
        message = next((m for m in ctx.active_messages if m.seq == seq), None)
        if message is None:
            message = await self.runtime.db(
                lambda: self.runtime.store.messages.get(session_id, seq)
            )
        if message is None:
            raise NotFound(
                f"session {visible_id(session_id)!r} has no message with seq {seq}",
                reason=ErrorReason.MESSAGE_NOT_FOUND,
            )
        if message.role is not Role.TOOL_RESULT:
            raise InvalidArgument(
                f"message seq {seq} is a {message.role.name.lower()} message, not a tool result",
                reason=ErrorReason.NOT_A_TOOL_RESULT,
                field="seq",
            )
        data = message.text.encode("utf-8")
        total = len(data)
        start = min(offset, total)
        while start < total and (data[start] & 0xC0) == 0x80:
            start += 1  # never start inside a character
        end = min(start + limit, total)
        while end < total and end > start and (data[end] & 0xC0) == 0x80:
            end -= 1  # never end inside one either
        chunk = data[start:end].decode("utf-8")
        lines = len(message.text.splitlines())
        return chunk, total, lines, (end if end < total else 0)

    # -- lifecycle --------------------------------------------------------------

    async def close(self) -> None:
        await self.store.close()


__all__ = [
    "AppendResult",
    "IdempotencyKey",
    "RollbackResult",
    "SessionManager",
    "message_page_token",
]
