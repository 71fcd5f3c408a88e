"""SessionManager: every RPC's use case, wired over one session runtime.

Each use case lives in its own module (sessions, messages, model_input,
rollback, compaction, tokens, tool_output) and works through the runtime (hot
sessions, restore, version checks, the database timeout and error map,
idempotency records); this class only puts them together, one attribute per RPC.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from ctxwarden.config import Settings
from ctxwarden.core.compaction.types import Summarizer
from ctxwarden.observability.metrics import ServiceMetrics
from ctxwarden.service.append_run import AppendRuns
from ctxwarden.service.background_compaction import BackgroundCompactions
from ctxwarden.service.forks import Forks
from ctxwarden.service.layered import LayeredCompactor
from ctxwarden.service.lifecycle import Lifecycle
from ctxwarden.service.memories import Memories
from ctxwarden.service.messages import Messages
from ctxwarden.service.model_input import ModelInputs
from ctxwarden.service.model_output import ModelOutputs
from ctxwarden.service.pages import MessageFilter, message_page_token
from ctxwarden.service.results import AppendResult, IdempotencyKey, RollbackResult
from ctxwarden.service.rollback import Rollbacks
from ctxwarden.service.runtime import SessionRuntime
from ctxwarden.service.sessions import Sessions
from ctxwarden.service.tokens import TokenCounts
from ctxwarden.service.tool_output import ToolOutputs
from ctxwarden.service.usage import UsageReports, load_price_table
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
        self.compactor = LayeredCompactor(runtime, summarizer)
        self.background = BackgroundCompactions(runtime, self.compactor)
        runtime.on_growth(self.background.offer)
        sessions = Sessions(runtime)
        messages = Messages(runtime)
        self.create_session = sessions.create_session
        self.get_session = runtime.get_session
        self.get_session_with_state = sessions.get_session_with_state
        self.list_sessions = sessions.list_sessions
        self.update_session = sessions.update_session
        self.delete_session = sessions.delete_session
        self.fork_session = Forks(runtime).fork_session
        self.append = messages.append
        self.append_run = AppendRuns(runtime).append_run
        self.list_messages = messages.list_messages
        self.append_model_output = ModelOutputs(runtime, messages).append_model_output
        self.model_inputs = ModelInputs(runtime, self.compactor, self.background.wait_running)
        self.build_model_input = self.model_inputs.build_model_input
        self.rollback = Rollbacks(runtime).rollback
        self.count_tokens = TokenCounts(runtime).count_tokens
        self.get_tool_output = ToolOutputs(runtime).get_tool_output
        self.compact = self.compactor.compact
        self.prepare_compaction = self.compactor.prepare
        self.commit_compaction = self.compactor.commit
        self.list_compactions = self.compactor.list
        lifecycle = Lifecycle(runtime)
        self.archive_session = lifecycle.archive_session
        self.unarchive_session = lifecycle.unarchive_session
        self.memories = Memories(runtime)
        prices = load_price_table(settings.price_table_file) if settings.price_table_file else None
        self.usage = UsageReports(runtime, prices)

    @property
    def restores(self) -> int:
        """Sessions restored from the database since start (for metrics and tests)."""
        return self.runtime.restores

    # -- lifecycle --------------------------------------------------------------

    def start(self) -> None:
        """Start the background work (in the event loop that serves)."""
        self.background.start()

    async def close(self, grace_seconds: float = 0.0) -> None:
        """Stop the background work (in-flight compactions get ``grace_seconds``
        to commit), then close the store."""
        await self.background.close(grace_seconds)
        await self.store.close()


__all__ = [
    "AppendResult",
    "IdempotencyKey",
    "MessageFilter",
    "RollbackResult",
    "SessionManager",
    "message_page_token",
]
