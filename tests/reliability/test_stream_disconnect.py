"""Clients that vanish in the middle of a StreamMessages stream.

Two ways: the client cancels the call, or the client process is killed with
SIGKILL. Each way runs a few rounds against one server, with requests of 3
messages each still in flight at the disconnect: three rounds where the
client reads every answer until it goes away, and one where it stops reading
first (a slow reader: the server is blocked sending answers when the client
goes). Then the test looks at the database directly and at what the server says:

- every acknowledged request is stored, and any request the server went on
  to store is stored whole: the stored requests are exactly the first N
  requests sent, never part of one;
- the server stays alive and SERVING; its own view of the session
  (GetSession, BuildModelInput) matches the database as soon as the server
  has finished with the call (its in-flight gauge), and the session takes the
  next append at once (a write the cancelled call left in flight is waited
  for, not raced: tests/store/test_abandoned_writes.py);
- a disconnect raises no exception in the server (when the call is cancelled
  while the server waits to send an answer, which the slow reader makes
  certain, the stream wrapper is closed later from another context) and is
  not logged as an error (grpcio reports the unsent answer at ERROR; the
  server turns that into one INFO line).
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import pytest
from sqlalchemy import Table, create_engine, select

from ctxwarden.store.models import MessageRow
from ctxwarden.v1 import context_service_pb2 as pb
from ctxwarden.v1 import context_service_pb2_grpc as pb_grpc
from ctxwarden.v1 import message_pb2 as m
from tests.reliability.harness import SERVICE, error_log_lines
from tests.reliability.stream_client import (
    MESSAGES_PER_REQUEST,
    SLOW_READER_OPTIONS,
    message_id,
    stream_request,
)
from tests.support.agents import sync_database_url
from tests.support.observed import ObservedServer, wait_for_sample

REQUESTS = 300
ROUNDS = ((4, False), (11, False), (25, False), (3, True))
"""(acknowledged requests before the disconnect, slow reader), one round each."""
STALL_SECONDS = 1.0
"""How long a slow reader leaves answers unread before it goes away."""
CLIENT = Path(__file__).with_name("stream_client.py")


@dataclass
class Round:
    session_id: str
    slow_reader: bool
    acked: list[int]
    """last_seq of every acknowledged request, in order."""
    view_last_seq: int = 0
    """GetSession right after the disconnect."""
    input_last_seq: int = 0
    """BuildModelInput right after the disconnect."""
    stored: list[tuple[int, str, int]] = field(default_factory=list)
    """(seq, message_id, state) in the database right after the disconnect."""
    first_append: str = ""
    """"OK" or the status code of the first append after the disconnect."""
    appended_seq: int = 0
    """Where the further append landed (after one retry when the first was ABORTED)."""


@dataclass
class Disconnects:
    how: str
    rounds: list[Round]
    alive: bool
    health: int
    log: str


def _rows(database_url: str, session_id: str) -> list[tuple[int, str, int]]:
    table: Table = MessageRow.__table__  # type: ignore[assignment]
    engine = create_engine(sync_database_url(database_url))
    try:
        with engine.connect() as conn:
            rows = conn.execute(
                select(table.c.seq, table.c.message_id, table.c.state)
                .where(table.c.session_id == session_id)
                .order_by(table.c.seq)
            ).all()
    finally:
        engine.dispose()
    return [(r.seq, r.message_id, r.state) for r in rows]


async def _cancel_after(target: str, session_id: str, acks: int, slow: bool) -> list[int]:
    options = SLOW_READER_OPTIONS if slow else []
    async with grpc.aio.insecure_channel(target, options=options) as channel:
        call = pb_grpc.ContextServiceStub(channel).StreamMessages(timeout=120)

        async def send() -> None:
            for i in range(REQUESTS):
                await call.write(stream_request(session_id, i))

        sender = asyncio.create_task(send())
        acked: list[int] = []
        while len(acked) < acks:
            resp = await call.read()
            assert isinstance(resp, pb.AppendMessagesResponse)
            acked.append(resp.last_seq)
        if slow:
            await asyncio.sleep(STALL_SECONDS)
        call.cancel()
        sender.cancel()
        await asyncio.gather(sender, return_exceptions=True)
    return acked


def _kill_after(target: str, session_id: str, acks: int, slow: bool) -> list[int]:
    args = [sys.executable, str(CLIENT), target, session_id, str(REQUESTS)]
    client = subprocess.Popen(
        [*args, str(acks)] if slow else args, stdout=subprocess.PIPE, text=True
    )
    assert client.stdout is not None
    acked: list[int] = []
    try:
        while len(acked) < acks:
            line = client.stdout.readline()
            assert line.startswith("ack "), f"client said {line!r}"
            acked.append(int(line.split()[2]))
        if slow:
            assert client.stdout.readline() == "stalled\n"
            time.sleep(STALL_SECONDS)
    finally:
        client.send_signal(signal.SIGKILL)
        client.wait()
        client.stdout.close()
    return acked


def _round(
    how: str, server: ObservedServer, stub: pb_grpc.ContextServiceStub, acks: int, slow: bool
) -> Round:
    sid = f"disc-{how}-{uuid.uuid4().hex[:8]}"
    stub.CreateSession(pb.CreateSessionRequest(session_id=sid), timeout=30)
    if how == "cancel":
        acked = asyncio.run(_cancel_after(server.target, sid, acks, slow))
    else:
        acked = _kill_after(server.target, sid, acks, slow)
    # The server has finished with the call (it noticed the disconnect, or it
    # answered the last request it read): what it says next must match the database.
    wait_for_sample(
        server.metrics, "ctxwarden_rpcs_in_flight", 0, method=f"{SERVICE}/StreamMessages"
    )
    r = Round(sid, slow, acked)
    r.view_last_seq = stub.GetSession(pb.GetSessionRequest(session_id=sid), timeout=30).last_seq
    mi = stub.BuildModelInput(pb.BuildModelInputRequest(session_id=sid), timeout=30)
    r.input_last_seq = mi.last_seq
    r.stored = _rows(server.database_url, sid)
    after = pb.AppendMessagesRequest(
        session_id=sid,
        messages=[
            m.Message(
                role=m.ROLE_USER,
                message_id="after-disconnect",
                content=[m.ContentBlock(text=m.TextContent(text="still there?"))],
            )
        ],
    )
    try:
        resp = stub.AppendMessages(after, timeout=30)
        r.first_append = "OK"
    except grpc.RpcError as err:
        r.first_append = err.code().name
        if err.code() != grpc.StatusCode.ABORTED:
            raise
        resp = stub.AppendMessages(after, timeout=30)  # ABORTED: reload and retry, once
    r.appended_seq = resp.messages[0].seq
    return r


@pytest.fixture(scope="module", params=["cancel", "kill"])
def disconnects(
    request: pytest.FixtureRequest, backend_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Disconnects:
    how: str = request.param
    server = ObservedServer(backend_url, log_dir=tmp_path_factory.mktemp(f"disconnect-{how}"))
    server.start()
    try:
        with grpc.insecure_channel(server.target) as channel:
            stub = pb_grpc.ContextServiceStub(channel)
            rounds = [_round(how, server, stub, acks, slow) for acks, slow in ROUNDS]
            health = _health(channel)
        assert server.proc is not None
        alive = server.proc.poll() is None
        log = server.log_text()
    finally:
        server.stop()
    return Disconnects(how, rounds, alive, health, log)


def _health(channel: grpc.Channel) -> int:
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    check = health_pb2_grpc.HealthStub(channel).Check
    status: int = check(health_pb2.HealthCheckRequest(service=SERVICE), timeout=10).status
    return status


def test_acknowledged_requests_are_stored_and_whole(disconnects: Disconnects) -> None:
    for r in disconnects.rounds:
        k = MESSAGES_PER_REQUEST
        assert r.acked == [k * (i + 1) for i in range(len(r.acked))]
        seqs = [seq for seq, _, _ in r.stored]
        assert seqs == list(range(1, len(seqs) + 1))
        whole, rest = divmod(len(seqs), k)
        assert rest == 0, f"{r.session_id}: a request was stored in part: {r.stored[-k:]}"
        assert whole >= len(r.acked), f"{r.session_id}: acknowledged requests are missing"
        want = [message_id(i, j) for i in range(whole) for j in range(k)]
        assert [mid for _, mid, _ in r.stored] == want, f"{r.session_id}: not the first requests"
        assert {state for _, _, state in r.stored} <= {m.MESSAGE_STATE_ACTIVE}


def test_server_stays_healthy_and_consistent(disconnects: Disconnects) -> None:
    from grpc_health.v1 import health_pb2

    assert disconnects.alive
    assert disconnects.health == health_pb2.HealthCheckResponse.SERVING
    # A commit in flight at the disconnect still lands in the database; the
    # server's hot copy of the session must not miss it.
    got = [(r.view_last_seq, r.input_last_seq, r.first_append) for r in disconnects.rounds]
    assert got == [(len(r.stored), len(r.stored), "OK") for r in disconnects.rounds]
    for r in disconnects.rounds:
        assert r.appended_seq == len(r.stored) + 1


def _send_failures(log: str) -> list[str]:
    return [x for x in error_log_lines(log) if "ExecuteBatchError" in x]


def test_disconnects_raise_no_exception_in_the_server(disconnects: Disconnects) -> None:
    errors = error_log_lines(disconnects.log)
    unexpected = [x for x in errors if "ExecuteBatchError" not in x]
    assert not unexpected, unexpected[:3]


def test_disconnects_are_not_logged_as_errors(disconnects: Disconnects) -> None:
    assert not _send_failures(disconnects.log), _send_failures(disconnects.log)[:3]
