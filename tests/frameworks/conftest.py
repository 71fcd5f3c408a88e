"""Prints the pass/skip/fail count of every framework test file after the run, and
runs a ``one_backend`` suite on one backend only."""

from __future__ import annotations

import os

import pytest

FRAMEWORK_PROPERTY = "framework_files"


def one_backend() -> str:
    """The backend a ``one_backend`` suite runs on: MariaDB when the run has one."""
    return "mysql" if os.environ.get("CTXWARDEN_TEST_MYSQL_URL") else "sqlite"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    chosen = one_backend()
    kept, dropped = [], []
    for item in items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        suite = params.get("suite")
        backend = params.get("backend_url")
        if getattr(suite, "one_backend", False) and backend not in (None, chosen):
            dropped.append(item)
        else:
            kept.append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept


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
