"""Writes are safe whatever the MariaDB server's ``sql_mode`` (issue #25).

With ``NO_BACKSLASH_ESCAPES`` in the server's ``sql_mode`` a backslash is an ordinary
character inside a string literal, so a value escaped with backslashes (as the MySQL
drivers escape bytes) ends its literal at the first quote. These tests run a private
MariaDB server started in that mode and send titles, system prompts, message texts and
request IDs with quotes, backslashes and stacked statements through a real server: each
is stored verbatim, and nothing else changes (another tenant's session above all).
"""

from __future__ import annotations

import hashlib
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import grpc
import pymysql
import pytest
from google.protobuf import field_mask_pb2
from sqlalchemy import text
from sqlalchemy.exc import ProgrammingError

from ctxwarden.store.engine import make_engine
from ctxwarden.store.repository import Store
from ctxwarden.v1 import context_service_pb2 as pb
from ctxwarden.v1 import context_service_pb2_grpc as pb_grpc
from ctxwarden.v1 import session_pb2 as ses
from tests.support.builders import user
from tests.support.errors import expect_error
from tests.support.mariadb import MYSQL_ENV, PrivateMariaDB
from tests.support.server import ServerProcess, migrate_database

pytestmark = [pytest.mark.mysql]

SQL_MODE = "NO_BACKSLASH_ESCAPES,STRICT_TRANS_TABLES,NO_ENGINE_SUBSTITUTION"
KEY_A, KEY_B = "key-for-tenant-a-" + "q" * 20, "key-for-tenant-b-" + "r" * 20
INJECTION = "x'); UPDATE sessions SET system_prompt='pwned' WHERE 1=1; -- "
EXPLOIT = "x', 1); UPDATE sessions SET system_prompt=0x70776e6564 WHERE 1=1; -- "
"""Closes the settings blob's literal of a revision INSERT (backslash-escaped) and runs
an UPDATE of every tenant's sessions ("pwned" in hex: the payload needs no quote)."""
AWKWARD = [
    "it's",
    "back\\slash",
    "\\'",
    "\\",
    "ends with a backslash \\",
    "''",
    '"double" and `back`ticks',
    "\\0 \\n \\Z \x1a \n \r \t",
    "\\x27; DROP TABLE sessions; -- ",
    INJECTION,
    EXPLOIT,
    "_binary'\\' OR 1=1 -- ",
    "unicode ünïcödé ✓ 🙂 '\\'",
]


@pytest.fixture(scope="module")
def strict_mariadb() -> Iterator[PrivateMariaDB]:
    """A private MariaDB server whose global sql_mode has NO_BACKSLASH_ESCAPES."""
    import os

    if not os.environ.get(MYSQL_ENV):
        pytest.skip(f"{MYSQL_ENV} is not set")
    server = PrivateMariaDB(
        Path(tempfile.mkdtemp(prefix="ctxw-nbe-")), server_args=[f"--sql-mode={SQL_MODE}"]
    )
    try:
        server.start()
        yield server
    finally:
        server.close()


@pytest.fixture(scope="module")
def database_url(strict_mariadb: PrivateMariaDB) -> str:
    url = strict_mariadb.create_database()
    migrate_database(url)
    return url


