"""RollbackTurn: failed turns, rewinds, and the recovery advice."""

from __future__ import annotations

from typing import Any

import grpc

from ctxwarden.v1 import context_service_pb2 as pb
from tests.e2e.conftest import NewSession, Stub
from tests.e2e.test_messages import append
from tests.support.builders import assistant, failed, result, user
from tests.support.errors import expect_error

RETRY = pb.RECOVERY_ACTION_RETRY
COMPACT = pb.RECOVERY_ACTION_COMPACT_AND_RETRY
FAIL = pb.RECOVERY_ACTION_FAIL


def rollback(stub: Stub, sid: str, **kw: Any) -> pb.RollbackTurnResponse:
    return stub.RollbackTurn(pb.RollbackTurnRequest(session_id=sid, **kw))


def test_rolls_back_trailing_failed_turn_and_its_tool_results(
    stub: Stub, new_session: NewSession
) -> None:
    sid = new_session().session_id
    append(
        stub,
        sid,
        user("q"),  # 1
        assistant("thinking", [("a", "read", {})]),  # 2
        result("a", "A"),  # 3
    )
    bad = assistant(calls=[("b", "read", {})], stop=4, error="429 Too Many Requests")
    append(stub, sid, bad, result("b", "B"), failed("rate limit exceeded (429)"))  # 4, 5, 6
    r = rollback(stub, sid)
    assert list(r.rolled_back_seqs) == [4, 5, 6]
    assert r.action == RETRY and r.retry_after.seconds == 2
    mi = stub.BuildModelInput(pb.BuildModelInputRequest(session_id=sid))
    assert [x.seq for x in mi.messages] == [1, 2, 3] and list(mi.notices) == []
    again = rollback(stub, sid)
    assert list(again.rolled_back_seqs) == [] and again.action == pb.RECOVERY_ACTION_UNSPECIFIED
    listed = stub.ListMessages(pb.ListMessagesRequest(session_id=sid, include_rolled_back=True))
    assert [x.state for x in listed.messages] == [1, 1, 1, 2, 2, 2]
    # The next append continues the dense sequence after the rolled-back rows.
    assert append(stub, sid, assistant("done")).messages[0].seq == 7


def test_backoff_then_fail(stub: Stub, new_session: NewSession) -> None:
    sid = new_session().session_id
    append(stub, sid, user("q"))
    seen = []
    for _ in range(4):
        append(stub, sid, failed("503 Service Unavailable: overloaded"))
        r = rollback(stub, sid)
        seen.append((r.action, r.retry_after.seconds))
    assert seen == [(RETRY, 2), (RETRY, 4), (RETRY, 8), (FAIL, 0)]
    # A successful answer resets the count.
    append(stub, sid, assistant("fine"))
    append(stub, sid, failed("connection reset by peer"))
    assert rollback(stub, sid).retry_after.seconds == 2


def test_overflow_and_fatal_classification(stub: Stub, new_session: NewSession) -> None:
    sid = new_session().session_id
    append(stub, sid, user("q"), failed("prompt is too long: 210000 tokens > 200000 maximum"))
    r = rollback(stub, sid)
    assert r.action == COMPACT and "overflow" in r.reason
    append(stub, sid, failed("invalid x-api-key"))
    assert rollback(stub, sid).action == FAIL
    # error_message in the request wins over the stored one
    append(stub, sid, failed("something odd"))
    assert rollback(stub, sid, error_message="context_length_exceeded").action == COMPACT


def test_rewind_to_seq(stub: Stub, new_session: NewSession) -> None:
    sid = new_session().session_id
    append(stub, sid, user("1"), assistant("2"), user("3"), assistant("4"))
    r = rollback(stub, sid, to_seq=2)
    assert list(r.rolled_back_seqs) == [3, 4]
    mi = stub.BuildModelInput(pb.BuildModelInputRequest(session_id=sid))
    assert [x.seq for x in mi.messages] == [1, 2]
    assert list(rollback(stub, sid, to_seq=0).rolled_back_seqs) == [1, 2]
    assert list(stub.BuildModelInput(pb.BuildModelInputRequest(session_id=sid)).messages) == []
    expect_error(grpc.StatusCode.INVALID_ARGUMENT, "INVALID_SEQ", rollback, stub, sid, to_seq=99)


def test_rollback_request_id_applies_once(stub: Stub, new_session: NewSession) -> None:
    sid = new_session().session_id
    append(stub, sid, user("q"), failed("429"))
    first = rollback(stub, sid, request_id="rb-1")
    append(stub, sid, failed("429"))
    second = rollback(stub, sid, request_id="rb-1")
    assert first == second and list(first.rolled_back_seqs) == [2]
    # The replay did not roll back the new failure.
    mi = stub.BuildModelInput(pb.BuildModelInputRequest(session_id=sid))
    assert [n.code for n in mi.notices] == ["FAILED_MESSAGE_OMITTED"]


def test_unknown_session(stub: Stub) -> None:
    expect_error(grpc.StatusCode.NOT_FOUND, "SESSION_NOT_FOUND", rollback, stub, "missing-1")


def test_the_providers_raw_error_decides_with_its_retry_delay(
    stub: Stub, new_session: NewSession
) -> None:
    sid = new_session().session_id
    append(stub, sid, user("q"), failed("the request failed"))
    overloaded = pb.ProviderError(
        http_status=429,
        body='{"type":"error","error":{"type":"rate_limit_error","message":"Rate limited."}}',
        headers={"Retry-After": "12"},
    )
    r = rollback(stub, sid, provider_error=overloaded)
    assert list(r.rolled_back_seqs) == [2]
    assert r.action == RETRY and r.retry_after.seconds == 12
    assert "rate_limit_error" in r.reason
    append(stub, sid, failed("again"))
    too_long = pb.ProviderError(
        http_status=400,
        body='{"error":{"code":"context_length_exceeded","message":"maximum context length"}}',
    )
    r = rollback(stub, sid, provider_error=too_long, error_message="ignored: provider wins")
    assert r.action == COMPACT
