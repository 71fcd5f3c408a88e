"""Rate limits that count every request message, failed authentication limited
per peer, JWT key rotation without kid, the logged tenant."""

from __future__ import annotations

import base64
import hashlib
import json
import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import grpc
import jwt
from google.rpc import error_details_pb2, status_pb2

from ctxwarden.v1 import context_service_pb2 as pb
from ctxwarden.v1 import context_service_pb2_grpc as pb_grpc
from tests.support.builders import user
from tests.support.errors import CallError, expect_error
from tests.support.server import ServerProcess

KEY = "limits-key-" + "q" * 24
MD = (("authorization", f"Bearer {KEY}"),)
T = TypeVar("T")
OLD_SECRET, NEW_SECRET = (
    b"old-secret-of-at-least-32-bytes!!!!",
    b"new-secret-of-at-least-32-bytes!!!!",
)


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _server(backend_url: str, tmp_path: Path, *extra: str) -> ServerProcess:
    (tmp_path / "keys").write_text(f"tenant-l:{hashlib.sha256(KEY.encode()).hexdigest()}\n")
    jwks = {"keys": [{"kty": "oct", "k": _b64(s)} for s in (OLD_SECRET, NEW_SECRET)]}
    (tmp_path / "jwks.json").write_text(json.dumps(jwks))
    server = ServerProcess(
        backend_url,
        log_dir=tmp_path,
        extra_args=[
            "--api-keys-file",
            str(tmp_path / "keys"),
            "--jwt-jwks-file",
            str(tmp_path / "jwks.json"),
            *extra,
        ],
    )
    server.start()
    return server


def _details(err: grpc.RpcError | CallError) -> tuple[str, float]:
    trailers: Any = err.trailing_metadata() or ()  # type: ignore[attr-defined,unused-ignore]
    raw = next(item[1] for item in trailers if item[0] == "grpc-status-details-bin")
    status = status_pb2.Status.FromString(raw)
    reason, retry = "", 0.0
    for d in status.details:
        info, delay = error_details_pb2.ErrorInfo(), error_details_pb2.RetryInfo()
        if d.Unpack(info):
            reason = info.reason
        elif d.Unpack(delay):
            retry = delay.retry_delay.ToNanoseconds() / 1e9
    return reason, retry


def _when_admitted(call: Callable[[], T]) -> T:
    """``call()`` once the tenant's bucket admits it (polls, waiting the RetryInfo delay)."""
    deadline = time.monotonic() + 10
    while True:
        try:
            return call()
        except grpc.RpcError as exc:
            if exc.code() != grpc.StatusCode.RESOURCE_EXHAUSTED or time.monotonic() > deadline:
                raise
            time.sleep(_details(exc)[1])


def _check_wait_text(details: str) -> None:
    match = re.search(r"retry in (\d+\.\d\d) s", details)
    assert match is not None, details
    assert float(match.group(1)) >= 0.01, details


def test_stream_messages_count_against_the_rate(backend_url: str, tmp_path: Path) -> None:
    server = _server(backend_url, tmp_path, "--rate-limit-rps", "5")
    try:
        with grpc.insecure_channel(server.target) as ch:
            stub = pb_grpc.ContextServiceStub(ch)
            sid = stub.CreateSession(pb.CreateSessionRequest(), metadata=MD).session_id

            def requests() -> Iterator[pb.AppendMessagesRequest]:
                for i in range(500):
                    yield pb.AppendMessagesRequest(session_id=sid, messages=[user(f"m{i}")])

            acked = 0
            started = time.monotonic()
            try:
                for _ in stub.StreamMessages(requests(), metadata=MD, timeout=30):
                    acked += 1
            except grpc.RpcError as exc:
                err = exc
            else:
                raise AssertionError("500 appends in one stream were all admitted")
            elapsed = time.monotonic() - started
            rate = acked / elapsed
            print(f"StreamMessages admitted {acked} appends in {elapsed:.2f} s ({rate:.1f}/s)")
            assert err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            reason, retry = _details(err)
            assert reason == "RATE_LIMITED" and retry > 0
            _check_wait_text(err.details() or "")
            # burst 10 (2 s at 5/s), less the CreateSession call, plus what refilled
            assert acked <= 10 + 5 * elapsed + 1, (acked, elapsed)
            stored = _when_admitted(
                lambda: stub.ListMessages(
                    pb.ListMessagesRequest(session_id=sid, page_size=1000), metadata=MD
                )
            )
            # Nothing of the refused request was written.
            assert len(stored.messages) == acked
    finally:
        server.stop()


