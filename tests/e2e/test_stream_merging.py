"""StreamMessages writes requests already waiting for one session as one run.

Every request is sent before any answer is read, so the server finds them
buffered; each answer must still be the one the request gets alone (compared
with the same requests sent one per call), errors end the stream in order, and
the merging shows in ``ctxwarden_stream_requests_merged_total``.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator, Sequence

import grpc
import pytest

from ctxwarden.v1 import context_service_pb2 as pb
from ctxwarden.v1 import context_service_pb2_grpc as pb_grpc
from ctxwarden.v1 import message_pb2 as m
from ctxwarden.v1 import session_pb2 as ses
from tests.e2e.test_storage_quota import QuotaServer, Tenant, quota_server
from tests.observability.conftest import ObservedServer, observed_server, sample, scrape
from tests.support.builders import assistant, result, user
from tests.support.errors import call_error

MERGED = "ctxwarden_stream_requests_merged_total"
__all__ = ["quota_server"]  # a fixture of test_storage_quota's, used here too
Stub = pb_grpc.ContextServiceStub


@pytest.fixture(scope="module")
def merging(
    backend_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[ObservedServer, Stub]]:
    """A server of its own (its metrics count only this module's calls)."""
    with (
        observed_server(backend_url, tmp_path_factory.mktemp("merging")) as server,
        grpc.insecure_channel(server.target) as channel,
    ):
        yield server, Stub(channel)


def _session(stub: Stub) -> str:
    sid = f"mg-{uuid.uuid4().hex[:12]}"
    stub.CreateSession(
        pb.CreateSessionRequest(session=ses.Session(system_prompt="be brief"), session_id=sid)
    )
    return sid


def _request(sid: str, *messages: m.Message, request_id: str = "") -> pb.AppendMessagesRequest:
    return pb.AppendMessagesRequest(session_id=sid, messages=list(messages), request_id=request_id)


def _stream(
    stub: Stub, requests: Sequence[pb.AppendMessagesRequest]
) -> list[pb.AppendMessagesResponse]:
    """Every request written at once, then every answer read."""
    return list(stub.StreamMessages(iter(requests), timeout=30))


def _plain(response: pb.AppendMessagesResponse) -> pb.AppendMessagesResponse:
    """The answer without what differs between two sessions (IDs, times)."""
    out = pb.AppendMessagesResponse()
    out.CopyFrom(response)
    for msg in out.messages:
        msg.ClearField("message_id")
        msg.ClearField("create_time")
    return out


def _history(stub: Stub, sid: str) -> list[m.Message]:
    page = stub.ListMessages(pb.ListMessagesRequest(session_id=sid, page_size=1000))
    return list(page.messages)


def _turns(sid: str, tag: str) -> list[pb.AppendMessagesRequest]:
    """A conversation of tool calls answered in the next request, usage that
    calibrates, and request_ids on every other request."""
    reqs = []
    for i in range(12):
        reply = assistant(f"calling {i}", calls=[(f"c{i}", "read", {"path": f"f{i}"})])
        reply.usage.CopyFrom(m.Usage(input_tokens=40 + 9 * i, output_tokens=7))
        reqs.append(_request(sid, user(f"question {i}"), reply))
        reqs.append(_request(sid, result(f"c{i}", f"out {i} " * 30), request_id=f"{tag}-{sid}-{i}"))
    return reqs


def test_a_burst_answers_and_stores_as_one_by_one(merging: tuple[ObservedServer, Stub]) -> None:
    server, stub = merging
    merged_before = sample(scrape(server.metrics), MERGED)
    together, alone = _session(stub), _session(stub)
    answers = _stream(stub, _turns(together, "t"))
    expected = [_stream(stub, [r])[0] for r in _turns(alone, "a")]
    assert [_plain(a) for a in answers] == [_plain(e) for e in expected]
    assert [r.last_seq for r in answers] == [3 * (i // 2) + 2 + i % 2 for i in range(24)]
    # A tool result in one request answers the call of the request before it.
    assert answers[1].messages[0].tool_name == "read"
    got, want = _history(stub, together), _history(stub, alone)
    assert [m.seq for m in got] == list(range(1, 37))
    assert [_strip(x) for x in got] == [_strip(x) for x in want]
    sessions = [stub.GetSession(pb.GetSessionRequest(session_id=s)) for s in (together, alone)]
    assert sessions[0].context_tokens == sessions[1].context_tokens
    assert sessions[0].last_seq == sessions[1].last_seq == 36
    built = [
        stub.BuildModelInput(pb.BuildModelInputRequest(session_id=s)) for s in (together, alone)
    ]
    assert built[0].tokens == built[1].tokens  # the calibration learned is the same
    assert sample(scrape(server.metrics), MERGED) > merged_before, "nothing was merged"


def _strip(msg: m.Message) -> m.Message:
    out = m.Message()
    out.CopyFrom(msg)
    out.ClearField("message_id")
    out.ClearField("create_time")
    return out


def test_a_request_id_sent_twice_in_a_run_is_applied_once(
    merging: tuple[ObservedServer, Stub],
) -> None:
    _, stub = merging
    sid = _session(stub)
    first = _request(sid, user("once"), request_id=f"once-{sid}")
    reqs = [first, _request(sid, user("two")), first, _request(sid, user("three"))]
    answers = _stream(stub, reqs)
    assert [r.last_seq for r in answers] == [1, 2, 1, 3]
    assert answers[2] == answers[0]
    assert [x.content[0].text.text for x in _history(stub, sid)] == ["once", "two", "three"]


def test_a_run_over_two_sessions_answers_each_in_order(
    merging: tuple[ObservedServer, Stub],
) -> None:
    _, stub = merging
    a, b = _session(stub), _session(stub)
    order = [a, a, b, b, b, a, b, a, a]
    reqs = [_request(sid, user(f"{sid}-{i}")) for i, sid in enumerate(order)]
    answers = _stream(stub, reqs)
    seen: dict[str, int] = {a: 0, b: 0}
    for sid, answer in zip(order, answers, strict=True):
        seen[sid] += 1
        assert answer.last_seq == seen[sid]
    for sid in (a, b):
        texts = [x.content[0].text.text for x in _history(stub, sid)]
        assert texts == [f"{s}-{i}" for i, s in enumerate(order) if s == sid]


@pytest.mark.parametrize("bad", ["invalid", "answered"])
def test_a_failing_request_ends_the_stream_after_the_earlier_answers(
    merging: tuple[ObservedServer, Stub], bad: str
) -> None:
    _, stub = merging
    sid = _session(stub)
    reqs = [
        _request(sid, user("one"), assistant(calls=[("c1", "ls", {})])),
        _request(sid, result("c1", "listing")),
        _request(sid, user("three")),
    ]
    if bad == "invalid":
        failing, code = _request(sid, m.Message(content=user("x").content)), "INVALID_ARGUMENT"
    else:
        failing, code = _request(sid, result("c1", "again")), "FAILED_PRECONDITION"
    reqs += [failing, _request(sid, user("never")), _request(sid, user("nor this"))]
    call = stub.StreamMessages(iter(reqs), timeout=30)
    answers = []
    with pytest.raises(grpc.RpcError) as info:
        for answer in call:
            answers.append(answer)
    assert info.value.code().name == code
    assert [r.last_seq for r in answers] == [2, 3, 4]
    assert [x.seq for x in _history(stub, sid)] == [1, 2, 3, 4]


def test_a_cancelled_stream_leaves_the_session_writable(
    merging: tuple[ObservedServer, Stub],
) -> None:
    _, stub = merging
    sid = _session(stub)
    call = stub.StreamMessages(iter([_request(sid, user(f"c{i}")) for i in range(200)]))
    next(call)
    call.cancel()
    with pytest.raises(grpc.RpcError):
        list(call)
    # What the cancelled call was writing may still commit (or lose to this call's
    # compare-and-set): either way the history stays dense and ends with these two.
    answer = _stream(stub, [_request(sid, user("after")), _request(sid, user("and after"))])
    history = _history(stub, sid)
    n = len(history)
    assert [x.seq for x in history] == list(range(1, n + 1))
    assert [r.last_seq for r in answer] == [n - 1, n]
    assert [x.content[0].text.text for x in history[-2:]] == ["after", "and after"]


def test_a_run_over_the_storage_quota_stops_where_one_by_one_stops(
    quota_server: QuotaServer,
) -> None:
    """The first requests of a run that fit the quota are written and answered; the
    first that does not is refused, as when the requests come one by one."""
    stub = quota_server.stub

    def answered(tenant: Tenant, together: bool) -> tuple[int, str]:
        sid = stub.CreateSession(pb.CreateSessionRequest(), metadata=tenant.md).session_id
        reqs = [_request(sid, user(f"{i:02d}" + "q" * 1500)) for i in range(60)]
        calls = [reqs] if together else [[r] for r in reqs]
        count = 0
        try:
            for call in calls:
                for _ in stub.StreamMessages(iter(call), metadata=tenant.md, timeout=30):
                    count += 1
        except grpc.RpcError as exc:
            assert count == len(_history_as(stub, sid, tenant))
            return count, call_error(exc).code().name
        raise AssertionError("the quota let every request in")

    merged, alone = (
        answered(quota_server.tenants[0], True),
        answered(quota_server.tenants[1], False),
    )
    assert merged == alone
    assert merged[0] > 1 and merged[1] == "RESOURCE_EXHAUSTED"


def _history_as(stub: Stub, sid: str, tenant: Tenant) -> list[m.Message]:
    page = stub.ListMessages(
        pb.ListMessagesRequest(session_id=sid, page_size=1000), metadata=tenant.md
    )
    return list(page.messages)


def test_runs_through_two_replicas_lose_no_request(
    merging: tuple[ObservedServer, Stub], stub: Stub
) -> None:
    """Two servers of one database write one session at once: runs that lose the
    compare-and-set go one by one on the caught-up session; every request is
    stored once, in the order each stream sent it."""
    _, mine = merging
    sid = _session(mine)
    answers: dict[str, list[pb.AppendMessagesResponse]] = {}

    def send(name: str, via: Stub) -> None:
        answers[name] = _stream(via, [_request(sid, user(f"{name}{i}")) for i in range(40)])

    threads = [
        threading.Thread(target=send, args=("a", mine)),
        threading.Thread(target=send, args=("b", stub)),
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    history = _history(mine, sid)
    assert [x.seq for x in history] == list(range(1, 81))
    for name in ("a", "b"):
        texts = [x.content[0].text.text for x in history if x.content[0].text.text[0] == name]
        assert texts == [f"{name}{i}" for i in range(40)]
        seqs = [r.messages[0].seq for r in answers[name]]
        assert seqs == sorted(seqs) and len(seqs) == 40
        by_seq = {x.seq: x.content[0].text.text for x in history}
        assert [by_seq[s] for s in seqs] == texts
