"""The docs (docs/testing.md), the README and CI name the system packages and the database
services the suite needs."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_readme_lists_every_system_package_the_suite_checks() -> None:
    listed = subprocess.run(
        [str(ROOT / "scripts" / "system_packages.sh"), "--all"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split()
    testing = (ROOT / "docs" / "testing.md").read_text()
    commands = re.findall(r"^apt-get install -y (.+)$", testing, re.M)
    assert len(commands) == 1, commands
    assert commands[0].split() == listed
    ci = (ROOT / ".ci" / "run").read_text()
    assert "scripts/system_packages.sh" in ci
    assert "scripts/system_packages.sh --check" in (ROOT / "scripts" / "test.sh").read_text()


def test_ci_and_readme_start_the_databases_with_services_sh() -> None:
    ci = (ROOT / ".ci" / "run").read_text()
    assert ci.index("scripts/services.sh") < ci.index("./scripts/test.sh")
    readme = (ROOT / "README.md").read_text()
    (command,) = re.findall(r"^scripts/services\.sh && .*?scripts/test\.sh$", readme, re.M | re.S)
    assert "CTXWARDEN_TEST_MYSQL_URL=mysql+aiomysql://root@127.0.0.1:3306/test" in command
    assert (
        "CTXWARDEN_TEST_POSTGRES_URL=postgresql+asyncpg://postgres@127.0.0.1:5432/test" in command
    )


def test_services_sh_leaves_answering_servers_alone() -> None:
    """Run where the suite runs (both servers up): nothing installed, started or restarted."""
    if not (
        os.environ.get("CTXWARDEN_TEST_MYSQL_URL") and os.environ.get("CTXWARDEN_TEST_POSTGRES_URL")
    ):
        pytest.skip("needs the MariaDB and PostgreSQL servers of CTXWARDEN_TEST_*_URL")
    done = subprocess.run(
        [str(ROOT / "scripts" / "services.sh")], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "mariadb: already answering at 127.0.0.1:3306 (left alone)",
        "postgres: already answering at 127.0.0.1:5432 (left alone)",
    ]
