"""Listening: an address is never shared, ports are checked, Unix sockets."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

import grpc

from ctxwarden.v1 import context_service_pb2 as pb
from ctxwarden.v1 import context_service_pb2_grpc as pb_grpc
from ctxwarden_client import Client
from tests.support.server import CLI, ServerProcess


def _serve(url: str, listen: str, *extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [*CLI, "serve", "--listen", listen, "--database-url", url, *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )


def _started(proc: subprocess.Popen[str]) -> str:
    """The bound address from the "ctxwarden listening on ..." line."""
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line.startswith("ctxwarden listening on "), (line, proc.stderr and proc.stderr.read())
    return line.split()[-1]


def _refused(url: str, listen: str, *extra: str) -> str:
    proc = _serve(url, listen, *extra)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 2, err
    return err


def _stop(proc: subprocess.Popen[str]) -> None:
    proc.terminate()
    proc.communicate(timeout=30)


def test_a_taken_port_is_refused(backend_url: str, tmp_path: Path) -> None:
    first = ServerProcess(backend_url, log_dir=tmp_path)
    first.start()
    try:
        other = f"sqlite:///{tmp_path}/other.db"
        err = _refused(other, f"127.0.0.1:{first.port}")
        assert "in use" in err
    finally:
        first.stop()


def test_ports_are_checked(backend_url: str) -> None:
    for listen in ("127.0.0.1:99999", "127.0.0.1:-1", "127.0.0.1:http", "nohostport"):
        err = _refused(backend_url, listen)
        assert "--listen" in err and repr(listen) in err, err


def test_unix_socket(backend_url: str, tmp_path: Path) -> None:
    path = tmp_path / "ctxw.sock"
    listen = f"unix:{path}"
    proc = _serve(backend_url, listen)  # no authentication needed: local like loopback
    try:
        assert _started(proc) == listen
        assert stat.S_IMODE(path.stat().st_mode) == 0o660
        with grpc.insecure_channel(listen) as ch:
            stub = pb_grpc.ContextServiceStub(ch)
            assert stub.CreateSession(pb.CreateSessionRequest(), timeout=10).session_id
        with Client(listen) as client:  # the Python client takes unix: targets
            assert client.create_session().session_id
        err = _refused(f"sqlite:///{tmp_path}/other.db", listen)
        assert "another server is listening" in err
    finally:
        proc.kill()
        proc.communicate(timeout=30)
    assert path.exists()  # stale: its server was killed
    again = _serve(backend_url, listen, "--unix-socket-mode", "0600")
    try:
        assert _started(again) == listen
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        with grpc.insecure_channel(listen) as ch:
            grpc.channel_ready_future(ch).result(timeout=10)
    finally:
        _stop(again)
