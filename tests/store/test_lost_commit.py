"""A batch whose connection is lost after its COMMIT was sent is settled, not guessed.

On MySQL an append batch is one script that ends with COMMIT (store.batch_write); on
PostgreSQL its statements are followed by a COMMIT of its own. When the connection is
lost, the writer opens another, ends the lost one's server thread (PostgreSQL: backend)
and looks for the batch's first row: found, the callers are told it was stored; not
found, the batch is written again; not known (no connection), they are told the
outcome is unknown. A proxy between the writer and the database cuts the connection at
the chosen moment: before the script (the COMMIT) reaches the server, or after the
server answered its COMMIT.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from dataclasses import replace
from pathlib import Path

import pytest
from sqlalchemy import create_engine, func, insert, select, update
from sqlalchemy.engine import make_url

from ctxwarden.core.session import Session
from ctxwarden.store.codec import message_row_values
from ctxwarden.store.engine import make_engine
from ctxwarden.store.errors import ConcurrentWrite, StoreUnavailable
from ctxwarden.store.models import MessageRow, SessionRow
from ctxwarden.store.repository import Store
from ctxwarden.store.urls import sync_url
from ctxwarden.util import ids
from tests.store.test_group_commit import _advanced, _msg, _sessions
from tests.support.databases import fresh_database
from tests.support.server import migrate_database

MYSQL = [pytest.param("mysql", marks=pytest.mark.mysql)]
BOTH = [*MYSQL, pytest.param("postgres", marks=pytest.mark.postgres)]
PG_COMMIT = b"Q\x00\x00\x00\x0bCOMMIT\x00"
"""PostgreSQL's simple Query message "COMMIT" (asyncpg sends COMMIT so)."""
PG_READY = b"Z\x00\x00\x00\x05"
"""PostgreSQL's ReadyForQuery: the last message of the answer to a query."""
MORE_RESULTS = 0x0008
"""SERVER_MORE_RESULTS_EXISTS: an OK packet that is not a script's last answer."""


def _lenenc(payload: bytes, pos: int) -> int:
    """The position after the length-encoded integer at ``pos``."""
    first = payload[pos]
    return pos + {0xFC: 3, 0xFD: 4, 0xFE: 9}.get(first, 1)


def _final_answer(packets: bytearray) -> bool:
    """Whether the server's packets so far hold a script's last answer (an OK packet
    without MORE_RESULTS, or an error)."""
    while len(packets) >= 4:
        length = int.from_bytes(packets[:3], "little")
        if len(packets) < 4 + length:
            return False
        payload = bytes(packets[4 : 4 + length])
        del packets[: 4 + length]
        if payload[:1] == b"\xff":
            return True
        if payload[:1] == b"\x00":
            pos = _lenenc(payload, _lenenc(payload, 1))
            status = int.from_bytes(payload[pos : pos + 2], "little")
            if not status & MORE_RESULTS:
                return True
    return False


