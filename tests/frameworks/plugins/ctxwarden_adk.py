"""pytest plugin for Google ADK's session service tests: the service is ctxwarden.

The swap, and all of it: ``get_session_service`` of
``tests/unittests/sessions/test_session_service.py`` (the function its
parametrised ``session_service`` fixture and its stale-session tests call) returns
a ``CtxwardenSessionService`` on the server of ``CTXWARDEN_TARGET``, whatever
service type it is asked for. Each call gets a namespace and project prefix of its
own, as each reference service is a fresh database. Of the fixture's four
parameters only ``DATABASE`` is kept (the other three would run the same service
again); the items of the others are deselected.

A few tests build ``DatabaseSessionService(url)`` themselves and then use only the
public service API (:data:`BUILD_THEIR_OWN`): while they run, the module's
``DatabaseSessionService`` is ``swapped_session_service`` too, so they test ctxwarden
rather than the reference. The other tests that build a reference service look at
its SQLAlchemy internals and are in skips.toml.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Generator
from typing import Any

import pytest

from ctxwarden_client import Client
from ctxwarden_client.integrations.adk import CtxwardenSessionService

from ._skips import apply_skips, deselect
from ._usage import pytest_runtest_protocol, pytest_sessionfinish, used

__all__ = ["pytest_runtest_protocol", "pytest_sessionfinish"]

MODULE = "test_session_service"
KEPT_PARAM = "DATABASE"
BUILD_THEIR_OWN = frozenset(
    {
        "test_append_event_allows_timestamp_drift_for_current_session",
        "test_append_event_allows_markerless_current_session",
        "test_create_session_sequential_same_app_name",
    }
)
"""Tests that build a DatabaseSessionService and use only its public API."""
_CLIENT: Client | None = None


def _client() -> Client:
    global _CLIENT
    if _CLIENT is None:
        _CLIENT = Client(os.environ["CTXWARDEN_TARGET"])
    return _CLIENT


def swapped_session_service(*args: Any, **kwargs: Any) -> CtxwardenSessionService:
    used()
    token = "t" + secrets.token_hex(6)
    return CtxwardenSessionService(_client(), namespace=token, project_prefix=f"{token}/")


@pytest.hookimpl(hookwrapper=True)
def pytest_pycollect_makemodule(module_path: Any, parent: Any) -> Any:
    outcome = yield
    module = outcome.get_result()
    if getattr(module_path, "stem", "") == MODULE:
        module.obj.get_session_service = swapped_session_service


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None]:
    module = getattr(item, "module", None)
    if getattr(item, "originalname", None) not in BUILD_THEIR_OWN or module is None:
        yield
        return
    reference = module.DatabaseSessionService
    module.DatabaseSessionService = swapped_session_service
    try:
        yield
    finally:
        module.DatabaseSessionService = reference


def _another_service(item: pytest.Item) -> bool:
    """A test parametrised with a reference service other than the one kept."""
    callspec = getattr(item, "callspec", None)
    param = callspec.params.get("session_service") if callspec is not None else None
    return param is not None and getattr(param, "name", str(param)) != KEPT_PARAM


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    deselect(config, items, _another_service)
    apply_skips("adk", items)
