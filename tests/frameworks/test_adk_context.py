"""CtxwardenContextPlugin drives a real ADK Runner against the real server
(adk_context_run.py, in the ADK suite's virtualenv: google-adk 2.13.0 cannot share the
test extra's environment; frameworks.py makes it from PyPI once)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.frameworks.frameworks import SUITES, python_for

pytestmark = pytest.mark.frameworks

SCRIPT = Path(__file__).with_name("adk_context_run.py")


def test_plugin_sends_the_effective_context(server_target: str, tmp_path: Path) -> None:
    (adk,) = [s for s in SUITES if s.name == "adk"]
    proc = subprocess.run(
        [python_for(adk), str(SCRIPT), server_target],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": ""},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-5000:] + proc.stderr[-20000:]
    counts = json.loads(proc.stdout.splitlines()[-1])
    assert counts["requests"] > 24
    assert counts["compactions"] >= 2
    assert counts["last_contents"] < counts["last_plain_contents"]