def test_failed_authentication_is_limited_per_peer(backend_url: str, tmp_path: Path) -> None:
    server = _server(backend_url, tmp_path)
    try:
        with grpc.insecure_channel(server.target) as ch:
            stub = pb_grpc.ContextServiceStub(ch)
            wrong = (("authorization", "Bearer not-a-valid-key"),)
            unauth = limited = 0
            reasons: set[str] = set()
            started = time.monotonic()
            for _ in range(2000):
                try:
                    stub.GetSession(pb.GetSessionRequest(session_id="x"), metadata=wrong)
                except grpc.RpcError as exc:
                    if exc.code() == grpc.StatusCode.UNAUTHENTICATED:
                        unauth += 1
                    elif exc.code() == grpc.StatusCode.RESOURCE_EXHAUSTED:
                        limited += 1
                        reasons.add(_details(exc)[0])
            elapsed = time.monotonic() - started
            print(
                f"wrong keys: {unauth} checked, {limited} refused in {elapsed:.2f} s "
                f"({unauth / elapsed:.1f} checked/s)"
            )
            assert unauth <= 20 + elapsed + 1 and limited >= 2000 - unauth
            assert reasons == {"AUTH_RATE_LIMITED"}
            # Even a valid key from this peer is refused during the cool-down.
            err = expect_error(
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                "AUTH_RATE_LIMITED",
                stub.CreateSession,
                pb.CreateSessionRequest(),
                metadata=MD,
            )
            assert 0 < _details(err)[1] <= 10
            _check_wait_text(err.details() or "")
    finally:
        server.stop()


def test_jwt_without_kid_is_checked_against_every_key(backend_url: str, tmp_path: Path) -> None:
    server = _server(backend_url, tmp_path)
    try:
        with grpc.insecure_channel(server.target) as ch:
            stub = pb_grpc.ContextServiceStub(ch)
            for secret in (OLD_SECRET, NEW_SECRET):
                token = jwt.encode(
                    {"tenant": "tenant-r", "exp": int(time.time()) + 60}, secret, "HS256"
                )
                md = (("authorization", f"Bearer {token}"),)
                assert stub.CreateSession(pb.CreateSessionRequest(), metadata=md).session_id
    finally:
        server.stop()


def test_unauthenticated_calls_are_logged_without_a_tenant(
    backend_url: str, tmp_path: Path
) -> None:
    server = _server(backend_url, tmp_path, "--log-level", "INFO")
    try:
        with grpc.insecure_channel(server.target) as ch:
            stub = pb_grpc.ContextServiceStub(ch)
            claim = (("x-ctxwarden-tenant", "tenant-b"),)
            expect_error(
                grpc.StatusCode.UNAUTHENTICATED,
                "MISSING_CREDENTIALS",
                stub.ListSessions,
                pb.ListSessionsRequest(),
                metadata=claim,
            )
            stub.ListSessions(pb.ListSessionsRequest(), metadata=(*MD, *claim))
    finally:
        server.stop()
    lines = [json.loads(x) for x in server.log_text().splitlines() if x.startswith("{")]
    access = [x for x in lines if x.get("method", "").endswith("/ListSessions")]
    assert [(x["code"], x["tenant"]) for x in access] == [
        ("UNAUTHENTICATED", ""),
        ("OK", "tenant-l"),
    ]
