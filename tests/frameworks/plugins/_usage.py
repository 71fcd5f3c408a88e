"""Which tests reached the adapter: a swapped constructor calls :func:`used`, and at the
end of the run the node IDs of those tests are written to the JSON file named by
``CTXWARDEN_FRAMEWORK_USAGE`` (tests/frameworks/frameworks.py counts them per file).

A plugin re-exports the two hooks below (``from ._usage import ...``) for pytest to
call them."""

from __future__ import annotations

import json
import os
from collections.abc import Generator
from pathlib import Path

import pytest

USAGE_ENV = "CTXWARDEN_FRAMEWORK_USAGE"
_current: str | None = None
_used: set[str] = set()


def used() -> None:
    """The running test (if any) builds an adapter object."""
    if _current is not None:
        _used.add(_current)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Generator[None]:
    global _current
    _current = item.nodeid
    try:
        yield
    finally:
        _current = None


def pytest_sessionfinish(session: pytest.Session) -> None:
    path = os.environ.get(USAGE_ENV)
    if path:
        Path(path).write_text(json.dumps(sorted(_used)))