class CuttingProxy:
    """Forwards TCP to MariaDB (PostgreSQL: ``postgres``); cuts the first connection
    that sends a script ending in COMMIT (PostgreSQL: a COMMIT), either before
    forwarding it (``when="request"``) or once the server answered all of it
    (``when="reply"``). ``refuse_after`` refuses every later connection."""

    def __init__(
        self,
        target: tuple[str, int],
        when: str,
        refuse_after: bool = False,
        on_cut: Callable[[], None] | None = None,
        postgres: bool = False,
    ) -> None:
        self.target = target
        self.when = when
        self.postgres = postgres
        self.refuse_after = refuse_after
        self.on_cut = on_cut
        """Run at the cut, before the connection is closed."""
        self.cut = asyncio.Event()
        self.port = 0
        self._server: asyncio.Server | None = None

    async def __aenter__(self) -> CuttingProxy:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()

    async def _serve(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        if self.cut.is_set() and self.refuse_after:
            client_w.close()
            return
        server_r, server_w = await asyncio.open_connection(*self.target)
        armed = asyncio.Event()
        up = asyncio.create_task(self._upstream(client_r, server_w, client_w, armed))
        down = asyncio.create_task(self._downstream(server_r, client_w, server_w, armed))
        await asyncio.wait((up, down), return_when=asyncio.FIRST_COMPLETED)
        for task in (up, down):
            task.cancel()
        for w in (client_w, server_w):
            w.close()

    async def _upstream(
        self,
        reader: asyncio.StreamReader,
        server: asyncio.StreamWriter,
        client: asyncio.StreamWriter,
        armed: asyncio.Event,
    ) -> None:
        tail = b""
        marker = PG_COMMIT if self.postgres else b";COMMIT"
        while data := await reader.read(65536):
            scripted = marker in tail + data
            tail = data[-16:]
            if scripted and not self.cut.is_set():
                if self.when == "request":
                    self.cut.set()
                    if self.on_cut is not None:
                        self.on_cut()
                    return  # the script never reaches the server
                armed.set()
            server.write(data)
            await server.drain()

    async def _downstream(
        self,
        reader: asyncio.StreamReader,
        client: asyncio.StreamWriter,
        server: asyncio.StreamWriter,
        armed: asyncio.Event,
    ) -> None:
        held = bytearray()
        while data := await reader.read(65536):
            if armed.is_set():
                held += data  # the script's answers are never delivered
                if PG_READY in held if self.postgres else _final_answer(held):
                    self.cut.set()
                    return
                continue
            client.write(data)
            await client.drain()


@contextlib.asynccontextmanager
async def _store_behind(proxy: CuttingProxy, url: str) -> AsyncIterator[Store]:
    proxied = make_url(url).set(host="127.0.0.1", port=proxy.port)
    if proxy.postgres:  # in clear, for the proxy to read (asyncpg prefers TLS)
        proxied = proxied.update_query_dict({"ssl": "disable"})
    store = Store(make_engine(proxied.render_as_string(hide_password=False)), append_writers=1)
    try:
        yield store
    finally:
        await store.close()


def _target(url: str) -> tuple[str, int]:
    parsed = make_url(url)
    default = 5432 if parsed.get_backend_name() == "postgresql" else 3306
    return parsed.host or "127.0.0.1", parsed.port or default


async def _stored(url: str, sid: str) -> tuple[int, int]:
    """(message rows, session version), read past the proxy."""
    engine = make_engine(url)
    try:
        async with engine.connect() as conn:
            rows = await conn.scalar(
                select(func.count()).select_from(MessageRow).where(MessageRow.session_id == sid)
            )
            version = await conn.scalar(
                select(SessionRow.version).where(SessionRow.session_id == sid)
            )
    finally:
        await engine.dispose()
    return int(rows or 0), int(version or 0)


async def _append_first(store: Store, sid: str) -> None:
    await store.messages.append_messages(
        _advanced(sid, 1), expected_version=0, messages=[_msg(1)], record=None
    )


@pytest.mark.parametrize("backend", BOTH)
@pytest.mark.parametrize(
    ("when", "verdict"),
    [
        ("reply", "committed"),  # COMMIT answered, the answer lost: reported stored
        ("request", "not committed"),  # the script never arrived: written again
    ],
)
async def test_a_lost_batch_is_settled_and_stored_once(
    backend: str, when: str, verdict: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level("INFO", logger="ctxwarden.store.group_commit")
    with fresh_database(backend, tmp_path, "ctxw_lost") as url:
        migrate_database(url)
        async with (
            CuttingProxy(_target(url), when, postgres=backend == "postgres") as proxy,
            _store_behind(proxy, url) as store,
        ):
            (sid,) = await _sessions(store, 1)
            await _append_first(store, sid)
            assert proxy.cut.is_set()
            assert await _stored(url, sid) == (1, 1)  # stored once
            await store.messages.append_messages(
                _advanced(sid, 2), expected_version=1, messages=[_msg(2)], record=None
            )
        assert await _stored(url, sid) == (2, 2)
    settled = [r.getMessage() for r in caplog.records if "lost append batch" in r.getMessage()]
    assert settled == [f"a lost append batch was {verdict}"]


@pytest.mark.parametrize("backend", BOTH)
async def test_an_outcome_that_cannot_be_settled_is_reported_unknown(
    backend: str, tmp_path: Path
) -> None:
    with fresh_database(backend, tmp_path, "ctxw_lost") as url:
        migrate_database(url)
        async with (
            CuttingProxy(
                _target(url), "reply", refuse_after=True, postgres=backend == "postgres"
            ) as proxy,
            _store_behind(proxy, url) as store,
        ):
            now = ids.now_us()
            sid = f"gc-{ids.new_id()}"
            await store.sessions.create(Session(session_id=sid, create_time_us=now), None)
            with pytest.raises(StoreUnavailable, match="whether it was stored is unknown"):
                await _append_first(store, sid)
        # It was stored: the server answered the COMMIT before the cut.
        assert await _stored(url, sid) == (1, 1)


@pytest.mark.parametrize("backend", MYSQL)
async def test_the_same_message_stored_by_another_writer_is_not_taken_for_the_batch(
    backend: str, tmp_path: Path
) -> None:
    """While the batch's connection is lost (its script never arrived), another writer
    (a resend through another replica) stores the same message at the same seq, planned
    at another time. The batch did not commit, and settling must not take that row for
    its own: the batch is written again and loses its compare-and-set, instead of being
    reported stored."""
    with fresh_database(backend, tmp_path, "ctxw_lost") as url:
        migrate_database(url)
        message = _msg(1)
        sid = ""

        def resent_elsewhere() -> None:
            resent = replace(message, seq=1, create_time_us=message.create_time_us + 1)
            engine = create_engine(sync_url(url))
            try:
                with engine.begin() as conn:
                    conn.execute(insert(MessageRow).values(**message_row_values(sid, resent)))
                    conn.execute(
                        update(SessionRow)
                        .where(SessionRow.session_id == sid)
                        .values(version=1, last_seq=1)
                    )
            finally:
                engine.dispose()

        async with (
            CuttingProxy(_target(url), "request", on_cut=resent_elsewhere) as proxy,
            _store_behind(proxy, url) as store,
        ):
            (sid,) = await _sessions(store, 1)
            with pytest.raises(ConcurrentWrite):
                await store.messages.append_messages(
                    _advanced(sid, 1), expected_version=0, messages=[message], record=None
                )
            assert proxy.cut.is_set()
        assert await _stored(url, sid) == (1, 1)  # the other writer's row, once
