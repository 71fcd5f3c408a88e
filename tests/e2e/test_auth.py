"""Authentication, tenant isolation, limits and safe defaults, end to end."""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import json
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import jwt
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import NameOID
from google.protobuf.message import Message as PbMessage
from google.rpc import error_details_pb2, status_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from ctxwarden.v1 import context_service_pb2 as pb
from ctxwarden.v1 import context_service_pb2_grpc as pb_grpc
from tests.support.builders import assistant, result, user
from tests.support.errors import call_error, expect_error
from tests.support.server import ServerProcess

KEY_A, KEY_B = "key-for-tenant-a-" + "x" * 20, "key-for-tenant-b-" + "y" * 20
HS_SECRET = b"a-shared-secret-of-at-least-32-bytes!!"
UNAUTH = grpc.StatusCode.UNAUTHENTICATED
DENIED = grpc.StatusCode.PERMISSION_DENIED
NOT_FOUND = grpc.StatusCode.NOT_FOUND


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


@pytest.fixture(scope="module")
def keys() -> dict[str, object]:
    rsa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    ec_key = ec.generate_private_key(ec.SECP256R1())
    return {"rsa": rsa_key, "ec": ec_key}


@pytest.fixture(scope="module")
def auth_files(tmp_path_factory: pytest.TempPathFactory, keys: dict[str, object]) -> Path:
    d = tmp_path_factory.mktemp("auth")
    lines = [
        "# tenant:sha256(key)",
        f"tenant-a:{hashlib.sha256(KEY_A.encode()).hexdigest()}",
        "",
        f"tenant-b:{hashlib.sha256(KEY_B.encode()).hexdigest()}  # b",
    ]
    (d / "api-keys").write_text("\n".join(lines) + "\n")
    rsa_jwk = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(keys["rsa"].public_key()))  # type: ignore[attr-defined]
    ec_jwk = json.loads(jwt.algorithms.ECAlgorithm.to_jwk(keys["ec"].public_key()))  # type: ignore[attr-defined]
    jwks = {
        "keys": [
            {"kty": "oct", "kid": "hs", "alg": "HS256", "k": _b64(HS_SECRET)},
            {**rsa_jwk, "kid": "rs", "alg": "RS256", "use": "sig"},
            {**ec_jwk, "kid": "es", "alg": "ES256", "use": "sig"},
        ]
    }
    (d / "jwks.json").write_text(json.dumps(jwks))
    return d


def _token(keys: dict[str, object], alg: str = "RS256", **claims: object) -> str:
    now = int(time.time())
    body = {
        "iss": "https://issuer.test",
        "aud": "ctxwarden",
        "exp": now + 600,
        "tenant": "tenant-j",
    }
    body.update(claims)
    body = {k: v for k, v in body.items() if v is not None}
    if alg == "HS256":
        return jwt.encode(body, HS_SECRET, algorithm="HS256", headers={"kid": "hs"})
    key = keys["rsa"] if alg == "RS256" else keys["ec"]
    return jwt.encode(body, key, algorithm=alg, headers={"kid": "rs" if alg == "RS256" else "es"})  # type: ignore[arg-type]


@pytest.fixture
def secured(backend_url: str, tmp_path: Path, auth_files: Path) -> Iterator[ServerProcess]:
    server = ServerProcess(
        backend_url,
        log_dir=tmp_path,
        extra_args=[
            "--api-keys-file",
            str(auth_files / "api-keys"),
            "--jwt-jwks-file",
            str(auth_files / "jwks.json"),
            "--jwt-issuer",
            "https://issuer.test",
            "--jwt-audience",
            "ctxwarden",
            "--max-sessions-per-tenant",
            "50",
        ],
    )
    server.start()
    try:
        yield server
    finally:
        server.stop()


def _md(token: str) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {token}"),)


