"""Durability and restore: restarts, kill -9, eviction, two processes."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from ctxwarden.v1 import context_service_pb2 as pb
from ctxwarden.v1 import context_service_pb2_grpc as pb_grpc
from ctxwarden.v1 import message_pb2 as m
from ctxwarden.v1 import session_pb2 as ses
from tests.support.builders import assistant, failed, result, user
from tests.support.server import ServerProcess


@pytest.fixture
def own_server(backend_url: str, tmp_path: Path) -> Iterator[ServerProcess]:
    """A server this test may stop, kill and restart without disturbing others."""
    proc = ServerProcess(backend_url, log_dir=tmp_path, extra_args=["--max-hot-sessions", "3"])
    proc.start()
    try:
        yield proc
    finally:
        proc.stop()


def _stub(target: str) -> tuple[grpc.Channel, pb_grpc.ContextServiceStub]:
    ch = grpc.insecure_channel(target)
    return ch, pb_grpc.ContextServiceStub(ch)


def _scripted_session(stub: pb_grpc.ContextServiceStub) -> str:
    sid = f"r-{uuid.uuid4().hex[:12]}"
    stub.CreateSession(
        pb.CreateSessionRequest(
            session_id=sid,
            session=ses.Session(
                system_prompt="You are a coding agent.",
                tools=[ses.ToolDefinition(name="read", parameters_json='{"type":"object"}')],
                model="gpt-4o",
                policy=ses.ContextPolicy(tool_output_max_lines=5),
                pinned_state="task: fix bug",
            ),
        )
    )
    stub.AppendMessages(
        pb.AppendMessagesRequest(
            session_id=sid,
            messages=[
                user("read a and b"),
                assistant("sure", [("a", "read", {"path": "a"}), ("b", "read", {"path": "b"})]),
                result("a", "\n".join(str(i) for i in range(100))),
                user("go on"),
                failed("overloaded"),
                assistant(calls=[("c", "read", {"path": "c"})]),
            ],
        )
    )
    return sid


def _input_bytes(stub: pb_grpc.ContextServiceStub, sid: str) -> bytes:
    mi = stub.BuildModelInput(pb.BuildModelInputRequest(session_id=sid, max_output_tokens=1000))
    return mi.SerializeToString(deterministic=True)


def test_restart_gives_byte_identical_model_input(own_server: ServerProcess) -> None:
    ch, stub = _stub(own_server.target)
    sid = _scripted_session(stub)
    before = _input_bytes(stub, sid)
    session_before = stub.GetSession(pb.GetSessionRequest(session_id=sid))
    ch.close()
    own_server.restart()
    ch, stub = _stub(own_server.target)
    assert _input_bytes(stub, sid) == before
    assert stub.GetSession(pb.GetSessionRequest(session_id=sid)) == session_before
    ch.close()


def test_evicted_sessions_restore_identically(own_server: ServerProcess) -> None:
    ch, stub = _stub(own_server.target)
    sids = [_scripted_session(stub) for _ in range(6)]  # more than --max-hot-sessions 3
    first = {sid: _input_bytes(stub, sid) for sid in sids}
    for sid in reversed(sids):  # every call restores an evicted session
        assert _input_bytes(stub, sid) == first[sid]
    ch.close()


def test_resume_tokens_survive_eviction(own_server: ServerProcess) -> None:
    ch, stub = _stub(own_server.target)
    sids = [_scripted_session(stub) for _ in range(6)]  # more than --max-hot-sessions 3
    held = {sid: stub.BuildModelInput(pb.BuildModelInputRequest(session_id=sid)) for sid in sids}
    for sid in sids:
        stub.AppendMessages(pb.AppendMessagesRequest(session_id=sid, messages=[user("next")]))
    for sid in sids:  # every call restores an evicted session
        token = held[sid].resume_token
        delta = stub.BuildModelInput(pb.BuildModelInputRequest(session_id=sid, resume_token=token))
        full = stub.BuildModelInput(pb.BuildModelInputRequest(session_id=sid))
        assert delta.messages_offset > 0
        assert [*held[sid].messages[: delta.messages_offset], *delta.messages] == list(
            full.messages
        )
    ch.close()


def test_kill_9_while_streaming_loses_no_acknowledged_message(own_server: ServerProcess) -> None:
    ch, stub = _stub(own_server.target)
    sid = f"k-{uuid.uuid4().hex[:12]}"
    stub.CreateSession(pb.CreateSessionRequest(session_id=sid))
    acked: list[tuple[str, int]] = []
    killed = threading.Event()

    def requests() -> Iterator[pb.AppendMessagesRequest]:
        for i in range(1000):
            if killed.is_set():
                return
            yield pb.AppendMessagesRequest(
                session_id=sid, messages=[user(f"msg {i}", message_id=f"m-{i}")]
            )

    def killer() -> None:
        while len(acked) < 300:
            time.sleep(0.001)
        own_server.kill9()
        killed.set()

    t = threading.Thread(target=killer)
    t.start()
    with pytest.raises(grpc.RpcError):
        for resp in stub.StreamMessages(requests(), timeout=60):
            acked.append((resp.messages[0].message_id, resp.messages[0].seq))
    t.join()
    ch.close()
    assert len(acked) >= 300

    own_server.start()
    ch, stub = _stub(own_server.target)
    stored: list[tuple[str, int]] = []
    token = ""
    while True:
        page = stub.ListMessages(
            pb.ListMessagesRequest(session_id=sid, page_size=1000, page_token=token)
        )
        stored += [(x.message_id, x.seq) for x in page.messages]
        token = page.next_page_token
        if not token:
            break
    ids = [mid for mid, _ in stored]
    assert len(ids) == len(set(ids)), "a message was stored twice"
    assert [seq for _, seq in stored] == list(range(1, len(stored) + 1))
    assert set(acked) <= set(stored), "an acknowledged message was lost"
    # The client can resume by re-sending from its last acknowledged message.
    resend = [user(f"msg {i}", message_id=f"m-{i}") for i in range(len(acked), 1000)]
    for chunk in range(0, len(resend), 200):
        stub.AppendMessages(
            pb.AppendMessagesRequest(session_id=sid, messages=resend[chunk : chunk + 200])
        )
    final = stub.GetSession(pb.GetSessionRequest(session_id=sid))
    assert final.last_seq == 1000
    ch.close()


def test_two_processes_never_lose_or_duplicate(backend_url: str, tmp_path: Path) -> None:
    a = ServerProcess(backend_url, log_dir=tmp_path / "a")
    b = ServerProcess(backend_url, log_dir=tmp_path / "b")
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    a.start()
    b.start()
    try:
        cha, sa = _stub(a.target)
        chb, sb = _stub(b.target)
        sid = f"two-{uuid.uuid4().hex[:10]}"
        sa.CreateSession(pb.CreateSessionRequest(session_id=sid))
        per_writer = 60
        aborted = {"a": 0, "b": 0}
        errors: list[BaseException] = []

        def writer(name: str, stub: pb_grpc.ContextServiceStub) -> None:
            try:
                for i in range(per_writer):
                    req = pb.AppendMessagesRequest(
                        session_id=sid, messages=[user(f"{name}{i}", message_id=f"{name}-{i}")]
                    )
                    for _ in range(200):
                        try:
                            stub.AppendMessages(req, timeout=30)
                            break
                        except grpc.RpcError as err:
                            if err.code() != grpc.StatusCode.ABORTED:
                                raise
                            aborted[name] += 1
                    else:
                        raise AssertionError("gave up after 200 ABORTED retries")
            except BaseException as exc:  # surfaced below
                errors.append(exc)

        threads = [
            threading.Thread(target=writer, args=("a", sa)),
            threading.Thread(target=writer, args=("b", sb)),
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors, errors
        listed = sa.ListMessages(pb.ListMessagesRequest(session_id=sid, page_size=1000)).messages
        ids = [x.message_id for x in listed]
        assert sorted(ids) == sorted(
            [f"a-{i}" for i in range(per_writer)] + [f"b-{i}" for i in range(per_writer)]
        )
        assert [x.seq for x in listed] == list(range(1, 2 * per_writer + 1))
        # Both replicas agree on the input once their copies are refreshed.
        assert aborted["a"] + aborted["b"] > 0, "the writers never actually conflicted"
        cha.close()
        chb.close()
    finally:
        a.stop()
        b.stop()


def test_calibration_learned_by_the_last_append_survives_a_restart(
    own_server: ServerProcess,
) -> None:
    ch, stub = _stub(own_server.target)
    sid = f"cal-{uuid.uuid4().hex[:12]}"
    stub.CreateSession(pb.CreateSessionRequest(session_id=sid))  # heuristic tokenizer
    stub.AppendMessages(
        pb.AppendMessagesRequest(session_id=sid, messages=[user("count these words " * 40)])
    )
    answer = assistant("ok")
    answer.usage.input_tokens = 500  # the provider counted far more than the estimate
    answer.usage.output_tokens = 2
    answer.stop_reason = m.STOP_REASON_STOP
    stub.AppendMessages(pb.AppendMessagesRequest(session_id=sid, messages=[answer]))
    before = stub.BuildModelInput(pb.BuildModelInputRequest(session_id=sid))
    assert before.tokens.estimate_error_ratio != 1.0  # the append calibrated the session
    ch.close()
    own_server.stop()
    own_server.start()
    ch, stub = _stub(own_server.target)
    after = stub.BuildModelInput(pb.BuildModelInputRequest(session_id=sid))
    assert after.tokens == before.tokens
    ch.close()
