"""``ctxwarden health``: one ``grpc.health.v1`` Check against a running server.

A probe process starts every few seconds (Kubernetes exec probes, Docker's
HEALTHCHECK), so this module imports grpc and the health stubs only: not the
server, SQLAlchemy or the tokenizers. ``ctxwarden.cli`` dispatches here before it
builds its full parser (tests/unit/test_light_cli.py guards that).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

DEFAULT_TARGET = "127.0.0.1:50051"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--target",
        default=os.environ.get("CTXWARDEN_HEALTH_TARGET", DEFAULT_TARGET),
        help="server address (env CTXWARDEN_HEALTH_TARGET; default %(default)s)",
    )
    p.add_argument(
        "--service",
        default="",
        help="the health service to check: '' (the server) or ctxwarden.v1.ContextService",
    )
    p.add_argument("--timeout", type=float, default=3.0, help="seconds (default %(default)s)")


def check(target: str, service: str = "", timeout: float = 3.0) -> tuple[bool, str]:
    """(SERVING?, what was seen) for one Check call."""
    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    with grpc.insecure_channel(target) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        try:
            reply = stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=timeout)
        except grpc.RpcError as exc:
            return False, f"{exc.code().name}: {exc.details()}"
    name = health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)
    return reply.status == health_pb2.HealthCheckResponse.SERVING, name


def main(argv: Sequence[str]) -> int:
    """Exit 0 when SERVING; 1 otherwise (NOT_SERVING while draining, or no answer)."""
    parser = argparse.ArgumentParser(prog="ctxwarden health", description=__doc__)
    add_arguments(parser)
    args = parser.parse_args(argv)
    ok, seen = check(args.target, args.service, args.timeout)
    if not ok:
        print(f"ctxwarden health: {args.target}: {seen}", file=sys.stderr)
    return 0 if ok else 1
