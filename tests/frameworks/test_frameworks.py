"""The frameworks' own tests pass with ctxwarden as their backend (see frameworks.py).

Each suite runs once per backend against the session's real server. A test the
framework skips itself, or that skips.toml lists, counts as skipped; every other
test must pass. The per-file counts are printed after the run ("framework test files").
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.frameworks.conftest import FRAMEWORK_PROPERTY
from tests.frameworks.frameworks import SUITES, Suite, run_suite

pytestmark = pytest.mark.frameworks


@pytest.mark.parametrize("suite", SUITES, ids=[s.name for s in SUITES])
def test_framework_suite_passes(
    suite: Suite,
    server_target: str,
    tmp_path: Path,
    record_property: Callable[[str, object], None],
) -> None:
    if suite.source_env and not os.environ.get(suite.source_env):
        pytest.skip(f"{suite.source_env} is not set (a checkout of {suite.name} {suite.version})")
    result = run_suite(suite, server_target, tmp_path)
    record_property(
        FRAMEWORK_PROPERTY,
        "\n".join(f"{suite.version} {path}: {counts}" for path, counts in result.files.items()),
    )
    assert not result.failures, result.output
    for path, counts in result.files.items():
        assert counts.passed > 0, f"{path} ran no test\n{result.output}"
