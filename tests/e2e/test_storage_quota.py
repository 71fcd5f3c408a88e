"""--max-stored-bytes-per-tenant bounds what a tenant stores: session, user and
project states count, deleted sessions count until they are purged, and a purge
gives the bytes back (user and project states go with the last session that
shares them)."""

from __future__ import annotations

import hashlib
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest
from sqlalchemy import create_engine, text

from ctxwarden.store.urls import sync_url
from ctxwarden.v1 import context_service_pb2 as pb
from ctxwarden.v1 import context_service_pb2_grpc as pb_grpc
from ctxwarden.v1 import session_pb2 as ses
from tests.e2e.test_state import delta, plain
from tests.support.builders import user
from tests.support.errors import call_error, error_info, expect_error
from tests.support.server import ServerProcess

Stub = pb_grpc.ContextServiceStub
QUOTA = 60_000
EXHAUSTED = grpc.StatusCode.RESOURCE_EXHAUSTED


@dataclass
class Tenant:
    name: str
    key: str

    @property
    def md(self) -> tuple[tuple[str, str], ...]:
        return (("authorization", f"Bearer {self.key}"),)


@dataclass
class QuotaServer:
    stub: Stub
    url: str
    tenants: list[Tenant]
    rules: Path


@pytest.fixture
def quota_server(backend_url: str, tmp_path: Path) -> Iterator[QuotaServer]:
    """A server with a bytes quota and two fresh tenants (the database is shared
    with other tests: fresh tenants start from nothing)."""
    tenants = [Tenant(f"q{uuid.uuid4().hex[:10]}", f"key-{uuid.uuid4().hex}") for _ in range(2)]
    keys = tmp_path / "keys"
    keys.write_text(
        "".join(f"{t.name}:{hashlib.sha256(t.key.encode()).hexdigest()}\n" for t in tenants)
    )
    # Purge the deleted sessions of these tenants only, whenever deleted.
    rules = tmp_path / "retention.toml"
    rules.write_text(
        "".join(f"[tenants.{t.name}]\npurge_deleted_after_days = 1e-9\n" for t in tenants)
    )
    server = ServerProcess(
        backend_url,
        log_dir=tmp_path,
        extra_args=[
            "--api-keys-file",
            str(keys),
            "--max-stored-bytes-per-tenant",
            str(QUOTA),
        ],
    )
    server.start()
    try:
        with grpc.insecure_channel(server.target) as channel:
            yield QuotaServer(pb_grpc.ContextServiceStub(channel), backend_url, tenants, rules)
    finally:
        server.stop()


def _purge(qs: QuotaServer) -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "ctxwarden",
            "purge",
            "--database-url",
            qs.url,
            "--tenant-retention",
            str(qs.rules),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr


def _stored(url: str, tenant: str) -> int:
    """What the tenant's rows hold in the database: message bodies and states,
    of live and deleted sessions alike."""
    engine = create_engine(sync_url(url))
    try:
        with engine.connect() as conn:
            total = 0
            for sql in (
                "SELECT COALESCE(SUM(LENGTH(m.data)), 0) FROM messages m "
                "JOIN sessions s ON s.session_id = m.session_id WHERE s.tenant_id = :t",
                "SELECT COALESCE(SUM(LENGTH(state_json)), 0) FROM sessions WHERE tenant_id = :t",
                "SELECT COALESCE(SUM(LENGTH(state_json)), 0) FROM user_states WHERE tenant_id = :t",
                "SELECT COALESCE(SUM(LENGTH(state_json)), 0) FROM project_states "
                "WHERE tenant_id = :t",
            ):
                total += int(conn.execute(text(sql), {"t": tenant}).scalar_one())
            return total
    finally:
        engine.dispose()


