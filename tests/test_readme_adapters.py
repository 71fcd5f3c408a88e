"""The adapter examples of the docs (guides/frameworks/) run as written against a real server.

The ADK examples run in the ADK suite's own virtualenv (tests/frameworks/frameworks.py:
google-adk 2.13.0 cannot share the test extra's environment).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.docs.pages import blocks
from tests.frameworks.frameworks import CLIENT, SUITES, python_for


def _example(name: str) -> str:
    (block,) = [
        b.code for b in blocks("python") if b.code.startswith(f"# adapter example: {name}\n")
    ]
    return block


def _run(code: str, target: str, cwd: Path, python: str = sys.executable) -> list[str]:
    proc = subprocess.run(
        [python, "-c", code],
        cwd=cwd,
        # This checkout's client first: the ADK virtualenv is shared by every checkout.
        env={**os.environ, "CTXWARDEN_TARGET": target, "PYTHONPATH": str(CLIENT)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.splitlines()


def _commented(code: str) -> list[str]:
    """The outputs the example's print lines promise in their trailing comments."""
    return [line.rsplit("# ", 1)[1] for line in code.splitlines() if "print(" in line]


def test_openai_agents_example(server_target: str, tmp_path: Path) -> None:
    code = _example("openai-agents")
    for _ in range(2):  # safe to run again: a new conversation every time
        assert _run(code, server_target, tmp_path) == ["About 2.1 million. 4"]


def test_langchain_example(server_target: str, tmp_path: Path) -> None:
    code = _example("langchain")
    expected = _commented(code)
    for _ in range(2):  # safe to run again: new IDs every time
        assert _run(code, server_target, tmp_path) == expected


def _run_adk_example(name: str, app: str, server_target: str, tmp_path: Path) -> None:
    """An ADK example, run in the ADK virtualenv under an app name of its own."""
    code = _example(name)
    expected = _commented(code)
    (adk,) = [s for s in SUITES if s.name == "adk"]
    code = code.replace(f'"{app}"', f'"{app}-{tmp_path.name}"')
    assert _run(code, server_target, tmp_path, python_for(adk)) == expected


@pytest.mark.frameworks
def test_adk_example(server_target: str, tmp_path: Path) -> None:
    _run_adk_example("adk", "shop", server_target, tmp_path)


@pytest.mark.frameworks
def test_adk_context_example(server_target: str, tmp_path: Path) -> None:
    _run_adk_example("adk-context", "count", server_target, tmp_path)
