"""A real server with the console on, two tenants' API keys, a seeded session, and
Debian's Chromium driven by Playwright."""

from __future__ import annotations

import hashlib
import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest
from playwright.sync_api import Browser, sync_playwright

from tests.console.seed import Seeded, seed_session
from tests.support.server import ServerProcess

KEY_A = "console-key-tenant-a-" + "a" * 16
KEY_B = "console-key-tenant-b-" + "b" * 16
CHROMIUM = Path("/usr/bin/chromium")


def bearer(key: str) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {key}"),)


class ConsoleProcess(ServerProcess):
    """A ServerProcess with --console-listen on a free port; ``url`` is its base URL."""

    def __init__(self, database_url: str, log_dir: Path, extra_args: list[str]) -> None:
        super().__init__(database_url, log_dir, ["--console-listen", "127.0.0.1:0", *extra_args])
        self.url = ""

    def start(self, port: int | None = None) -> None:
        super().start(port)
        assert self.proc is not None and self.proc.stdout is not None
        stdout = self.proc.stdout
        lines: list[str] = []
        reader = threading.Thread(target=lambda: lines.append(stdout.readline()), daemon=True)
        reader.start()  # the line follows "listening on" at once; never block forever
        reader.join(timeout=10)
        line = lines[0] if lines else ""
        if not line.startswith("ctxwarden console on "):
            self.stop()
            raise AssertionError(f"no console address printed: {line!r}")
        self.url = line.split()[-1]


@dataclass(frozen=True)
class ConsoleEnv:
    server: ConsoleProcess
    seeded: Seeded

    @property
    def url(self) -> str:
        return self.server.url

    def session_url(self, session_id: str = "") -> str:
        return f"{self.url}/sessions/{session_id or self.seeded.session_id}"


@pytest.fixture(scope="session")
def console(backend_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ConsoleEnv]:
    d = tmp_path_factory.mktemp("console")
    keys = d / "api-keys"
    keys.write_text(
        f"console-a:{hashlib.sha256(KEY_A.encode()).hexdigest()}\n"
        f"console-b:{hashlib.sha256(KEY_B.encode()).hexdigest()}\n"
    )
    server = ConsoleProcess(
        backend_url, d, ["--api-keys-file", str(keys), "--summarizer", "extractive"]
    )
    server.start()
    try:
        with grpc.insecure_channel(server.target) as channel:
            seeded = seed_session(channel, bearer(KEY_A), "flaky-parser")
        yield ConsoleEnv(server, seeded)
    finally:
        server.stop()


@pytest.fixture(scope="session")
def channel(console: ConsoleEnv) -> Iterator[grpc.Channel]:
    with grpc.insecure_channel(console.server.target) as ch:
        yield ch


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    """Debian's Chromium (apt-get install chromium), never a downloaded browser.

    Module-scoped: Playwright's sync API runs an event loop of its own while it is
    open, and the asyncio tests of other modules need the thread's loop back."""
    if not CHROMIUM.exists() and os.environ.get("CTXWARDEN_TEST_PARTS"):
        # A partial run (docs/testing.md) may lack Chromium; a full run, as in CI, may not.
        pytest.skip("chromium is not installed (/usr/bin/chromium): the console's browser tests")
    assert CHROMIUM.exists(), "install Debian's chromium (see scripts/system_packages.sh)"
    with sync_playwright() as p:
        # --no-sandbox: CI runs the suite as root, where Chromium will not start sandboxed.
        b = p.chromium.launch(executable_path=str(CHROMIUM), args=["--no-sandbox"])
        try:
            yield b
        finally:
            b.close()
