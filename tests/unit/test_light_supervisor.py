"""The ``serve --workers N`` supervisor runs without the server's modules (app/supervise.py):
it starts, watches and stops workers and merges their metrics, and needs neither gRPC,
protobuf, SQLAlchemy nor the API. Each of those imports pulled in the rest (~70 MiB
per pod; 29 MiB now)."""

from __future__ import annotations

import json
import os
import site
import subprocess
import sys
from pathlib import Path

import pytest

HEAVY = ("grpc", "google.protobuf", "sqlalchemy", "ctxwarden.api", "ctxwarden.service")

RUN = f"""
import json, sys
import ctxwarden.app.supervise, ctxwarden.app.workers_run
print(json.dumps(sorted(m for m in {HEAVY!r} if m in sys.modules)))
"""


def test_the_supervisor_imports_none_of_the_server() -> None:
    done = subprocess.run(
        [sys.executable, "-c", RUN], capture_output=True, text=True, timeout=60, check=True
    )
    assert json.loads(done.stdout.strip().splitlines()[-1]) == []


def test_started_by_hand_it_says_what_to_run() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "ctxwarden.app.supervise"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "ctxwarden serve --workers N" in lines[0], done.stderr


def test_the_new_interpreter_finds_this_ctxwarden_and_not_the_working_directory(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Run from a source tree (no install), the supervisor's interpreter must find the
    same package; -P keeps a ``ctxwarden`` directory in the working directory out."""
    import ctxwarden
    from ctxwarden.app import supervise

    parent = str(Path(ctxwarden.__file__).resolve().parent.parent)
    monkeypatch.setenv("PYTHONPATH", "/elsewhere")
    monkeypatch.setattr(site, "getsitepackages", lambda: ["/usr/lib/python3/dist-packages"])
    supervise._find_this_ctxwarden()
    assert os.environ["PYTHONPATH"].split(os.pathsep) == [parent, "/elsewhere"]


def test_an_installed_ctxwarden_adds_nothing_ahead_of_the_standard_library(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import ctxwarden
    from ctxwarden.app import supervise

    parent = str(Path(ctxwarden.__file__).resolve().parent.parent)
    monkeypatch.delenv("PYTHONPATH", raising=False)
    monkeypatch.setattr(site, "getsitepackages", lambda: [parent])
    supervise._find_this_ctxwarden()
    assert "PYTHONPATH" not in os.environ
