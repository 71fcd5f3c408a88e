"""The private MariaDB server of the outage tests: stop, kill, pause and resume act on it alone.

The helpers in tests/support/mariadb.py are what the outage tests rely on to take the
database away without touching the shared server, so they are checked here: a stopped or
killed server is gone and comes back on the same port with its data; a paused one accepts
connections but answers nothing until it is resumed.
"""

from __future__ import annotations

import pymysql
import pytest

from tests.support.mariadb import PrivateMariaDB

pytestmark = pytest.mark.db_outage


def _count(mariadb: PrivateMariaDB, database: str) -> int:
    conn = pymysql.connect(
        host="127.0.0.1", port=mariadb.port, user="root", password="", database=database
    )
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT COUNT(*) FROM t")
            row = cur.fetchone()
            assert row is not None
            return int(row[0])
    finally:
        conn.close()


@pytest.mark.parametrize("backend", [pytest.param("mysql", marks=pytest.mark.mysql)])
def test_private_mariadb_stops_pauses_and_comes_back(
    backend: str, private_mariadb: PrivateMariaDB
) -> None:
    db = private_mariadb.create_database().rsplit("/", 1)[1]
    private_mariadb.execute(f"CREATE TABLE `{db}`.t (id INT PRIMARY KEY) ENGINE=InnoDB")
    private_mariadb.execute(f"INSERT INTO `{db}`.t VALUES (1), (2)")
    port, pid = private_mariadb.port, private_mariadb.pid
    assert private_mariadb.url == f"mysql+aiomysql://root@127.0.0.1:{port}/test"
    assert private_mariadb.answers()

    with private_mariadb.paused():
        assert private_mariadb.running() and private_mariadb.pid == pid
        assert not private_mariadb.answers(timeout=0.5)
    assert private_mariadb.answers()

    with private_mariadb.down():
        assert not private_mariadb.running()
        assert not private_mariadb.answers(timeout=0.5)
    assert private_mariadb.port == port and private_mariadb.pid != pid
    assert _count(private_mariadb, db) == 2

    private_mariadb.kill()
    assert not private_mariadb.answers(timeout=0.5)
    private_mariadb.start()
    assert _count(private_mariadb, db) == 2

    private_mariadb.pause()
    private_mariadb.restart()  # resumes before it stops
    assert private_mariadb.answers() and not private_mariadb.is_paused
