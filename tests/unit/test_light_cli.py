"""``ctxwarden --version`` and ``ctxwarden health`` (the probes' command) stay light.

A probe process starts every few seconds; importing the server (SQLAlchemy, the
tokenizers, the servicers) would cost about a second of CPU each time. Each case
runs the real entry point in a fresh interpreter and lists what it imported.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.support.server import ServerProcess, migrate_database

HEAVY = ("sqlalchemy", "ctxwarden.app", "ctxwarden.store", "ctxwarden.api", "ctxwarden.service")

RUN = """
import json, sys
from ctxwarden.cli import main
try:
    code = main(sys.argv[1:])
except SystemExit as exc:
    code = exc.code
heavy = sorted(m for m in sys.modules if m.startswith({heavy!r}))
print(json.dumps({{"code": code, "heavy": heavy}}))
"""


def _run(*argv: str) -> tuple[int, list[str], str]:
    done = subprocess.run(
        [sys.executable, "-c", RUN.format(heavy=HEAVY), *argv],
        capture_output=True,
        text=True,
        timeout=60,
    )
    result = json.loads(done.stdout.strip().splitlines()[-1])
    return int(result["code"]), list(result["heavy"]), done.stdout + done.stderr


def test_version_imports_nothing_of_the_server() -> None:
    code, heavy, out = _run("--version")
    assert code == 0 and "ctxwarden 0." in out
    assert heavy == []


def test_health_checks_a_real_server_without_importing_it(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'ctxwarden.db'}"
    migrate_database(url)
    server = ServerProcess(url, log_dir=tmp_path)
    try:
        server.start(port=0)
        code, heavy, _ = _run("health", "--target", server.target)
        assert code == 0, "SERVING is healthy"
        assert heavy == []
        code, _, _ = _run(
            "health", "--target", server.target, "--service", "ctxwarden.v1.ContextService"
        )
        assert code == 0
        code, _, out = _run("health", "--target", server.target, "--service", "no.such.Service")
        assert code == 1 and "NOT_FOUND" in out
    finally:
        server.stop()
    code, heavy, out = _run("health", "--target", server.target, "--timeout", "1")
    assert code == 1 and "UNAVAILABLE" in out, out
    assert heavy == []


def test_the_full_parser_still_knows_health() -> None:
    code, _, out = _run("--help")
    assert code == 0 and "health" in out and "check a running server" in out
