"""Reliability tests: real servers under simulated-agent load, with faults injected.

Everything runs on loopback and is bounded in time. ``CTXWARDEN_LOAD_SECONDS``
sets the length of the steady-load test (default 60 s on MySQL, 15 s on SQLite).
The MariaDB restart test stops the shared database server for a few seconds
(it always starts it again); leave it out with ``-m "not db_outage"``.
"""

from __future__ import annotations

import pytest


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "db_outage: stops the database server (MariaDB) or hides the SQLite file; "
        "select alone with -m db_outage",
    )
