"""The gRPC health of a replica, polled."""

from __future__ import annotations

import time

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


def health(target: str) -> int:
    with grpc.insecure_channel(target) as ch:
        stub = health_pb2_grpc.HealthStub(ch)
        try:
            status: int = stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=2).status
        except grpc.RpcError:
            return -1
        return status


def wait_health(target: str, want: int, timeout: float) -> float:
    """Poll until the replica's health is ``want``; the seconds it took."""
    start = time.monotonic()
    while health(target) != want:
        if time.monotonic() - start > timeout:
            raise AssertionError(f"health of {target} did not become {want} in {timeout:g} s")
        time.sleep(0.05)
    return time.monotonic() - start
