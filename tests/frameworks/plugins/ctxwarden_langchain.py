"""pytest plugin for langchain-core's own tests: ``InMemoryChatMessageHistory`` is ctxwarden.

The swap, and all of it: before the test modules are imported,
``langchain_core.chat_history.InMemoryChatMessageHistory`` (the name the tests
import) becomes :class:`SwappedInMemoryChatMessageHistory`, a
``CtxwardenChatMessageHistory`` on the server of ``CTXWARDEN_TARGET`` with the
reference class's constructor (``messages=``). Its value equality (the tests compare
stores of histories) is the adapter's own. Each instance is a new session, as each
in-memory history is a new list.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Sequence

import pytest
from langchain_core.messages import BaseMessage

from ctxwarden_client import Client
from ctxwarden_client.integrations.langchain import CtxwardenChatMessageHistory

from ._skips import apply_skips
from ._usage import pytest_runtest_protocol, pytest_sessionfinish, used

__all__ = ["pytest_runtest_protocol", "pytest_sessionfinish"]

_CLIENT: Client | None = None


def _client() -> Client:
    global _CLIENT
    if _CLIENT is None:
        _CLIENT = Client(os.environ["CTXWARDEN_TARGET"])
    return _CLIENT


class SwappedInMemoryChatMessageHistory(CtxwardenChatMessageHistory):
    """``InMemoryChatMessageHistory(messages=[...])``: a fresh session."""

    def __init__(self, messages: Sequence[BaseMessage] = ()) -> None:
        used()
        super().__init__(secrets.token_hex(8), _client())
        if messages:
            self.add_messages(messages)


def pytest_configure(config: pytest.Config) -> None:
    import langchain_core.chat_history

    chat_history = langchain_core.chat_history
    chat_history.InMemoryChatMessageHistory = SwappedInMemoryChatMessageHistory  # type: ignore[misc,assignment]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    apply_skips("langchain-core", items)
