"""LangChain: a chat message history and a LangChain 1.x agent middleware over ctxwarden.

    from ctxwarden_client import Client
    from ctxwarden_client.integrations.langchain import CtxwardenChatMessageHistory

    history = CtxwardenChatMessageHistory("thread-1", Client("127.0.0.1:50051"))
    history.add_messages([HumanMessage("hi"), AIMessage("hello")])
    history.messages  # the effective context: after a compaction, summary + kept messages

:class:`CtxwardenChatMessageHistory` is a ``langchain_core`` ``BaseChatMessageHistory``
(for ``RunnableWithMessageHistory``). :class:`CtxwardenContextMiddleware` is a
``langchain`` 1.x ``AgentMiddleware`` for ``create_agent``: before each model call it
stores the agent state's new messages in ctxwarden and replaces the request's
messages with the session's effective context (compacting first with
``auto_compact=True``); the model's answer is stored as it comes back. Messages
are mapped by :mod:`ctxwarden_client.integrations.langchain_messages`.
"""

from __future__ import annotations

import threading
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from langchain.agents.middleware import AgentMiddleware
from langchain_core.chat_history import BaseChatMessageHistory
from langchain_core.messages import BaseMessage

from .._sync_client import Client
from ..v1 import session_pb2
from ._store import SessionStore
from .langchain_messages import from_ctxwarden, to_ctxwarden
from .session_ids import session_key

__all__ = ["CtxwardenChatMessageHistory", "CtxwardenContextMiddleware"]


class CtxwardenChatMessageHistory(BaseChatMessageHistory):
    """A chat history in one ctxwarden session (``session_key(namespace, session_id)``
    unless ``ctxwarden_session_id`` names it). ``messages`` is the effective context;
    ``clear`` starts the session over (same ID and settings, no messages). Two histories
    are equal when their messages are (see :meth:`__eq__`).
    ``template`` gives the new session's settings (model, policy, user and project)."""

    def __init__(
        self,
        session_id: str,
        client: Client,
        *,
        namespace: str = "lc",
        ctxwarden_session_id: str | None = None,
        template: session_pb2.Session | None = None,
    ) -> None:
        self.session_id = session_id
        self._store = SessionStore(
            client, ctxwarden_session_id or session_key(namespace, session_id), template
        )
        self._lock = threading.Lock()

    @property
    def ctxwarden_session_id(self) -> str:
        return self._store.session_id

    @property
    def messages(self) -> list[BaseMessage]:  # type: ignore[override]
        with self._lock:
            return [from_ctxwarden(msg) for msg in self._store.context()]

    def add_messages(self, messages: Sequence[BaseMessage]) -> None:
        """Appends the messages in one atomic append."""
        converted = [to_ctxwarden(msg) for msg in messages]
        with self._lock:
            self._store.append(converted)

    def clear(self) -> None:
        with self._lock:
            self._store.clear()

    def __eq__(self, other: object) -> bool:
        """Value equality, as langchain-core's ``InMemoryChatMessageHistory`` (a pydantic
        model: equal to one of its kind whose messages are equal): two ctxwarden histories
        are equal when their ``messages`` (each read from ctxwarden now) are. Not equal to
        another kind of history, as two pydantic models of different classes are not."""
        if not isinstance(other, CtxwardenChatMessageHistory):
            return NotImplemented
        return self is other or self.messages == other.messages

    # Its value changes with every append: unhashable, as the reference (a pydantic model
    # that is not frozen) is.
    __hash__ = None  # type: ignore[assignment]


def _thread_id() -> str:
    from langgraph.config import get_config

    thread = get_config().get("configurable", {}).get("thread_id")
    if thread is None:
        raise ValueError("CtxwardenContextMiddleware needs a thread_id in the run's config")
    return str(thread)


class CtxwardenContextMiddleware(AgentMiddleware):
    """``create_agent(model, tools, middleware=[CtxwardenContextMiddleware(client)])``.

    The session is ``session_key(namespace, thread_id)`` of the run's
    ``configurable.thread_id``, or ``session_id(request)`` when given. Each state
    message is stored once (its LangChain ``id`` is the ctxwarden ``message_id``,
    so it is stored once even when sent again, e.g. by a restarted process).
    ``auto_compact=True``: the context is compacted first when it would cross
    the threshold (needs ``serve --summarizer``)."""

    def __init__(
        self,
        client: Client,
        *,
        session_id: Callable[[Any], str] | None = None,
        namespace: str = "lc",
        template: session_pb2.Session | None = None,
        auto_compact: bool = False,
    ) -> None:
        super().__init__()
        self._client = client
        self._session_id = session_id
        self._namespace = namespace
        self._template = template
        self._auto_compact = auto_compact
        self._seen: dict[str, set[str]] = {}
        self._lock = threading.Lock()

    def _store_for(self, request: Any) -> SessionStore:
        sid = self._session_id(request) if self._session_id else _thread_id()
        return SessionStore(self._client, session_key(self._namespace, sid), self._template)

    def _persist(self, store: SessionStore, messages: Sequence[BaseMessage]) -> None:
        seen = self._seen.setdefault(store.session_id, set())
        converted = []
        for msg in messages:
            if msg.id and msg.id in seen:
                continue
            stored = to_ctxwarden(msg)
            if msg.id and len(msg.id) <= 120:
                stored.message_id = f"lc:{msg.id}"  # stored once, whoever sends it again
            converted.append(stored)
        store.append(converted)
        seen.update(msg.id for msg in messages if msg.id)

    def _prepare(self, request: Any) -> tuple[SessionStore, Any]:
        store = self._store_for(request)
        with self._lock:
            self._persist(store, request.state["messages"])
            context = [
                from_ctxwarden(msg) for msg in store.context(auto_compact=self._auto_compact)
            ]
        return store, request.override(messages=context)

    def _record(self, store: SessionStore, request: Any, response: Any) -> None:
        result = getattr(response, "result", None)
        answer = list(result) if result is not None else [response]
        with self._lock:
            self._persist(store, [*request.state["messages"], *answer])

    def wrap_model_call(self, request: Any, handler: Callable[[Any], Any]) -> Any:
        store, replaced = self._prepare(request)
        response = handler(replaced)
        self._record(store, request, response)
        return response

    async def awrap_model_call(self, request: Any, handler: Callable[[Any], Awaitable[Any]]) -> Any:
        import asyncio

        store, replaced = await asyncio.to_thread(self._prepare, request)
        response = await handler(replaced)
        await asyncio.to_thread(self._record, store, request, response)
        return response
