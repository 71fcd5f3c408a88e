"""ForkSession against a real server: a fork starts as its source was at a seq,
shares that history, then diverges; lineage, errors, idempotency, deletion of
the source (and reuse of its ID), purge, rollbacks into inherited messages,
chains of forks, and a restart."""

from __future__ import annotations

import hashlib
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from ctxwarden.v1 import context_service_pb2 as pb
from ctxwarden.v1 import context_service_pb2_grpc as pb_grpc
from ctxwarden.v1 import message_pb2 as m
from ctxwarden.v1 import session_pb2 as ses
from tests.support.builders import assistant, failed, user
from tests.support.errors import expect_error
from tests.support.server import ServerProcess

Stub = pb_grpc.ContextServiceStub
INVALID = grpc.StatusCode.INVALID_ARGUMENT


def _sid(prefix: str = "f") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


def _source(stub: Stub, turns: int = 3, **fields: object) -> str:
    sid = _sid("src")
    stub.CreateSession(
        pb.CreateSessionRequest(
            session=ses.Session(system_prompt="You fork.", model="gpt-4o", **fields),  # type: ignore[arg-type]
            session_id=sid,
        )
    )
    for i in range(turns):
        _turn(stub, sid, f"q{i}")
    return sid


def _turn(stub: Stub, sid: str, text: str) -> None:
    stub.AppendMessages(
        pb.AppendMessagesRequest(session_id=sid, messages=[user(f"{text}?"), assistant(f"{text}!")])
    )


def _input(stub: Stub, sid: str, as_of_seq: int = 0) -> bytes:
    """BuildModelInput without what names the session (its ID, resume_token)."""
    req = pb.BuildModelInputRequest(session_id=sid)
    if as_of_seq:
        req.as_of_seq = as_of_seq
    mi = stub.BuildModelInput(req)
    mi.session_id = mi.resume_token = ""
    return mi.SerializeToString(deterministic=True)


def _history(stub: Stub, sid: str) -> list[tuple[int, str, int]]:
    page = stub.ListMessages(
        pb.ListMessagesRequest(session_id=sid, include_rolled_back=True, page_size=1000)
    )
    return [(x.seq, x.content[0].text.text if x.content else "", x.state) for x in page.messages]


def _fork(stub: Stub, sid: str, at_seq: int = 0, **kw: str) -> ses.Session:
    return stub.ForkSession(pb.ForkSessionRequest(session_id=sid, at_seq=at_seq, **kw))


def test_fork_shares_history_then_diverges(stub: Stub) -> None:
    src = _source(stub, turns=3)
    before = _input(stub, src, 7)
    fork = _fork(stub, src)
    assert fork.parent_session_id == src and fork.parent_seq == 6 and fork.last_seq == 6
    assert fork.system_prompt == "You fork." and fork.model == "gpt-4o"
    assert _input(stub, fork.session_id) == before
    _turn(stub, fork.session_id, "fork")
    _turn(stub, src, "source")
    assert [t for _, t, _ in _history(stub, fork.session_id)][-2:] == ["fork?", "fork!"]
    assert [t for _, t, _ in _history(stub, src)][-2:] == ["source?", "source!"]
    assert [s for s, _, _ in _history(stub, fork.session_id)] == list(range(1, 9))
    got = stub.GetSession(pb.GetSessionRequest(session_id=fork.session_id))
    assert (got.parent_session_id, got.parent_seq, got.last_seq) == (src, 6, 8)
    forks = stub.ListSessions(pb.ListSessionsRequest(parent_session_id=src)).sessions
    assert [s.session_id for s in forks] == [fork.session_id]
    assert (
        stub.ListSessions(pb.ListSessionsRequest(parent_session_id=fork.session_id)).sessions == []
    )
    # A message re-sent with an inherited message_id is found, not stored twice.
    first = _history(stub, fork.session_id)[0]
    stored = stub.ListMessages(pb.ListMessagesRequest(session_id=fork.session_id, page_size=1))
    again = stub.AppendMessages(
        pb.AppendMessagesRequest(
            session_id=fork.session_id,
            messages=[
                m.Message(
                    role=m.ROLE_USER,
                    content=stored.messages[0].content,
                    message_id=stored.messages[0].message_id,
                )
            ],
        )
    )
    assert again.last_seq == 8 and first[0] == 1


