"""Prints the pass/skip/fail count of every framework test file after the run, and
runs a ``one_backend`` suite on one backend only."""

from __future__ import annotations

import os

import pytest

from tests.frameworks.plugins._skips import deselect

FRAMEWORK_PROPERTY = "framework_files"


def one_backend() -> str:
    """The backend a ``one_backend`` suite runs on: MariaDB when the run has one."""
    return "mysql" if os.environ.get("CTXWARDEN_TEST_MYSQL_URL") else "sqlite"


def _on_another_backend(item: pytest.Item) -> bool:
    """A ``one_backend`` suite's run on a backend other than ``one_backend()``."""
    params = getattr(getattr(item, "callspec", None), "params", {})
    backend = params.get("backend_url")
    on_one = getattr(params.get("suite"), "one_backend", False)
    return bool(on_one) and backend not in (None, one_backend())


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    deselect(config, items, _on_another_backend)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    lines = [
        f"{report.nodeid.rsplit('::', 1)[-1]} {line}"
        for reports in terminalreporter.stats.values()
        for report in reports
        if isinstance(report, pytest.TestReport) and report.when == "call"
        for name, value in report.user_properties
        if name == FRAMEWORK_PROPERTY
        for line in str(value).splitlines()
    ]
    if lines:
        terminalreporter.write_sep("-", "framework test files (passed, skipped, failed)")
        for line in lines:
            terminalreporter.write_line(line)
