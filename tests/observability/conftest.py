"""Helpers for observability tests: servers with metrics on, scraping, health polling."""

from __future__ import annotations

import time

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from prometheus_client.parser import text_string_to_metric_families

from tests.support.observed import (
    ObservedServer,
    Samples,
    observed_server,
    sample,
    scrape,
    scrape_text,
)

__all__ = ["ObservedServer", "Samples", "observed_server", "sample", "scrape", "scrape_text"]

SERVICE = "ctxwarden.v1.ContextService"


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
