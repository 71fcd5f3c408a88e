"""Helpers for observability tests: servers with metrics on, scraping, health polling."""

from __future__ import annotations

import threading
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from prometheus_client.parser import text_string_to_metric_families

from tests.support.server import ServerProcess

SERVICE = "ctxwarden.v1.ContextService"
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


def family_names(address: str) -> set[str]:
    return {f.name for f in text_string_to_metric_families(scrape_text(address))}


def health_status(target: str, service: str = "") -> int:
    with grpc.insecure_channel(target) as ch:
        stub = health_pb2_grpc.HealthStub(ch)
        resp = stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=5)
        status: int = resp.status
        return status


def wait_health(target: str, want: int, timeout: float = 30.0) -> float:
    """Poll both health services until they report ``want``; returns seconds waited."""
    start = time.monotonic()
    seen: list[int] = []
    while time.monotonic() - start < timeout:
        seen = [health_status(target, s) for s in ("", SERVICE)]
        if seen == [want, want]:
            return time.monotonic() - start
        time.sleep(0.1)
    name = health_pb2.HealthCheckResponse.ServingStatus.Name
    raise AssertionError(f"health stayed {[name(s) for s in seen]}, wanted {name(want)}")
