"""Structured logs: one access line per RPC in the server's stderr, no content."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import grpc
import pytest

from ctxwarden.v1 import context_service_pb2 as pb
from ctxwarden.v1 import context_service_pb2_grpc as pb_grpc
from tests.observability.conftest import SERVICE, observed_server
from tests.support.builders import assistant, user


def _json_lines(path: Path) -> list[dict[str, Any]]:
    out = []
    for line in path.read_text().splitlines():
        if line.strip():
            out.append(json.loads(line))  # every line is JSON, startup lines included
    return out


def _calls(target: str, secret: str) -> tuple[str, list[tuple[str, str]]]:
    """Make some RPCs; returns the session id and the expected (method, code) list.

    CreateSession carries request_id = "req-" + the session id."""
    sid = f"log-{uuid.uuid4().hex[:10]}"
    tenant = (("x-ctxwarden-tenant", "acme"), ("x-request-id", "hdr-7"))
    with grpc.insecure_channel(target) as ch:
        stub = pb_grpc.ContextServiceStub(ch)
        stub.CreateSession(
            pb.CreateSessionRequest(session_id=sid, request_id=f"req-{sid}"),
            metadata=tenant,
            timeout=10,
        )
        stub.AppendMessages(
            pb.AppendMessagesRequest(session_id=sid, messages=[user(secret), assistant(secret)]),
            timeout=10,
        )
        list(
            stub.StreamMessages(
                iter(
                    [
                        pb.AppendMessagesRequest(session_id=sid, messages=[user(secret)]),
                        pb.AppendMessagesRequest(session_id=sid, messages=[assistant(secret)]),
                    ]
                ),
                timeout=10,
            )
        )
        stub.BuildModelInput(pb.BuildModelInputRequest(session_id=sid), timeout=10)
        with pytest.raises(grpc.RpcError):
            stub.GetSession(pb.GetSessionRequest(session_id=sid + "-missing"), timeout=10)
    expected = [
        ("CreateSession", "OK"),
        ("AppendMessages", "OK"),
        ("StreamMessages", "OK"),
        ("BuildModelInput", "OK"),
        ("GetSession", "NOT_FOUND"),
    ]
    return sid, [(f"{SERVICE}/{name}", code) for name, code in expected]


def test_json_access_log_one_line_per_rpc(backend_url: str, tmp_path: Path) -> None:
    secret = f"SECRET-{uuid.uuid4().hex}"
    with observed_server(backend_url, tmp_path, "--log-level", "INFO") as server:
        sid, expected = _calls(server.target, secret)
        log_path = server.log_path()
    text = log_path.read_text()
    assert secret not in text  # never message content at INFO
    records = _json_lines(log_path)
    access = [r for r in records if r["logger"] == "ctxwarden.access"]
    assert [(r["method"], r["code"]) for r in access] == expected
    for r in access:
        assert r["level"] in ("INFO", "WARNING")
        assert r["ts"].endswith("Z")
        assert isinstance(r["latency_ms"], float | int) and r["latency_ms"] >= 0
        assert r["peer"].startswith(("ipv4:127.0.0.1:", "ipv6:"))
        assert "request" not in r
    create, append, stream, build, missing = access
    assert create["session_id"] == sid
    # Metadata never names the tenant: this server has no authentication.
    assert create["tenant"] == ""
    assert create["request_id"] == f"req-{sid}"  # the request's own id wins over x-request-id
    assert append["session_id"] == sid and append["tenant"] == ""
    assert append["request_id"] == ""
    assert stream["session_id"] == sid
    assert (stream["requests"], stream["responses"]) == (2, 2)
    assert build["session_id"] == sid
    assert missing["session_id"] == sid + "-missing"
    # Startup and shutdown lines are JSON too.
    messages = [r["msg"] for r in records if r["logger"] == "ctxwarden"]
    assert any(msg.startswith("serving on") for msg in messages)
    assert messages[-1] == "stopped"


def test_text_log_format(backend_url: str, tmp_path: Path) -> None:
    secret = f"SECRET-{uuid.uuid4().hex}"
    with observed_server(
        backend_url, tmp_path, "--log-level", "INFO", "--log-format", "text"
    ) as server:
        _sid, expected = _calls(server.target, secret)
        log_path = server.log_path()
    text = log_path.read_text()
    assert secret not in text
    access = [line for line in text.splitlines() if " ctxwarden.access: " in line]
    assert len(access) == len(expected)
    for line, (method, code) in zip(access, expected, strict=True):
        assert f"method={method} code={code} latency_ms=" in line
        with pytest.raises(json.JSONDecodeError):
            json.loads(line)


def test_debug_logs_request_content(backend_url: str, tmp_path: Path) -> None:
    """Only at DEBUG does the access line carry the request (content included)."""
    secret = f"SECRET-{uuid.uuid4().hex}"
    with observed_server(backend_url, tmp_path, "--log-level", "DEBUG") as server:
        _calls(server.target, secret)
        log_path = server.log_path()
    records = _json_lines(log_path)
    append = [
        r
        for r in records
        if r["logger"] == "ctxwarden.access" and r.get("method") == f"{SERVICE}/AppendMessages"
    ]
    assert len(append) == 1
    assert secret in append[0]["request"]