def _fill_and_delete(stub: Stub, t: Tenant) -> grpc.RpcError | None:
    """One round of the loop: create, fill (a message and a session state), delete."""
    try:
        sid = stub.CreateSession(pb.CreateSessionRequest(), metadata=t.md).session_id
        stub.AppendMessages(
            pb.AppendMessagesRequest(
                session_id=sid,
                messages=[user("m" * 4_000)],
                state_delta=delta(session={"notes": "n" * 3_000}),
            ),
            metadata=t.md,
        )
        stub.DeleteSession(pb.DeleteSessionRequest(session_id=sid), metadata=t.md)
    except grpc.RpcError as exc:
        return exc
    return None


def test_deleted_sessions_count_until_they_are_purged(quota_server: QuotaServer) -> None:
    qs, t = quota_server, quota_server.tenants[0]
    refused = None
    rounds = 0
    while refused is None and rounds < 5 * QUOTA // 7_000:  # unbounded: 5x the quota
        refused = _fill_and_delete(qs.stub, t)
        rounds += 1
    assert refused is not None, f"{rounds} rounds stored {_stored(qs.url, t.name):,} bytes"
    assert call_error(refused).code() == EXHAUSTED, refused
    assert error_info(refused).reason == "STORAGE_QUOTA_EXCEEDED"
    assert rounds <= QUOTA // 7_000 + 1
    assert _stored(qs.url, t.name) <= QUOTA
    # The purge removes the deleted sessions and gives their bytes back.
    _purge(qs)
    assert _stored(qs.url, t.name) < 7_000
    assert _fill_and_delete(qs.stub, t) is None


def _state_append(stub: Stub, t: Tenant, sid: str, **parts: dict[str, object]) -> None:
    stub.AppendMessages(
        pb.AppendMessagesRequest(session_id=sid, state_delta=delta(**parts)), metadata=t.md
    )


def test_state_writes_count_toward_the_quota(quota_server: QuotaServer) -> None:
    qs, t = quota_server, quota_server.tenants[1]
    stub = qs.stub
    owner = ses.Session(user_id="ann", project_id="apollo")
    sid = stub.CreateSession(pb.CreateSessionRequest(session=owner), metadata=t.md).session_id
    _state_append(stub, t, sid, session={"a": "x" * 40_000})
    for scope in ("user", "project"):
        expect_error(
            EXHAUSTED,
            "STORAGE_QUOTA_EXCEEDED",
            _state_append,
            stub,
            t,
            sid,
            **{scope: {"b": "y" * 30_000}},
        )
    got = stub.GetSession(pb.GetSessionRequest(session_id=sid), metadata=t.md)
    assert not got.HasField("user_state") and not got.HasField("project_state")
    assert plain(got.state) == {"a": "x" * 40_000}
    # A smaller state makes room.
    _state_append(stub, t, sid, session={"a": None})
    _state_append(stub, t, sid, user={"b": "y" * 30_000}, project={"c": "z" * 20_000})
    more = {"d": "w" * 10_000}
    expect_error(EXHAUSTED, "STORAGE_QUOTA_EXCEEDED", _state_append, stub, t, sid, session=more)
    # Deleted, the session and the states it shares still count; purged, they go
    # (the last session of that user and project is gone) and their bytes with them.
    stub.DeleteSession(pb.DeleteSessionRequest(session_id=sid), metadata=t.md)
    again = stub.CreateSession(pb.CreateSessionRequest(session=owner), metadata=t.md).session_id
    expect_error(EXHAUSTED, "STORAGE_QUOTA_EXCEEDED", _state_append, stub, t, again, session=more)
    got = stub.GetSession(pb.GetSessionRequest(session_id=again), metadata=t.md)
    assert plain(got.user_state) == {"b": "y" * 30_000}  # shared with the new session
    stub.DeleteSession(pb.DeleteSessionRequest(session_id=again), metadata=t.md)
    _purge(qs)
    assert _stored(qs.url, t.name) == 0
    fresh = stub.CreateSession(pb.CreateSessionRequest(session=owner), metadata=t.md).session_id
    got = stub.GetSession(pb.GetSessionRequest(session_id=fresh), metadata=t.md)
    assert not got.HasField("user_state") and not got.HasField("project_state")
    _state_append(stub, t, fresh, session={"a": "x" * 25_000}, user={"b": "y" * 25_000})
