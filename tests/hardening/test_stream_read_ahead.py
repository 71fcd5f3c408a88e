"""StreamMessages' read-ahead (api.stream.ReadAhead) on its own: it buffers a
bounded number of requests (a client cannot make the server hold more than a
run's worth), forms runs only of plain requests of one session, raises a
reading error only after every request read before it, and stops with the call."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from ctxwarden.api.handlers import Malformed
from ctxwarden.api.stream import MAX_RUN, ReadAhead
from ctxwarden.v1 import context_service_pb2 as pb
from tests.support.builders import user


def _req(sid: str, text: str = "x", **kw: object) -> pb.AppendMessagesRequest:
    return pb.AppendMessagesRequest(session_id=sid, messages=[user(text)], **kw)  # type: ignore[arg-type]


class Source:
    """An endless stream that counts what was read of it."""

    def __init__(self, size: int = 10) -> None:
        self.read = 0
        self.text = "y" * size

    async def __aiter__(self) -> AsyncIterator[pb.AppendMessagesRequest]:
        while True:
            self.read += 1
            yield _req("s", self.text)


async def _settle() -> None:
    """Lets the reader task run until it waits (no timing involved)."""
    for _ in range(MAX_RUN * 4):
        await asyncio.sleep(0)


async def test_the_buffer_is_bounded_by_count_and_bytes() -> None:
    source = Source()
    reads = ReadAhead(source.__aiter__(), max_bytes=1 << 20)
    await _settle()
    assert source.read == MAX_RUN + 1  # a full buffer and one request in hand
    assert len(await reads.next_run(1 << 20)) == MAX_RUN
    await _settle()
    assert source.read == 2 * MAX_RUN + 1
    reads.close()
    big = Source(size=1000)
    reads = ReadAhead(big.__aiter__(), max_bytes=3500)
    await _settle()
    assert big.read == 4  # three fit in 3500 bytes
    reads.close()


async def test_runs_stop_at_another_session_and_at_a_request_that_goes_alone() -> None:
    async def requests() -> AsyncIterator[pb.AppendMessagesRequest]:
        for r in [
            _req("a"),
            _req("a"),
            _req("b"),
            _req("b", expected_last_seq=2),
            _req("b"),
            _req("b", state_delta=pb.StateDelta()),
        ]:
            yield r

    reads = ReadAhead(requests(), max_bytes=1 << 20)
    await _settle()
    runs = []
    while run := await reads.next_run(1 << 20):
        runs.append([(r.session_id, r.HasField("expected_last_seq")) for r in run])
    assert [len(r) for r in runs] == [2, 1, 1, 1, 1]
    assert runs[1] == [("b", False)] and runs[2] == [("b", True)]
    reads.close()


async def test_a_request_that_could_not_be_decoded_ends_the_run_before_it() -> None:
    """A hostile request buffered behind a good one (the fuzzer's raw bytes) has no
    fields to compare: it goes alone, where its decoding error is answered."""

    async def requests() -> AsyncIterator[object]:
        yield _req("a")
        yield Malformed("Error parsing message")
        yield _req("a")

    reads = ReadAhead(requests(), max_bytes=1 << 20)
    await _settle()
    runs = []
    while run := await reads.next_run(1 << 20):
        runs.append(run)
    assert [len(r) for r in runs] == [1, 1, 1]
    assert isinstance(runs[1][0], Malformed)
    reads.close()


async def test_a_request_near_the_response_limit_goes_alone() -> None:
    async def requests() -> AsyncIterator[pb.AppendMessagesRequest]:
        yield _req("a")
        yield _req("a", "z" * 2000)

    reads = ReadAhead(requests(), max_bytes=1 << 20)
    await _settle()
    assert len(await reads.next_run(3000)) == 1
    assert len(await reads.next_run(3000)) == 1
    reads.close()


async def test_a_reading_error_comes_after_every_request_read_before_it() -> None:
    async def requests() -> AsyncIterator[pb.AppendMessagesRequest]:
        yield _req("a", "1")
        yield _req("a", "2")
        raise RuntimeError("refused")

    reads = ReadAhead(requests(), max_bytes=1 << 20)
    await _settle()
    run = await reads.next_run(1 << 20)
    assert [r.messages[0].content[0].text.text for r in run] == ["1", "2"]
    with pytest.raises(RuntimeError, match="refused"):
        await reads.next_run(1 << 20)
    reads.close()


async def test_close_stops_the_reader() -> None:
    gate = asyncio.Event()

    async def requests() -> AsyncIterator[pb.AppendMessagesRequest]:
        yield _req("a")
        await gate.wait()  # a client that sends nothing more
        yield _req("a")

    reads = ReadAhead(requests(), max_bytes=1 << 20)
    assert len(await reads.next_run(1 << 20)) == 1
    reads.close()
    await _settle()
    assert reads._task.cancelled()
