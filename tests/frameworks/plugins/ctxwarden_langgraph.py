"""pytest plugin for langgraph-checkpoint's store tests: ``InMemoryStore`` is ctxwarden.

The swap, and all of it: before the test modules are imported,
``langgraph.store.memory.InMemoryStore`` (the name tests/test_store.py imports and
builds its stores from, its ``MockAsyncBatchedStore`` included) becomes
:class:`SwappedInMemoryStore`, a ``CtxwardenStore`` on the server of
``CTXWARDEN_TARGET`` with the reference class's constructor. Each instance has a
project of its own, as each in-memory store starts empty. ``index=`` (a vector
index) has no ctxwarden counterpart: the tests that pass one are in skips.toml.
"""

from __future__ import annotations

import os
import secrets
from typing import Any

import pytest

from ctxwarden_client import Client
from ctxwarden_client.integrations.langgraph import CtxwardenStore

from ._skips import apply_skips
from ._usage import pytest_runtest_protocol, pytest_sessionfinish, used

__all__ = ["pytest_runtest_protocol", "pytest_sessionfinish"]

_CLIENT: Client | None = None


def _client() -> Client:
    global _CLIENT
    if _CLIENT is None:
        _CLIENT = Client(os.environ["CTXWARDEN_TARGET"])
    return _CLIENT


class SwappedInMemoryStore(CtxwardenStore):
    """``InMemoryStore(*, index=None)``: a fresh project."""

    def __init__(self, *, index: Any = None) -> None:
        if index is not None:
            raise NotImplementedError("ctxwarden memories have no vector index")
        used()
        super().__init__(_client(), project_id="t" + secrets.token_hex(6))


def pytest_configure(config: pytest.Config) -> None:
    import langgraph.store.memory

    langgraph.store.memory.InMemoryStore = SwappedInMemoryStore  # type: ignore[misc,assignment]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    apply_skips("langgraph-checkpoint", items)