def test_credentials_are_required_and_checked(
    secured: ServerProcess, keys: dict[str, object]
) -> None:
    with grpc.insecure_channel(secured.target) as ch:
        stub = pb_grpc.ContextServiceStub(ch)
        req = pb.CreateSessionRequest()
        expect_error(UNAUTH, "MISSING_CREDENTIALS", stub.CreateSession, req)
        expect_error(UNAUTH, "INVALID_CREDENTIALS", stub.CreateSession, req, metadata=_md("nope"))
        expect_error(
            UNAUTH,
            "MALFORMED_CREDENTIALS",
            stub.CreateSession,
            req,
            metadata=(("authorization", "Basic abc"),),
        )
        assert stub.CreateSession(req, metadata=_md(KEY_A)).session_id
        for alg in ("HS256", "RS256", "ES256"):
            assert stub.CreateSession(req, metadata=_md(_token(keys, alg))).session_id
        expect_error(
            UNAUTH,
            "EXPIRED_CREDENTIALS",
            stub.CreateSession,
            req,
            metadata=_md(_token(keys, exp=int(time.time()) - 3600)),
        )
        expect_error(
            UNAUTH,
            "INVALID_CREDENTIALS",
            stub.CreateSession,
            req,
            metadata=_md(_token(keys, iss="https://evil.test")),
        )
        expect_error(
            UNAUTH,
            "INVALID_CREDENTIALS",
            stub.CreateSession,
            req,
            metadata=_md(_token(keys, aud="someone-else")),
        )
        expect_error(
            UNAUTH,
            "INVALID_CREDENTIALS",
            stub.CreateSession,
            req,
            metadata=_md(_token(keys, exp=None)),
        )
        forged = jwt.encode(
            {
                "tenant": "tenant-a",
                "exp": int(time.time()) + 60,
                "iss": "https://issuer.test",
                "aud": "ctxwarden",
            },
            b"wrong-secret-wrong-secret-wrong-secret",
            algorithm="HS256",
            headers={"kid": "hs"},
        )
        expect_error(UNAUTH, "INVALID_CREDENTIALS", stub.CreateSession, req, metadata=_md(forged))
        # Valid credentials without the right: no tenant, or a read-only scope.
        expect_error(
            DENIED, "NO_TENANT", stub.CreateSession, req, metadata=_md(_token(keys, tenant=None))
        )
        read_only = _md(_token(keys, scope="ctxwarden:read"))
        expect_error(DENIED, "MISSING_SCOPE", stub.CreateSession, req, metadata=read_only)
        stub.ListSessions(pb.ListSessionsRequest(), metadata=read_only)
        # Health stays unauthenticated.
        health = health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=5)
        assert health.status == health_pb2.HealthCheckResponse.SERVING


def test_tenants_cannot_see_each_other(secured: ServerProcess) -> None:
    a, b = _md(KEY_A), _md(KEY_B)
    with grpc.insecure_channel(secured.target) as ch:
        stub = pb_grpc.ContextServiceStub(ch)
        sid = f"same-{uuid.uuid4().hex[:8]}"
        # The same client-chosen ID in two tenants: two sessions, no existence leak.
        assert (
            stub.CreateSession(pb.CreateSessionRequest(session_id=sid), metadata=a).session_id
            == sid
        )
        assert (
            stub.CreateSession(pb.CreateSessionRequest(session_id=sid), metadata=b).session_id
            == sid
        )
        stub.AppendMessages(
            pb.AppendMessagesRequest(
                session_id=sid,
                messages=[
                    user("secret of A"),
                    assistant("", [("c", "cat", {})]),
                    result("c", "A's file"),
                ],
            ),
            metadata=a,
        )
        only_a = f"a-only-{uuid.uuid4().hex[:8]}"
        stub.CreateSession(pb.CreateSessionRequest(session_id=only_a), metadata=a)
        calls: list[tuple[Callable[..., Any], PbMessage]] = [
            (stub.GetSession, pb.GetSessionRequest(session_id=only_a)),
            (
                stub.AppendMessages,
                pb.AppendMessagesRequest(session_id=only_a, messages=[user("x")]),
            ),
            (stub.ListMessages, pb.ListMessagesRequest(session_id=only_a)),
            (stub.BuildModelInput, pb.BuildModelInputRequest(session_id=only_a)),
            (stub.BuildModelInput, pb.BuildModelInputRequest(session_id=only_a, as_of_seq=1)),
            (stub.RollbackTurn, pb.RollbackTurnRequest(session_id=only_a)),
            (stub.PrepareCompaction, pb.PrepareCompactionRequest(session_id=only_a)),
            (stub.ListCompactions, pb.ListCompactionsRequest(session_id=only_a)),
            (stub.GetToolOutput, pb.GetToolOutputRequest(session_id=only_a, seq=3)),
            (stub.DeleteSession, pb.DeleteSessionRequest(session_id=only_a)),
        ]
        for fn, req in calls:
            err = expect_error(NOT_FOUND, "SESSION_NOT_FOUND", fn, req, metadata=b)
            assert "tenant-a" not in err.details()
        listed_b = stub.ListSessions(pb.ListSessionsRequest(page_size=1000), metadata=b).sessions
        assert only_a not in {s.session_id for s in listed_b}
        mi_b = stub.BuildModelInput(pb.BuildModelInputRequest(session_id=sid), metadata=b)
        assert list(mi_b.messages) == [] and mi_b.session_id == sid
        mi_a = stub.BuildModelInput(pb.BuildModelInputRequest(session_id=sid), metadata=a)
        assert mi_a.messages[0].content[0].text.text == "secret of A" and mi_a.session_id == sid
        # Tenant prefixes never leak into responses.
        assert (
            "~" not in stub.GetSession(pb.GetSessionRequest(session_id=sid), metadata=a).session_id
        )
        expect_error(
            grpc.StatusCode.INVALID_ARGUMENT,
            "INVALID_SESSION_ID",
            stub.GetSession,
            pb.GetSessionRequest(session_id=f"tenant-a~{only_a}"),
            metadata=b,
        )


