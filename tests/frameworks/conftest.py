"""Prints the pass/skip/fail count of every framework test file after the run."""

from __future__ import annotations

import pytest

FRAMEWORK_PROPERTY = "framework_files"


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
