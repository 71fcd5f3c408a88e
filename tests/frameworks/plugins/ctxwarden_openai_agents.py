"""pytest plugin for the OpenAI Agents SDK's own tests: ``SQLiteSession`` is ctxwarden.

The swap, and all of it: before the SDK's test modules are imported,
``agents.SQLiteSession`` and ``agents.memory.SQLiteSession`` (the names the tests
import) become :class:`SwappedSQLiteSession`, a ``CtxwardenSession`` on the server of
``CTXWARDEN_TARGET`` with the reference class's constructor. The SDK's own code keeps
its own imports. A ``db_path`` is one namespace of session IDs, so sessions of one
file are shared and those of two files (or two in-memory databases) are not, as with
SQLite. ``AsyncSQLiteSession`` is not swapped: the items of test_compaction_suffix.py
that run on it (its ``backend`` fixture's "async-sqlite" parameter) are deselected.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path
from typing import Any

import pytest

from ctxwarden_client import Client
from ctxwarden_client.integrations.openai_agents import CtxwardenSession

from ._skips import apply_skips
from ._usage import pytest_runtest_protocol, pytest_sessionfinish, used

__all__ = ["pytest_runtest_protocol", "pytest_sessionfinish"]

_CLIENT: Client | None = None
_NAMESPACES: dict[str, str] = {}


def _client() -> Client:
    global _CLIENT
    if _CLIENT is None:
        # No deadline: several tests fake the clock by patching time.time (through
        # "cryptography.fernet.time.time"), and grpc computes deadlines from it.
        _CLIENT = Client(os.environ["CTXWARDEN_TARGET"], timeout=None)
    return _CLIENT


def _namespace(db_path: str | Path) -> str:
    key = str(db_path)
    if key == ":memory:":
        return "t" + secrets.token_hex(6)
    return _NAMESPACES.setdefault(str(Path(key).resolve()), "t" + secrets.token_hex(6))


class SwappedSQLiteSession(CtxwardenSession):
    """``SQLiteSession(session_id, db_path=":memory:", session_settings=None)``."""

    def __init__(
        self,
        session_id: str,
        db_path: str | Path = ":memory:",
        sessions_table: str = "agent_sessions",
        messages_table: str = "agent_messages",
        session_settings: Any = None,
    ) -> None:
        used()
        super().__init__(
            session_id,
            _client(),
            namespace=_namespace(db_path),
            session_settings=session_settings,
        )


def pytest_configure(config: pytest.Config) -> None:
    import agents
    import agents.memory

    agents.SQLiteSession = SwappedSQLiteSession  # type: ignore[misc,assignment]
    agents.memory.SQLiteSession = SwappedSQLiteSession  # type: ignore[misc,assignment]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # The "async-sqlite" parameter of test_compaction_suffix.py's ``backend`` fixture is
    # AsyncSQLiteSession, which is not swapped: those items test the reference class.
    kept = [i for i in items if _param(i, "backend") is not True]
    if len(kept) < len(items):
        config.hook.pytest_deselected(items=[i for i in items if _param(i, "backend") is True])
        items[:] = kept
    apply_skips("openai-agents", items)


def _param(item: pytest.Item, name: str) -> object:
    callspec = getattr(item, "callspec", None)
    return None if callspec is None else callspec.params.get(name)