def test_two_tenants_hammering_never_see_each_others_data(secured: ServerProcess) -> None:
    errors: list[BaseException] = []

    def worker(name: str, key: str) -> None:
        try:
            with grpc.insecure_channel(secured.target) as ch:
                stub = pb_grpc.ContextServiceStub(ch)
                md = _md(key)
                mine: set[str] = set()
                other = "bob" if name == "alice" else "alice"
                for _ in range(12):
                    s = stub.CreateSession(
                        pb.CreateSessionRequest(session_id=f"h-{uuid.uuid4().hex[:8]}"),
                        metadata=md,
                    )
                    mine.add(s.session_id)
                    for j in range(3):
                        r = stub.AppendMessages(
                            pb.AppendMessagesRequest(
                                session_id=s.session_id, messages=[user(f"{name} says {j}")]
                            ),
                            metadata=md,
                        )
                        assert all(m.content[0].text.text.startswith(name) for m in r.messages)
                    mi = stub.BuildModelInput(
                        pb.BuildModelInputRequest(session_id=s.session_id), metadata=md
                    )
                    texts = [m.content[0].text.text for m in mi.messages]
                    assert texts and all(t.startswith(name) for t in texts), texts
                    listed = stub.ListSessions(pb.ListSessionsRequest(page_size=1000), metadata=md)
                    ids = {x.session_id for x in listed.sessions}
                    assert mine <= ids
                    for sid in ids:
                        for m in stub.ListMessages(
                            pb.ListMessagesRequest(session_id=sid), metadata=md
                        ).messages:
                            assert not m.content[0].text.text.startswith(other)
        except BaseException as exc:
            errors.append(exc)

    threads = [
        threading.Thread(target=worker, args=(n, k))
        for n, k in (("alice", KEY_A), ("bob", KEY_B), ("alice", KEY_A), ("bob", KEY_B))
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors


def test_limits(backend_url: str, tmp_path: Path) -> None:
    # Fresh tenants: the quota counts every live session of a tenant in the database.
    key_c, key_d = f"limits-c-{uuid.uuid4().hex}", f"limits-d-{uuid.uuid4().hex}"
    tenant_c, tenant_d = f"lim-c-{uuid.uuid4().hex[:8]}", f"lim-d-{uuid.uuid4().hex[:8]}"
    (tmp_path / "keys").write_text(
        f"{tenant_c}:{hashlib.sha256(key_c.encode()).hexdigest()}\n"
        f"{tenant_d}:{hashlib.sha256(key_d.encode()).hexdigest()}\n"
    )
    server = ServerProcess(
        backend_url,
        log_dir=tmp_path,
        extra_args=[
            "--api-keys-file",
            str(tmp_path / "keys"),
            "--rate-limit-rps",
            "5",
            "--max-sessions-per-tenant",
            "2",
            "--max-stored-bytes-per-tenant",
            "4000",
        ],
    )
    server.start()
    try:
        with grpc.insecure_channel(server.target) as ch:
            stub = pb_grpc.ContextServiceStub(ch)
            md = _md(key_c)
            stub.CreateSession(pb.CreateSessionRequest(), metadata=md)
            stub.CreateSession(pb.CreateSessionRequest(), metadata=md)
            err = expect_error(
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                "SESSION_QUOTA_EXCEEDED",
                stub.CreateSession,
                pb.CreateSessionRequest(),
                metadata=md,
            )
            assert "quota" in err.details()
            sid = stub.ListSessions(pb.ListSessionsRequest(), metadata=md).sessions[0].session_id
            stub.AppendMessages(
                pb.AppendMessagesRequest(session_id=sid, messages=[user("x" * 2500)]), metadata=md
            )
            err = expect_error(
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                "STORAGE_QUOTA_EXCEEDED",
                stub.AppendMessages,
                pb.AppendMessagesRequest(session_id=sid, messages=[user("y" * 1500)]),
                metadata=md,
            )
            assert "4,000" in err.details()
            time.sleep(1)
            limited = None
            for _ in range(40):
                try:
                    stub.ListSessions(pb.ListSessionsRequest(), metadata=md)
                except grpc.RpcError as exc:
                    limited = call_error(exc)
                    break
            assert limited is not None and limited.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            status = next(
                status_pb2.Status.FromString(v)
                for k, v in limited.trailing_metadata()
                if k == "grpc-status-details-bin"
            )
            retry = error_details_pb2.RetryInfo()
            assert any(d.Unpack(retry) for d in status.details)
            assert retry.retry_delay.ToNanoseconds() > 0
            # The other tenant has its own bucket.
            stub.ListSessions(pb.ListSessionsRequest(), metadata=_md(key_d))
    finally:
        server.stop()


def test_safe_default_listen(backend_url: str, tmp_path: Path) -> None:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "ctxwarden",
            "serve",
            "--listen",
            "0.0.0.0:0",
            "--database-url",
            backend_url,
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert "--insecure-allow-unauthenticated" in proc.stderr
    server = ServerProcess(backend_url, log_dir=tmp_path, extra_args=["--no-reflection"])
    server.start()
    try:
        with grpc.insecure_channel(server.target) as ch:
            refl = reflection_pb2_grpc.ServerReflectionStub(ch)
            with pytest.raises(grpc.RpcError) as info:
                list(
                    refl.ServerReflectionInfo(
                        iter([reflection_pb2.ServerReflectionRequest(list_services="")]), timeout=5
                    )
                )
            assert info.value.code() == grpc.StatusCode.UNIMPLEMENTED
    finally:
        server.stop()


def _cert(
    subject: str,
    issuer_key: ec.EllipticCurvePrivateKey,
    issuer_name: x509.Name,
    key: ec.EllipticCurvePrivateKey,
    *,
    ca: bool = False,
    san: str = "",
) -> x509.Certificate:
    now = dt.datetime.now(dt.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
        .issuer_name(issuer_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if san:
        builder = builder.add_extension(
            x509.SubjectAlternativeName([x509.DNSName(san)]), critical=False
        )
    return builder.sign(issuer_key, hashes.SHA256())


def _pem(obj: ec.EllipticCurvePrivateKey | x509.Certificate) -> bytes:
    if hasattr(obj, "private_bytes"):
        return obj.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    return obj.public_bytes(serialization.Encoding.PEM)


def test_mutual_tls_tenant_from_client_certificate(backend_url: str, tmp_path: Path) -> None:
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "test-ca")])
    ca = _cert("test-ca", ca_key, ca_name, ca_key, ca=True)
    srv_key = ec.generate_private_key(ec.SECP256R1())
    srv = _cert("localhost", ca_key, ca_name, srv_key, san="localhost")
    cli_key = ec.generate_private_key(ec.SECP256R1())
    cli = _cert("tenant-m", ca_key, ca_name, cli_key)
    for name, obj in (("ca.pem", ca), ("srv.pem", srv), ("srv.key", srv_key)):
        (tmp_path / name).write_bytes(_pem(obj))
    server = ServerProcess(
        backend_url,
        log_dir=tmp_path,
        extra_args=[
            "--tls-cert",
            str(tmp_path / "srv.pem"),
            "--tls-key",
            str(tmp_path / "srv.key"),
            "--tls-client-ca",
            str(tmp_path / "ca.pem"),
        ],
        tls_ca=_pem(ca),
        tls_client=(_pem(cli_key), _pem(cli)),
    )
    server.start()
    try:
        port = server.port
        creds = grpc.ssl_channel_credentials(_pem(ca), _pem(cli_key), _pem(cli))
        opts = (("grpc.ssl_target_name_override", "localhost"),)
        with grpc.secure_channel(f"127.0.0.1:{port}", creds, options=opts) as ch:
            stub = pb_grpc.ContextServiceStub(ch)
            s = stub.CreateSession(pb.CreateSessionRequest(session_id="mtls-1"), timeout=10)
            assert s.session_id == "mtls-1"
        no_cert = grpc.ssl_channel_credentials(_pem(ca))
        with grpc.secure_channel(f"127.0.0.1:{port}", no_cert, options=opts) as ch:
            with pytest.raises(grpc.RpcError) as info:
                pb_grpc.ContextServiceStub(ch).ListSessions(pb.ListSessionsRequest(), timeout=5)
            assert info.value.code() == grpc.StatusCode.UNAVAILABLE
    finally:
        server.stop()
