"""ListMessages tail reads: newest_first, after_seq, after_time, and their page tokens."""

from __future__ import annotations

import statistics
import time
import uuid

import grpc
from google.protobuf.timestamp_pb2 import Timestamp

from ctxwarden.v1 import context_service_pb2 as pb
from ctxwarden.v1 import session_pb2 as ses
from tests.e2e.conftest import NewSession, Stub
from tests.e2e.test_messages import append
from tests.support.builders import assistant, user
from tests.support.errors import expect_error


def _all(stub: Stub, **fields: object) -> list[int]:
    """Every page of a listing, as seqs, with page_size 4 (many pages)."""
    seqs: list[int] = []
    token = ""
    while True:
        page = stub.ListMessages(pb.ListMessagesRequest(page_size=4, page_token=token, **fields))  # type: ignore[arg-type]
        assert len(page.messages) <= 4
        seqs += [m.seq for m in page.messages]
        token = page.next_page_token
        if not token:
            return seqs


def _session_of_25(stub: Stub, new_session: NewSession) -> str:
    """25 messages in 5 appends (create times increase between appends); seqs 24
    and 25 rolled back."""
    sid = new_session().session_id
    for i in range(5):
        append(stub, sid, *[user(f"m{5 * i + k + 1}") for k in range(5)])
    stub.RollbackTurn(pb.RollbackTurnRequest(session_id=sid, to_seq=23))
    return sid


def test_newest_first_pages_run_backwards(stub: Stub, new_session: NewSession) -> None:
    sid = _session_of_25(stub, new_session)
    newest = stub.ListMessages(
        pb.ListMessagesRequest(session_id=sid, page_size=5, newest_first=True)
    )
    assert [m.seq for m in newest.messages] == [23, 22, 21, 20, 19] and newest.next_page_token
    assert _all(stub, session_id=sid, newest_first=True) == list(range(23, 0, -1))
    everything = _all(stub, session_id=sid, newest_first=True, include_rolled_back=True)
    assert everything == list(range(25, 0, -1))
    assert _all(stub, session_id=sid) == list(range(1, 24))


def test_after_seq_ascending_and_newest_first(stub: Stub, new_session: NewSession) -> None:
    sid = _session_of_25(stub, new_session)
    assert _all(stub, session_id=sid, after_seq=17) == [18, 19, 20, 21, 22, 23]
    assert _all(stub, session_id=sid, after_seq=17, newest_first=True) == [23, 22, 21, 20, 19, 18]
    assert _all(stub, session_id=sid, after_seq=23) == []
    assert _all(stub, session_id=sid, after_seq=0) == list(range(1, 24))
    expect_error(
        grpc.StatusCode.INVALID_ARGUMENT,
        "INVALID_SEQ",
        stub.ListMessages,
        pb.ListMessagesRequest(session_id=sid, after_seq=-1),
    )


def test_after_time_keeps_only_later_messages(stub: Stub, new_session: NewSession) -> None:
    sid = _session_of_25(stub, new_session)
    listed = stub.ListMessages(pb.ListMessagesRequest(session_id=sid, page_size=100))
    tenth = listed.messages[9]  # seq 10, the last of the second append
    later = [
        m.seq
        for m in listed.messages
        if m.create_time.ToNanoseconds() > tenth.create_time.ToNanoseconds()
    ]
    assert later and later[0] == 11
    assert _all(stub, session_id=sid, after_time=tenth.create_time) == later
    assert (
        _all(stub, session_id=sid, after_time=tenth.create_time, newest_first=True) == later[::-1]
    )
    assert _all(stub, session_id=sid, after_time=Timestamp(seconds=-5)) == list(range(1, 24))
    both = _all(stub, session_id=sid, after_time=tenth.create_time, after_seq=20)
    assert both == [21, 22, 23]


def test_page_tokens_are_bound_to_the_filters(stub: Stub, new_session: NewSession) -> None:
    sid = _session_of_25(stub, new_session)
    first = stub.ListMessages(
        pb.ListMessagesRequest(session_id=sid, page_size=3, newest_first=True, after_seq=5)
    )
    token = first.next_page_token
    again = stub.ListMessages(
        pb.ListMessagesRequest(
            session_id=sid, page_size=3, newest_first=True, after_seq=5, page_token=token
        )
    )
    assert [m.seq for m in again.messages] == [20, 19, 18]
    for other in (
        {"newest_first": False, "after_seq": 5},
        {"newest_first": True, "after_seq": 6},
        {"newest_first": True},
        {"newest_first": True, "after_seq": 5, "include_rolled_back": True},
        {"newest_first": True, "after_seq": 5, "after_time": Timestamp(seconds=1)},
    ):
        expect_error(
            grpc.StatusCode.INVALID_ARGUMENT,
            "INVALID_PAGE_TOKEN",
            stub.ListMessages,
            pb.ListMessagesRequest(session_id=sid, page_size=3, page_token=token, **other),
        )
    # A plain listing's tokens are as before: they work without the new fields.
    plain = stub.ListMessages(pb.ListMessagesRequest(session_id=sid, page_size=3))
    rest = stub.ListMessages(
        pb.ListMessagesRequest(session_id=sid, page_size=3, page_token=plain.next_page_token)
    )
    assert [m.seq for m in rest.messages] == [4, 5, 6]


def _tail_seconds(stub: Stub, sid: str) -> float:
    start = time.perf_counter()
    page = stub.ListMessages(
        pb.ListMessagesRequest(session_id=sid, page_size=10, newest_first=True)
    )
    elapsed = time.perf_counter() - start
    assert len(page.messages) == 10
    return elapsed


def test_a_tail_read_costs_the_same_on_20000_messages_as_on_100(stub: Stub) -> None:
    """O(N), not O(history): the newest 10 of 20,000 messages take about as long
    as the newest 10 of 100 (medians of reads taken side by side)."""
    sids = []
    for count in (100, 20_000):
        sid = f"tail-{count}-{uuid.uuid4().hex[:8]}"
        stub.CreateSession(pb.CreateSessionRequest(session_id=sid, session=ses.Session()))
        for start in range(0, count, 1000):
            batch = [
                (user if (start + k) % 2 == 0 else assistant)(f"message {start + k}")
                for k in range(min(1000, count - start))
            ]
            append(stub, sid, *batch, view=pb.MESSAGE_VIEW_BASIC)
        sids.append(sid)
    small, big = sids
    newest = stub.ListMessages(
        pb.ListMessagesRequest(session_id=big, page_size=3, newest_first=True)
    )
    assert [m.seq for m in newest.messages] == [20_000, 19_999, 19_998]
    for sid in sids:  # warm up both (restore, caches)
        for _ in range(3):
            _tail_seconds(stub, sid)
    small_times, big_times = [], []
    for _ in range(25):
        small_times.append(_tail_seconds(stub, small))
        big_times.append(_tail_seconds(stub, big))
    small_median, big_median = statistics.median(small_times), statistics.median(big_times)
    # Reading the whole history would cost far more than this (20,000 rows).
    assert big_median < 3 * small_median + 0.002, (small_median, big_median)