def test_fork_in_the_middle_equals_the_replay(stub: Stub) -> None:
    src = _source(stub, turns=4)
    stub.AppendMessages(pb.AppendMessagesRequest(session_id=src, messages=[failed("429")]))
    stub.RollbackTurn(pb.RollbackTurnRequest(session_id=src))
    plan = stub.PrepareCompaction(
        pb.PrepareCompactionRequest(session_id=src, keep_recent_tokens=10)
    )
    stub.CommitCompaction(
        pb.CommitCompactionRequest(
            session_id=src,
            plan_id=plan.plan_id,
            summary="S1",
            turn_prefix_summary="p" if plan.split_turn else "",
        )
    )
    _turn(stub, src, "after")
    last = stub.GetSession(pb.GetSessionRequest(session_id=src)).last_seq
    for at in range(1, last + 2):
        fork = _fork(stub, src, at)
        assert fork.parent_seq == at - 1
        assert _input(stub, fork.session_id) == _input(stub, src, at), at
        assert _input(stub, fork.session_id, at) == _input(stub, src, at), at


def test_fork_errors_and_idempotency(stub: Stub) -> None:
    src = _source(stub, turns=1)
    expect_error(INVALID, "INVALID_SEQ", _fork, stub, src, 4)
    expect_error(INVALID, "INVALID_SEQ", _fork, stub, src, -1)
    expect_error(grpc.StatusCode.NOT_FOUND, "SESSION_NOT_FOUND", _fork, stub, _sid())
    expect_error(INVALID, "INVALID_SESSION_ID", _fork, stub, src, new_session_id="a b")
    taken = _fork(stub, src, new_session_id=_sid("named"))
    assert taken.session_id.startswith("named-")
    expect_error(
        grpc.StatusCode.ALREADY_EXISTS,
        "SESSION_ALREADY_EXISTS",
        _fork,
        stub,
        src,
        new_session_id=taken.session_id,
    )
    one = _fork(stub, src, 2, request_id="r-1")
    _turn(stub, one.session_id, "own")
    again = _fork(stub, src, 2, request_id="r-1")
    assert again.session_id == one.session_id and again.last_seq == 3
    expect_error(INVALID, "REQUEST_ID_REUSED", _fork, stub, src, 3, request_id="r-1")
    assert len(stub.ListSessions(pb.ListSessionsRequest(parent_session_id=src)).sessions) == 2


def test_deleting_or_reusing_the_source_leaves_the_fork_alone(stub: Stub, backend_url: str) -> None:
    src = _source(stub, turns=2)
    stub.AppendMessages(pb.AppendMessagesRequest(session_id=src, messages=[failed("500")]))
    fork = _fork(stub, src)  # forked at the end, a failed message last
    seen, history = _input(stub, fork.session_id), _history(stub, fork.session_id)
    # The source rolls that failed turn back at the very point the fork was made.
    stub.RollbackTurn(pb.RollbackTurnRequest(session_id=src))
    stub.RollbackTurn(pb.RollbackTurnRequest(session_id=src, to_seq=1))
    assert _history(stub, fork.session_id) == history
    assert _input(stub, fork.session_id) == seen
    stub.DeleteSession(pb.DeleteSessionRequest(session_id=src))
    assert _input(stub, fork.session_id) == seen
    # The ID made again: a new, unrelated session; the fork reads the old one.
    stub.CreateSession(pb.CreateSessionRequest(session_id=src))
    stub.AppendMessages(pb.AppendMessagesRequest(session_id=src, messages=[user("new")]))
    assert _history(stub, fork.session_id) == history
    assert _input(stub, fork.session_id) == seen
    got = stub.GetSession(pb.GetSessionRequest(session_id=fork.session_id))
    assert got.parent_session_id == src
    assert stub.ListSessions(pb.ListSessionsRequest(parent_session_id=src)).sessions == []
    # Purge keeps what a fork reads, then removes it once the fork is gone.
    _purge(backend_url)
    assert _input(stub, fork.session_id) == seen
    _turn(stub, fork.session_id, "later")
    stub.DeleteSession(pb.DeleteSessionRequest(session_id=fork.session_id))
    assert _stored(backend_url, src) == 2  # the new incarnation and the retired one
    _purge(backend_url)
    assert _stored(backend_url, src) == 1


