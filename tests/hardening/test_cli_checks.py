"""config check validates every setting; migrate says what it applied; the
startup line names the summariser; reflection v1 is served."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import grpc
from grpc_reflection.v1alpha import reflection_pb2

from tests.support.server import CLI, ServerProcess


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, *args], capture_output=True, text=True, timeout=120, env=dict(os.environ)
    )


def test_config_check_rejects_bad_values_and_shows_user_values(tmp_path: Path) -> None:
    conf = tmp_path / "bad.toml"
    conf.write_text(
        'max_message_bytes = -1\nappend_writers = -5\ndatabase_url = "oracle://h/db"\n'
        'listen = "127.0.0.1:99999"\nrequest_read_timeout = 0\n'
    )
    bad = _cli("config", "check", str(conf))
    assert bad.returncode == 2
    for text in ("max_message_bytes = -1", "append_writers = -5", "'oracle'", "1-65535"):
        assert text in bad.stderr, bad.stderr
    assert "request_read_timeout = 0" in bad.stderr
    good = _cli("config", "check")
    assert good.returncode == 0, good.stderr
    assert "append_writers = 'auto (1 on SQLite, 2 on MySQL and PostgreSQL)'" in good.stdout
    assert "= -1" not in good.stdout


def test_migrate_says_what_it_applied(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/m.db"
    first = _cli("migrate", "--database-url", url)
    assert first.returncode == 0 and first.stdout.startswith("applied "), first.stdout
    assert "0001" in first.stdout
    again = _cli("migrate", "--database-url", url)
    assert again.returncode == 0 and "already at revision" in again.stdout, again.stdout


def test_startup_line_names_the_summariser_and_reflection_v1(
    backend_url: str, tmp_path: Path
) -> None:
    extra = ["--summarizer", "extractive", "--log-level", "INFO"]
    server = ServerProcess(backend_url, log_dir=tmp_path, extra_args=extra)
    server.start()
    try:
        with grpc.insecure_channel(server.target) as ch:
            info = ch.stream_stream(
                "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo",
                request_serializer=reflection_pb2.ServerReflectionRequest.SerializeToString,
                response_deserializer=reflection_pb2.ServerReflectionResponse.FromString,
            )
            requests = [
                reflection_pb2.ServerReflectionRequest(list_services=""),
                reflection_pb2.ServerReflectionRequest(
                    file_containing_symbol="ctxwarden.v1.ContextService"
                ),
            ]
            listed, described = list(info(iter(requests), timeout=10))
            names = {s.name for s in listed.list_services_response.service}
            assert {"ctxwarden.v1.ContextService", "grpc.reflection.v1.ServerReflection"} <= names
            assert described.file_descriptor_response.file_descriptor_proto
    finally:
        server.stop()
    assert "summariser: extractive" in server.log_text()
