"""CtxwardenContextPlugin drives a real ADK Runner against a real server
(adk_context_run.py, in the ADK suite's virtualenv: google-adk 2.13.0 cannot share the
test extra's environment; frameworks.py makes it from PyPI once)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.frameworks.frameworks import CLIENT, SUITES, python_for
from tests.support.server import ServerProcess

pytestmark = pytest.mark.frameworks

SCRIPT = Path(__file__).with_name("adk_context_run.py")


def _run(target: str, cwd: Path, *scenarios: str) -> dict[str, Any]:
    (adk,) = [s for s in SUITES if s.name == "adk"]
    proc = subprocess.run(
        [python_for(adk), str(SCRIPT), target, *scenarios],
        cwd=cwd,
        # This checkout's client first: the ADK virtualenv is shared by every checkout.
        env={**os.environ, "PYTHONPATH": str(CLIENT)},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-5000:] + proc.stderr[-20000:]
    counts: dict[str, Any] = json.loads(proc.stdout.splitlines()[-1])
    return counts


def _compacted(counts: dict[str, int]) -> None:
    assert counts["requests"] > 24
    assert counts["first_compacted_request"] > 0
    assert counts["compactions"] >= 2
    assert counts["last_contents"] < counts["last_plain_contents"]


def test_agent_side_compaction_and_stubbed_outputs(server_target: str, tmp_path: Path) -> None:
    counts = _run(server_target, tmp_path, "units", "agent-summary", "stubs")
    assert counts["units"]["cases"] == 4
    _compacted(counts["agent-summary"])
    assert counts["stubs"]["stubbed_outputs"] > 24


def test_server_side_compaction(backend_url: str, tmp_path: Path) -> None:
    server = ServerProcess(backend_url, log_dir=tmp_path, extra_args=["--summarizer", "extractive"])
    server.start()
    try:
        counts = _run(server.target, tmp_path, "server-summary")
    finally:
        server.stop()
    _compacted(counts["server-summary"])
