"""A server with its metrics endpoint on, and reading what it says."""

from __future__ import annotations

import threading
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from tests.support.server import ServerProcess

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


class ObservedServer(ServerProcess):
    """A ServerProcess with --metrics-listen on a free port; ``metrics`` is HOST:PORT."""

    def __init__(self, database_url: str, log_dir: Path, extra_args: list[str] | None = None):
        super().__init__(
            database_url, log_dir, ["--metrics-listen", "127.0.0.1:0", *(extra_args or [])]
        )
        self.metrics = ""

    def start(self, port: int | None = None) -> None:
        super().start(port)
        assert self.proc is not None and self.proc.stdout is not None
        stdout = self.proc.stdout
        lines: list[str] = []
        reader = threading.Thread(target=lambda: lines.append(stdout.readline()), daemon=True)
        reader.start()  # the line comes right after "listening on"; never block forever
        reader.join(timeout=10)
        line = lines[0] if lines else ""
        if not line.startswith("ctxwarden metrics on "):
            self.stop()
            raise AssertionError(f"no metrics address printed: {line!r}")
        self.metrics = line.split()[-1]

    def log_path(self) -> Path:
        return self.log_dir / f"server-{self._n}.log"


@contextmanager
def observed_server(database_url: str, log_dir: Path, *extra_args: str) -> Iterator[ObservedServer]:
    server = ObservedServer(database_url, log_dir, list(extra_args))
    server.start()
    try:
        yield server
    finally:
        server.stop()


def scrape_text(address: str) -> str:
    with urllib.request.urlopen(f"http://{address}/metrics", timeout=10) as resp:
        assert resp.status == 200
        assert resp.headers["Content-Type"].startswith("text/plain")
        text: str = resp.read().decode()
        return text


def scrape(address: str) -> Samples:
    out: Samples = {}
    for family in text_string_to_metric_families(scrape_text(address)):
        for s in family.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def sample(samples: Samples, name: str, **labels: str) -> float:
    """One sample's value (0 when absent)."""
    return samples.get((name, frozenset(labels.items())), 0.0)


def wait_for_sample(
    address: str, name: str, want: float, timeout: float = 30.0, **labels: str
) -> None:
    """Scrape until the sample ``name{labels}`` is ``want`` (a condition the server
    reaches on its own, such as a call it finished); fails after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    got = sample(scrape(address), name, **labels)
    while got != want:
        assert time.monotonic() < deadline, f"{name}{labels} stayed {got}, wanted {want}"
        time.sleep(0.01)
        got = sample(scrape(address), name, **labels)
