"""The command line: config check and precedence, operator commands, purge."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from sqlalchemy import create_engine, text

from ctxwarden.store.urls import sync_url
from ctxwarden.v1 import context_service_pb2 as pb
from ctxwarden.v1 import context_service_pb2_grpc as pb_grpc
from ctxwarden.v1 import session_pb2 as ses
from tests.support.builders import assistant, failed, result, user
from tests.support.server import ServerProcess

ROOT = Path(__file__).resolve().parents[2]


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ctxwarden", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **(env or {})},
    )


def test_config_check_and_precedence(tmp_path: Path) -> None:
    # The Deployment supplies the database URL from its Secret; the shipped file runs two
    # workers, which a SQLite file (the default without a URL) cannot have.
    shipped_config = str(ROOT / "deploy/k8s/base/config.toml")
    secret = {"CTXWARDEN_DATABASE_URL": "mysql+aiomysql://u:s3cret@db:3306/x"}
    shipped = cli("config", "check", shipped_config, env=secret)
    assert shipped.returncode == 0, shipped.stderr
    assert "max_hot_sessions = 250" in shipped.stdout and "workers = 2" in shipped.stdout
    on_sqlite = cli("config", "check", shipped_config)
    assert on_sqlite.returncode == 2 and "use --workers 1" in on_sqlite.stderr
    conf = tmp_path / "c.toml"
    conf.write_text(
        'database_url = "mysql+aiomysql://u:s3cret@db:3306/x"\nmax_hot_sessions = 7\n'
        "[summarizer]\ntimeout = 12.5\n"
    )
    out = cli("config", "check", str(conf))
    assert out.returncode == 0, out.stderr
    assert "max_hot_sessions = 7" in out.stdout and "summarizer_timeout = 12.5" in out.stdout
    assert "s3cret" not in out.stdout and "***" in out.stdout
    env_wins = cli("config", "check", str(conf), env={"CTXWARDEN_MAX_HOT_SESSIONS": "9"})
    assert "max_hot_sessions = 9" in env_wins.stdout
    conf.write_text("max_hot_session = 7\n")
    bad = cli("config", "check", str(conf))
    assert bad.returncode == 2 and "unknown settings max_hot_session" in bad.stderr


@pytest.fixture
def admin_server(backend_url: str, tmp_path: Path) -> Iterator[ServerProcess]:
    server = ServerProcess(backend_url, log_dir=tmp_path, extra_args=["--summarizer", "extractive"])
    server.start()
    try:
        yield server
    finally:
        server.stop()


def test_operator_commands(admin_server: ServerProcess) -> None:
    target = ["--target", admin_server.target]
    sid = f"ops-{uuid.uuid4().hex[:8]}"
    with grpc.insecure_channel(admin_server.target) as ch:
        stub = pb_grpc.ContextServiceStub(ch)
        stub.CreateSession(
            pb.CreateSessionRequest(
                session_id=sid,
                session=ses.Session(title="ops", policy=ses.ContextPolicy(keep_recent_tokens=40)),
            )
        )
        for i in range(4):
            stub.AppendMessages(
                pb.AppendMessagesRequest(
                    session_id=sid,
                    messages=[
                        user(f"please read file {i} " * 5),
                        assistant("", [(f"c{i}", "read", {"path": f"f{i}"})]),
                        result(f"c{i}", "data " * 30, name="read"),
                        assistant(f"file {i} is fine " * 3),
                    ],
                )
            )
        stub.AppendMessages(
            pb.AppendMessagesRequest(session_id=sid, messages=[failed("429 rate limit")])
        )
    listed = cli("sessions", "list", *target)
    assert listed.returncode == 0 and sid in listed.stdout and "CONTEXT TOKENS" in listed.stdout
    rolled = cli("rollback", *target, sid)
    assert (
        rolled.returncode == 0
        and "[17]" in rolled.stdout
        and "RECOVERY_ACTION_RETRY" in rolled.stdout
    )
    compacted = cli("compact", *target, sid)
    assert compacted.returncode == 0 and "summariser extractive" in compacted.stdout
    with grpc.insecure_channel(admin_server.target) as ch:
        stub = pb_grpc.ContextServiceStub(ch)
        listed_cps = stub.ListCompactions(pb.ListCompactionsRequest(session_id=sid))
    report = listed_cps.compactions[0].loss_report
    total = sum(c.total for c in report.categories)
    lost = sum(c.lost for c in report.categories)
    assert total > 0, report  # file paths and tool calls were compacted away
    # The loss report, as the API gives it, in one line and in the checkpoints' table.
    assert f"anchors: {lost} of {total} lost" in compacted.stdout, compacted.stdout
    shown = cli("sessions", "show", *target, sid)
    assert shown.returncode == 0
    assert "ANCHORS" in shown.stdout and f"{lost} of {total} lost" in shown.stdout
    for expected in (
        "summarised",
        "context",
        "rolled back",
        "Checkpoints:",
        "extractive",
        "Token breakdown",
        "compaction threshold",
    ):
        assert expected in shown.stdout, expected
    ctx = cli("context", *target, sid, "--format", "openai-chat")
    body = json.loads(ctx.stdout)
    assert body["messages"][0]["role"] == "user"
    assert "compacted" in body["messages"][0]["content"]
    missing = cli("sessions", "show", *target, "does-not-exist")
    assert missing.returncode == 1 and "NOT_FOUND" in missing.stderr


def test_purge_removes_only_old_deleted_sessions(
    admin_server: ServerProcess, backend_url: str
) -> None:
    keep, drop = f"keep-{uuid.uuid4().hex[:8]}", f"drop-{uuid.uuid4().hex[:8]}"
    with grpc.insecure_channel(admin_server.target) as ch:
        stub = pb_grpc.ContextServiceStub(ch)
        for sid in (keep, drop):
            stub.CreateSession(pb.CreateSessionRequest(session_id=sid))
            stub.AppendMessages(
                pb.AppendMessagesRequest(
                    session_id=sid, messages=[user("hi")], request_id=f"r-{sid}"
                )
            )
        stub.DeleteSession(pb.DeleteSessionRequest(session_id=drop))
    recent = cli("purge", "--database-url", backend_url, "--older-than", "1d")
    assert recent.returncode == 0 and "purged 0" in recent.stdout
    now = cli("purge", "--database-url", backend_url, "--older-than", "0s")
    assert now.returncode == 0, now.stderr
    engine = create_engine(sync_url(backend_url))
    with engine.connect() as conn:

        def count(sql: str, sid: str) -> int:
            return int(conn.execute(text(sql), {"s": sid}).scalar_one())

        for table in ("sessions", "messages", "session_revisions"):
            assert count(f"SELECT COUNT(*) FROM {table} WHERE session_id = :s", drop) == 0
            assert count(f"SELECT COUNT(*) FROM {table} WHERE session_id = :s", keep) >= 1
        assert count("SELECT COUNT(*) FROM request_records WHERE session_id = :s", drop) == 0
        assert count("SELECT COUNT(*) FROM request_records WHERE session_id = :s", keep) == 1
    engine.dispose()
