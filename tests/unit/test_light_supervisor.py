"""The ``serve --workers N`` supervisor runs without the server's modules (app/supervise.py):
it starts, watches and stops workers and merges their metrics, and needs neither gRPC,
protobuf, SQLAlchemy nor the API. Each of those imports pulled in the rest (~70 MiB
per pod; 29 MiB now)."""

from __future__ import annotations

import json
import subprocess
import sys

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
