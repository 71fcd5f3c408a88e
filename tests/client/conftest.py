"""Reports what client tests measured (``record_property("report", ...)``) after the run."""

from __future__ import annotations

import pytest

REPORT_PROPERTY = "report"


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    lines = [
        f"{report.nodeid.rsplit('::', 1)[-1]}: {value}"
        for reports in terminalreporter.stats.values()
        for report in reports
        if isinstance(report, pytest.TestReport) and report.when == "call"
        for name, value in report.user_properties
        if name == REPORT_PROPERTY
    ]
    if lines:
        terminalreporter.write_sep("-", "client measurements")
        for line in lines:
            terminalreporter.write_line(line)