def _purge(url: str) -> None:
    cmd = [
        sys.executable,
        "-m",
        "ctxwarden",
        "purge",
        "--database-url",
        url,
        "--older-than",
        "0s",
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


def _stored(url: str, sid: str) -> int:
    """Session rows (live or deleted) whose key is ``sid`` or a retired ``sid#...``."""
    code = (
        "import asyncio, sys\n"
        "from sqlalchemy import func, or_, select\n"
        "from ctxwarden.store.engine import make_engine\n"
        "from ctxwarden.store.tables import S\n"
        "async def main():\n"
        "    e = make_engine(sys.argv[1])\n"
        "    async with e.connect() as c:\n"
        "        q = select(func.count()).where(or_(S.c.session_id == sys.argv[2],"
        " S.c.session_id.like(sys.argv[2] + '#%')))\n"
        "        print((await c.execute(q)).scalar())\n"
        "    await e.dispose()\n"
        "asyncio.run(main())\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, url, sid], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return int(done.stdout)


def test_rollback_into_inherited_messages_lowers_parent_seq(stub: Stub) -> None:
    src = _source(stub, turns=3)
    src_history = _history(stub, src)
    fork = _fork(stub, src)
    _turn(stub, fork.session_id, "own")
    stub.RollbackTurn(pb.RollbackTurnRequest(session_id=fork.session_id, to_seq=2))
    got = stub.GetSession(pb.GetSessionRequest(session_id=fork.session_id))
    assert got.parent_seq == 2 and got.last_seq == 8
    states = [s for _, _, s in _history(stub, fork.session_id)]
    assert states == [m.MESSAGE_STATE_ACTIVE] * 2 + [m.MESSAGE_STATE_ROLLED_BACK] * 6
    assert _history(stub, src) == src_history
    _turn(stub, fork.session_id, "again")
    mi = stub.BuildModelInput(pb.BuildModelInputRequest(session_id=fork.session_id))
    assert [x.content[0].text.text for x in mi.messages] == ["q0?", "q0!", "again?", "again!"]
    # A failed turn inherited at the fork point rolls back too.
    stub.AppendMessages(pb.AppendMessagesRequest(session_id=src, messages=[failed("429")]))
    tail = _fork(stub, src)
    done = stub.RollbackTurn(pb.RollbackTurnRequest(session_id=tail.session_id))
    assert list(done.rolled_back_seqs) == [7]
    assert stub.GetSession(pb.GetSessionRequest(session_id=tail.session_id)).parent_seq == 6
    assert _history(stub, src)[-1][2] == m.MESSAGE_STATE_ACTIVE


def test_source_rewind_before_the_fork_point_then_fork_rewind(stub: Stub) -> None:
    """The source hands the fork what it inherits before marking it; the fork,
    hot in memory meanwhile, then rewinds its own copy (found on PostgreSQL)."""
    src = _sid("src")
    stub.CreateSession(pb.CreateSessionRequest(session=ses.Session(model="gpt-4o"), session_id=src))
    for i in range(3):
        stub.AppendMessages(pb.AppendMessagesRequest(session_id=src, messages=[user(f"u{i}")]))
    fork = _fork(stub, src, at_seq=3)
    stub.BuildModelInput(pb.BuildModelInputRequest(session_id=fork.session_id))
    stub.RollbackTurn(pb.RollbackTurnRequest(session_id=src, to_seq=1))
    stub.RollbackTurn(pb.RollbackTurnRequest(session_id=fork.session_id, to_seq=1))
    active, gone = m.MESSAGE_STATE_ACTIVE, m.MESSAGE_STATE_ROLLED_BACK
    assert [s for _, _, s in _history(stub, fork.session_id)] == [active, gone]
    assert [s for _, _, s in _history(stub, src)] == [active, gone, gone]
    mi = stub.BuildModelInput(pb.BuildModelInputRequest(session_id=fork.session_id))
    assert [x.content[0].text.text for x in mi.messages] == ["u0"]
    # Forked at the very end, a source's rewind first hands the marked rows to the
    # hot fork (moving the fork's version on); the fork's own rewind still applies.
    src2 = _sid("src")
    stub.CreateSession(
        pb.CreateSessionRequest(session=ses.Session(model="gpt-4o"), session_id=src2)
    )
    for i in range(3):
        stub.AppendMessages(pb.AppendMessagesRequest(session_id=src2, messages=[user(f"v{i}")]))
    tail = _fork(stub, src2)
    stub.BuildModelInput(pb.BuildModelInputRequest(session_id=tail.session_id))
    stub.RollbackTurn(pb.RollbackTurnRequest(session_id=src2, to_seq=1))
    done = stub.RollbackTurn(pb.RollbackTurnRequest(session_id=tail.session_id, to_seq=2))
    assert list(done.rolled_back_seqs) == [3]
    assert [s for _, _, s in _history(stub, tail.session_id)] == [active, active, gone]


def test_forks_of_forks(stub: Stub) -> None:
    src = _source(stub, turns=2)
    a = _fork(stub, src, 3)
    _turn(stub, a.session_id, "a")
    b = _fork(stub, a.session_id, 5)
    _turn(stub, b.session_id, "b")
    texts = [t for _, t, _ in _history(stub, b.session_id)]
    assert texts == ["q0?", "q0!", "a?", "a!", "b?", "b!"]
    assert _input(stub, b.session_id, 5) == _input(stub, a.session_id, 5)
    assert _input(stub, b.session_id, 3) == _input(stub, src, 3)
    c = _fork(stub, b.session_id, 2)
    assert [t for _, t, _ in _history(stub, c.session_id)] == ["q0?"]
    stub.RollbackTurn(pb.RollbackTurnRequest(session_id=a.session_id, to_seq=1))
    assert [t for _, t, _ in _history(stub, b.session_id)] == texts


def test_forks_survive_a_restart(backend_url: str, tmp_path: Path) -> None:
    server = ServerProcess(backend_url, log_dir=tmp_path)
    server.start()
    try:
        with grpc.insecure_channel(server.target) as ch:
            stub = pb_grpc.ContextServiceStub(ch)
            src = _source(stub, turns=3)
            fork = _fork(stub, src, 5)
            _turn(stub, fork.session_id, "own")
            seen = _input(stub, fork.session_id)
            replays = [_input(stub, fork.session_id, at) for at in range(1, 8)]
            history = _history(stub, fork.session_id)
        server.restart()
        with grpc.insecure_channel(server.target) as ch:
            stub = pb_grpc.ContextServiceStub(ch)
            assert _input(stub, fork.session_id) == seen
            assert [_input(stub, fork.session_id, at) for at in range(1, 8)] == replays
            assert _history(stub, fork.session_id) == history
            got = stub.GetSession(pb.GetSessionRequest(session_id=fork.session_id))
            assert (got.parent_session_id, got.parent_seq) == (src, 4)
    finally:
        server.stop()


API_KEYS = {"tenant-a": "key-a", "tenant-b": "key-b"}


@pytest.fixture
def tenants(backend_url: str, tmp_path: Path) -> Iterator[ServerProcess]:
    keys = tmp_path / "api-keys"
    keys.write_text(
        "".join(f"fork-{t}:{hashlib.sha256(k.encode()).hexdigest()}\n" for t, k in API_KEYS.items())
    )
    server = ServerProcess(
        backend_url,
        log_dir=tmp_path,
        extra_args=["--api-keys-file", str(keys), "--max-sessions-per-tenant", "3"],
    )
    server.start()
    try:
        yield server
    finally:
        server.stop()


def test_forks_stay_in_their_tenant_and_count_toward_its_quota(tenants: ServerProcess) -> None:
    def md(tenant: str) -> tuple[tuple[str, str], ...]:
        return (("authorization", f"Bearer {API_KEYS[tenant]}"),)

    with grpc.insecure_channel(tenants.target) as ch:
        stub = pb_grpc.ContextServiceStub(ch)
        a, b = md("tenant-a"), md("tenant-b")
        src = stub.CreateSession(pb.CreateSessionRequest(session_id="shared"), metadata=a)
        stub.AppendMessages(
            pb.AppendMessagesRequest(session_id="shared", messages=[user("a's")]), metadata=a
        )
        assert src.session_id == "shared"
        expect_error(
            grpc.StatusCode.NOT_FOUND,
            "SESSION_NOT_FOUND",
            stub.ForkSession,
            pb.ForkSessionRequest(session_id="shared"),
            metadata=b,
        )
        stub.CreateSession(pb.CreateSessionRequest(session_id="shared"), metadata=b)
        fork = stub.ForkSession(pb.ForkSessionRequest(session_id="shared"), metadata=b)
        assert (
            stub.ListMessages(
                pb.ListMessagesRequest(session_id=fork.session_id), metadata=b
            ).messages
            == []
        )
        stub.ForkSession(pb.ForkSessionRequest(session_id="shared"), metadata=a)
        stub.ForkSession(pb.ForkSessionRequest(session_id="shared"), metadata=a)
        expect_error(
            grpc.StatusCode.RESOURCE_EXHAUSTED,
            "SESSION_QUOTA_EXCEEDED",
            stub.ForkSession,
            pb.ForkSessionRequest(session_id="shared"),
            metadata=a,
        )
