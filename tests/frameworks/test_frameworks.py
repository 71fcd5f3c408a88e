"""The frameworks' own tests pass with ctxwarden as their backend (see frameworks.py).

Each suite runs once per backend against the session's real server (a
``one_backend`` suite once: conftest.py). A test the
framework skips itself, or that skips.toml lists, counts as skipped; every other
test must pass, and in each file at least one must have built the swapped class
(the counts say how many did). The per-file counts are printed after the run
("framework test files").

A suite whose tests ship in no package (Google ADK's live only in its repository)
runs when its environment variable names a checkout of them; without one it is
not collected (it cannot be obtained offline, and third-party code is not
committed). The README says which suites CI runs.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.frameworks.conftest import FRAMEWORK_PROPERTY
from tests.frameworks.frameworks import SUITES, Suite, run_suite

pytestmark = pytest.mark.frameworks


RUNNABLE = [s for s in SUITES if not s.source_env or os.environ.get(s.source_env)]
"""The suites whose test files this machine has (see the module docstring)."""


@pytest.mark.parametrize("suite", RUNNABLE, ids=[s.name for s in RUNNABLE])
def test_framework_suite_passes(
    suite: Suite,
    server_target: str,
    tmp_path: Path,
    record_property: Callable[[str, object], None],
) -> None:
    result = run_suite(suite, server_target, tmp_path)
    record_property(
        FRAMEWORK_PROPERTY,
        "\n".join(f"{suite.version} {path}: {counts}" for path, counts in result.files.items()),
    )
    assert not result.failures, result.output
    for path, counts in result.files.items():
        assert counts.passed > 0, f"{path} ran no test\n{result.output}"
        assert counts.adapter > 0, f"{path}: no test built the swapped class\n{result.output}"