@pytest.fixture(scope="module")
def secured(database_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    d = tmp_path_factory.mktemp("nbe")
    (d / "api-keys").write_text(
        f"tenant-a:{hashlib.sha256(KEY_A.encode()).hexdigest()}\n"
        f"tenant-b:{hashlib.sha256(KEY_B.encode()).hexdigest()}\n"
    )
    server = ServerProcess(
        database_url, log_dir=d, extra_args=["--api-keys-file", str(d / "api-keys")]
    )
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def stub(secured: ServerProcess) -> Iterator[pb_grpc.ContextServiceStub]:
    with grpc.insecure_channel(secured.target) as ch:
        yield pb_grpc.ContextServiceStub(ch)


def _md(key: str) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {key}"),)


def _scalar(mariadb: PrivateMariaDB, database_url: str, sql: str) -> object:
    conn = pymysql.connect(
        host="127.0.0.1",
        port=mariadb.port,
        user="root",
        password="",
        database=database_url.rsplit("/", 1)[1],
    )
    try:
        with conn.cursor() as cur:
            cur.execute(sql)
            row = cur.fetchone()
            assert row is not None
            return row[0]
    finally:
        conn.close()


def test_the_server_runs_without_backslash_escapes(
    strict_mariadb: PrivateMariaDB, database_url: str
) -> None:
    mode = _scalar(strict_mariadb, database_url, "SELECT @@GLOBAL.sql_mode")
    assert "NO_BACKSLASH_ESCAPES" in str(mode)


def test_awkward_titles_round_trip(stub: pb_grpc.ContextServiceStub) -> None:
    md = _md(KEY_A)
    for i, title in enumerate(AWKWARD):
        rid = f"create-{uuid.uuid4().hex}"
        req = pb.CreateSessionRequest(
            session=ses.Session(title=title, system_prompt=title), request_id=rid
        )
        created = stub.CreateSession(req, metadata=md, timeout=10)
        assert created.title == title and created.system_prompt == title
        # The request outcome (a blob) replays the same session.
        assert stub.CreateSession(req, metadata=md, timeout=10) == created
        sid = created.session_id
        got = stub.GetSession(pb.GetSessionRequest(session_id=sid), metadata=md, timeout=10)
        assert got.title == title and got.system_prompt == title

        # A settings revision (a blob) with the awkward text.
        new_title = title + " (renamed \\')"
        updated = stub.UpdateSession(
            pb.UpdateSessionRequest(
                session=ses.Session(session_id=sid, title=new_title),
                update_mask=field_mask_pb2.FieldMask(paths=["title"]),
            ),
            metadata=md,
            timeout=10,
        )
        assert updated.title == new_title

        # Messages go through the group committer (its one-round-trip script), with a
        # request record.
        append = pb.AppendMessagesRequest(
            session_id=sid,
            messages=[user(title, message_id=f"m-{i}")],
            request_id=f"append-{uuid.uuid4().hex}",
        )
        first = stub.AppendMessages(append, metadata=md, timeout=10)
        assert stub.AppendMessages(append, metadata=md, timeout=10) == first
        listed = stub.ListMessages(pb.ListMessagesRequest(session_id=sid), metadata=md, timeout=10)
        assert [m.content[0].text.text for m in listed.messages] == [title]
        got = stub.GetSession(pb.GetSessionRequest(session_id=sid), metadata=md, timeout=10)
        assert got.title == new_title and got.system_prompt == title


def test_a_nul_in_a_title_is_refused_cleanly(stub: pb_grpc.ContextServiceStub) -> None:
    expect_error(
        grpc.StatusCode.INVALID_ARGUMENT,
        "NUL_CHARACTER",
        stub.CreateSession,
        pb.CreateSessionRequest(session=ses.Session(title="a\x00'b")),
        metadata=_md(KEY_A),
    )


def test_a_stacked_statement_changes_no_other_session(
    stub: pb_grpc.ContextServiceStub, strict_mariadb: PrivateMariaDB, database_url: str
) -> None:
    victim = stub.CreateSession(
        pb.CreateSessionRequest(session=ses.Session(title="b", system_prompt="secret of b")),
        metadata=_md(KEY_B),
        timeout=10,
    )
    md = _md(KEY_A)
    payloads = (EXPLOIT, EXPLOIT.replace("--", "#"), INJECTION, INJECTION.replace("'", "\\'"))
    for payload in payloads:
        rid = f"r-{uuid.uuid4().hex}"
        s = stub.CreateSession(
            pb.CreateSessionRequest(session=ses.Session(title=payload), request_id=rid),
            metadata=md,
            timeout=10,
        )
        stub.UpdateSession(
            pb.UpdateSessionRequest(
                session=ses.Session(session_id=s.session_id, title=payload + "2"),
                update_mask=field_mask_pb2.FieldMask(paths=["title"]),
            ),
            metadata=md,
            timeout=10,
        )
        stub.AppendMessages(
            pb.AppendMessagesRequest(
                session_id=s.session_id, messages=[user(payload)], request_id=rid
            ),
            metadata=md,
            timeout=10,
        )
        got = stub.GetSession(pb.GetSessionRequest(session_id=s.session_id), metadata=md)
        assert got.title == payload + "2" and got.system_prompt == ""
    after = stub.GetSession(
        pb.GetSessionRequest(session_id=victim.session_id), metadata=_md(KEY_B), timeout=10
    )
    assert after.system_prompt == "secret of b"
    # The database itself (GetSession may answer from the server's memory).
    stored = _scalar(
        strict_mariadb,
        database_url,
        f"SELECT system_prompt FROM sessions WHERE session_id = 'tenant-b~{victim.session_id}'",
    )
    assert stored == "secret of b"
    pwned = _scalar(
        strict_mariadb, database_url, "SELECT COUNT(*) FROM sessions WHERE system_prompt = 'pwned'"
    )
    assert pwned == 0


async def test_only_the_append_writers_may_send_several_statements(database_url: str) -> None:
    """Ordinary pooled connections refuse a multi-statement script and run without
    NO_BACKSLASH_ESCAPES; the group committer's connections accept one."""
    store = Store(make_engine(database_url))
    try:
        async with store.engine.connect() as conn:
            mode = (await conn.execute(text("SELECT @@SESSION.sql_mode"))).scalar_one()
            assert "NO_BACKSLASH_ESCAPES" not in str(mode)
            with pytest.raises(ProgrammingError):
                await conn.exec_driver_sql("SELECT 1; SELECT 2")
        async with store.committer.engine.connect() as conn:
            mode = (await conn.execute(text("SELECT @@SESSION.sql_mode"))).scalar_one()
            assert "NO_BACKSLASH_ESCAPES" not in str(mode)
            raw = await conn.get_raw_connection()
            driver = raw.driver_connection
            assert driver is not None
            async with driver.cursor() as cur:
                await cur.execute("SELECT 1; SELECT 2")
                assert await cur.fetchall() == ((1,),)
                assert await cur.nextset()
                assert await cur.fetchall() == ((2,),)
    finally:
        await store.close()


async def test_bytes_stay_safe_in_a_session_without_backslash_escapes(database_url: str) -> None:
    """Belt and braces: should a session have NO_BACKSLASH_ESCAPES after all, bytes go
    in as hex literals and strings with doubled quotes; both come back verbatim."""
    blob = b"x\\'); DROP TABLE t; -- \x00\xff'\\"
    words = "it's \\' a \\\\ trap'); -- "
    engine = make_engine(database_url, pool_size=1)
    try:
        async with engine.connect() as conn:
            await conn.exec_driver_sql(
                "SET SESSION sql_mode = CONCAT(@@SESSION.sql_mode, ',NO_BACKSLASH_ESCAPES')"
            )
            await conn.exec_driver_sql("CREATE TEMPORARY TABLE t (b LONGBLOB, s LONGTEXT)")
            await conn.exec_driver_sql("INSERT INTO t VALUES (%s, %s)", (blob, words))
            rows = (await conn.exec_driver_sql("SELECT b, s FROM t")).all()
            assert [tuple(r) for r in rows] == [(blob, words)]
            await conn.rollback()
    finally:
        await engine.dispose()
