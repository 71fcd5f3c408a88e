"""The docs' PostgreSQL commands (docs/operations/databases.md) work as written: migrate an
empty database, serve it."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import grpc
import pytest

from ctxwarden.v1 import context_service_pb2 as pb
from ctxwarden.v1 import context_service_pb2_grpc as pb_grpc
from ctxwarden.v1 import session_pb2 as ses
from tests.support.builders import user
from tests.support.databases import fresh_database
from tests.support.server import ServerProcess

README = Path(__file__).resolve().parents[2] / "docs" / "operations" / "databases.md"
README_URL = "postgresql+asyncpg://postgres@127.0.0.1:5432/ctxwarden"


def _commands() -> list[str]:
    found = re.search(r"```sh\n# PostgreSQL\n(.*?)```", README.read_text(), flags=re.S)
    assert found, "the README has a PostgreSQL example"
    return found.group(1).strip().splitlines()


@pytest.mark.parametrize("backend", [pytest.param("postgres", marks=pytest.mark.postgres)])
def test_readme_postgres_commands_migrate_and_serve(backend: str, tmp_path: Path) -> None:
    createdb, migrate, serve = _commands()
    assert createdb.startswith("createdb ") and createdb.endswith(" ctxwarden")
    assert README_URL in migrate and README_URL in serve
    # The test's own empty database stands in for the one createdb makes.
    with fresh_database(backend, tmp_path) as url:
        args = shlex.split(migrate.replace(README_URL, url))
        assert args[0] == ".venv/bin/ctxwarden"
        done = subprocess.run(
            [sys.executable, "-m", "ctxwarden", *args[1:]],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        assert "database schema is now at revision" in done.stdout, done.stdout
        serve_args = shlex.split(serve.replace(README_URL, url))
        assert serve_args[1:] == ["serve", "--database-url", url]
        server = ServerProcess(url, log_dir=tmp_path)
        server.start()
        try:
            with grpc.insecure_channel(server.target) as channel:
                stub = pb_grpc.ContextServiceStub(channel)
                created = stub.CreateSession(
                    pb.CreateSessionRequest(session=ses.Session(model="gpt-4o")), timeout=30
                )
                stub.AppendMessages(
                    pb.AppendMessagesRequest(
                        session_id=created.session_id, messages=[user("hello postgres")]
                    ),
                    timeout=30,
                )
                got = stub.BuildModelInput(
                    pb.BuildModelInputRequest(session_id=created.session_id), timeout=30
                )
            assert [m.content[0].text.text for m in got.messages] == ["hello postgres"]
        finally:
            server.stop()
