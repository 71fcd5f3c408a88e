"""What an operator reads when a command cannot use its database (issue #25).

Against a database that refuses the connection, does not exist or has no ctxwarden
schema, ``serve``, ``migrate``, ``export``, ``import`` and ``purge`` print one line that
says what to do and exit non-zero: no traceback, never the password. ``export`` (and
``import``, ``purge``) never create a SQLite file. ``--background-compactions`` without a
summariser is refused at startup, naming the flag to add.
"""

from __future__ import annotations

import os
import secrets
import subprocess
from pathlib import Path

import pytest
from sqlalchemy.engine import make_url

from ctxwarden.cli.parser import build_parser
from ctxwarden.config.build import settings
from tests.support.databases import SERVER_BACKEND_PARAMS, fresh_database, server_url
from tests.support.mariadb import free_port
from tests.support.server import CLI

PASSWORD = "s3cret-pw"
"""In every URL below: it must never be printed."""


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **(env or {})},
    )


def _commands(url: str, tmp_path: Path) -> dict[str, list[str]]:
    source = tmp_path / "in.jsonl"
    source.write_text("{}\n")
    db = ["--database-url", url]
    return {
        "serve": ["serve", *db, "--listen", "127.0.0.1:0"],
        "migrate": ["migrate", *db],
        "export": ["export", *db, "some-session", "-o", str(tmp_path / "out.jsonl")],
        "import": ["import", *db, str(source)],
        "purge": ["purge", *db, "--older-than", "30d"],
    }


def _one_line(done: subprocess.CompletedProcess[str]) -> str:
    """The command failed with one line of its own (log records, JSON, aside) and no
    traceback or password anywhere."""
    assert done.returncode != 0, done.stdout + done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    assert PASSWORD not in done.stdout + done.stderr
    lines = [ln for ln in done.stderr.splitlines() if ln.strip() and not ln.startswith("{")]
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("ctxwarden: "), lines
    return lines[0]


def _with_password(url: str) -> str:
    return make_url(url).set(password=PASSWORD).render_as_string(hide_password=False)


@pytest.mark.parametrize(
    "scheme", ["mysql+aiomysql://root", "postgresql+asyncpg://postgres"], ids=["mysql", "pg"]
)
def test_a_refused_connection_is_one_line(scheme: str, tmp_path: Path) -> None:
    url = f"{scheme}:{PASSWORD}@127.0.0.1:{free_port()}/ctxw"
    for name, argv in _commands(url, tmp_path).items():
        line = _one_line(_cli(*argv))
        assert "refused the connection: is the server running?" in line, (name, line)
        assert f"127.0.0.1:{make_url(url).port}/ctxw" in line, (name, line)
    assert not (tmp_path / "out.jsonl").exists()


@pytest.mark.parametrize("backend", SERVER_BACKEND_PARAMS)
def test_an_unknown_database_is_one_line(backend: str, tmp_path: Path) -> None:
    missing = f"ctxw_missing_{secrets.token_hex(4)}"
    parsed = make_url(server_url(backend)).set(database=missing)
    if backend == "postgres":  # trusts the test's user: a password is not checked
        parsed = parsed.set(password=PASSWORD)
    url = parsed.render_as_string(hide_password=False)
    for name, argv in _commands(url, tmp_path).items():
        line = _one_line(_cli(*argv))
        assert f"/{missing} does not exist: create it" in line, (name, line)


@pytest.mark.parametrize("backend", ["sqlite", *SERVER_BACKEND_PARAMS])
def test_a_database_without_the_schema_is_one_line(backend: str, tmp_path: Path) -> None:
    with fresh_database(backend, tmp_path, "noschema") as url:
        commands = _commands(url if backend != "postgres" else _with_password(url), tmp_path)
        del commands["migrate"]  # which is what makes the schema
        if backend == "sqlite":
            Path(make_url(url).database or "").touch()  # exists, but empty
            del commands["serve"]  # which makes a new SQLite database itself
        for name, argv in commands.items():
            line = _one_line(_cli(*argv))
            assert "has no ctxwarden schema: run `ctxwarden migrate --database-url" in line, (
                name,
                line,
            )


def test_export_import_and_purge_never_create_a_sqlite_file(tmp_path: Path) -> None:
    path = tmp_path / "typo.db"
    commands = _commands(f"sqlite:///{path}", tmp_path)
    for name in ("export", "import", "purge"):
        line = _one_line(_cli(*commands[name]))
        assert f"there is no SQLite database at {path}" in line, (name, line)
        assert not path.exists(), name
    assert not (tmp_path / "out.jsonl").exists()


def test_background_compactions_need_a_summariser(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'never.db'}"
    for argv, env in (
        (["--background-compactions", "2"], {}),
        ([], {"CTXWARDEN_BACKGROUND_COMPACTIONS": "1"}),
    ):
        done = _cli("serve", "--database-url", url, "--listen", "127.0.0.1:0", *argv, env=env)
        line = _one_line(done)
        assert done.returncode == 2
        assert "needs a summariser: add --summarizer" in line, line
        assert "--background-compactions 0" in line, line
    assert not (tmp_path / "never.db").exists()
    check = _cli("config", "check", env={"CTXWARDEN_BACKGROUND_COMPACTIONS": "2"})
    assert check.returncode == 2 and "needs a summariser" in check.stderr, check.stderr
    shown = _cli("config", "check")
    assert "background_compactions = 'auto (2 with a summariser, 0 without)'" in shown.stdout


def test_background_compactions_by_default_follow_the_summariser() -> None:
    parser = build_parser()
    plain = settings(parser.parse_args(["serve"]))
    with_summariser = settings(parser.parse_args(["serve", "--summarizer", "extractive"]))
    explicit = settings(
        parser.parse_args(["serve", "--summarizer", "extractive", "--background-compactions", "5"])
    )
    assert (plain.background_compactions, with_summariser.background_compactions) == (0, 2)
    assert explicit.background_compactions == 5
