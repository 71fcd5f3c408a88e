"""A server loads the database driver of its URL only: on SQLite neither MySQL's
nor PostgreSQL's (~11 MiB at rest), on MySQL not asyncpg, on PostgreSQL not
aiomysql. Each case builds the server's engines and its error map in a fresh
interpreter and lists the drivers it imported."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

RUN = """
import json, sys
import ctxwarden.app.server
from ctxwarden.store.engine import append_engine, make_engine
from ctxwarden.store.errors import classify, driver_error_types

engine = make_engine(sys.argv[1])
append_engine(engine, 1)
driver_error_types(engine.dialect)
classify(RuntimeError("x"), engine.dialect)
print(json.dumps(sorted(m for m in ("aiomysql", "pymysql", "asyncpg") if m in sys.modules)))
"""


def _drivers(url: str) -> list[str]:
    done = subprocess.run(
        [sys.executable, "-c", RUN, url], capture_output=True, text=True, timeout=60, check=True
    )
    loaded: list[str] = json.loads(done.stdout.strip().splitlines()[-1])
    return loaded


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("sqlite:///{tmp}/db.sqlite", []),
        ("mysql://root@127.0.0.1:3306/test", ["aiomysql", "pymysql"]),
        ("postgresql://postgres@127.0.0.1:5432/test", ["asyncpg"]),
    ],
)
def test_a_server_loads_the_driver_of_its_url_only(
    url: str, expected: list[str], tmp_path: Path
) -> None:
    """Nothing connects: making the engines and the error map imports what they need."""
    assert _drivers(url.format(tmp=tmp_path)) == expected
