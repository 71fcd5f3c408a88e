"""The Python streaming helpers coalesce, against a real server.

Plain appends to one session that queue up while earlier ones are unanswered go
out as one StreamMessages request; each sender still gets its own response, in
call order, and the session stays dense. Requests with a request_id,
expected_last_seq or state_delta go alone. An error fails every request merged
with the failing one. ``coalesce=False`` sends one request a send.
"""

from __future__ import annotations

import asyncio

import pytest

from ctxwarden_client import AsyncClient, Client, CtxwardenError, NotFoundError, user
from ctxwarden_client.v1 import context_service_pb2 as pb

SENDS = 40


async def _stored(client: AsyncClient, sid: str) -> list[tuple[int, str]]:
    return [(m.seq, m.content[0].text.text) async for m in client.list_messages(sid)]


async def test_concurrent_senders_share_requests_and_get_their_own_answers(
    server_target: str,
) -> None:
    async with AsyncClient(server_target, timeout=20) as client:
        sid = (await client.create_session(title="coalesced")).session_id
        async with client.stream_messages(max_in_flight=SENDS) as stream:
            responses = await asyncio.gather(
                *(stream.send(sid, [user(f"m{i}"), user(f"m{i}b")]) for i in range(SENDS))
            )
            sent = stream.requests_sent
        assert sent < SENDS, "queued appends went out together"
        for i, response in enumerate(responses):
            texts = [m.content[0].text.text for m in response.messages]
            assert texts == [f"m{i}", f"m{i}b"]
            assert [m.seq for m in response.messages] == [2 * i + 1, 2 * i + 2]
            assert response.last_seq == 2 * i + 2
        stored = await _stored(client, sid)
        assert [s for s, _ in stored] == list(range(1, 2 * SENDS + 1))


async def test_keyed_requests_go_alone_in_order(server_target: str) -> None:
    async with AsyncClient(server_target, timeout=20) as client:
        sid = (await client.create_session(title="keyed")).session_id
        async with client.stream_messages() as stream:
            sends = [
                stream.send(sid, [user(f"k{i}")], request_id=f"req-{sid}-{i}")
                if i % 3 == 0
                else stream.send(sid, [user(f"k{i}")])
                for i in range(12)
            ]
            responses = await asyncio.gather(*sends)
            again = await stream.send(sid, [user("k0")], request_id=f"req-{sid}-0")
        assert [r.last_seq for r in responses] == list(range(1, 13))
        assert again.last_seq == 1, "a request_id still replays exactly its own request"
        assert [t for _, t in await _stored(client, sid)] == [f"k{i}" for i in range(12)]


async def test_an_error_fails_every_merged_request(server_target: str) -> None:
    async with AsyncClient(server_target, timeout=20) as client:
        sid = (await client.create_session(title="errors")).session_id
        async with client.stream_messages() as stream:
            assert (await stream.send(sid, [user("first")])).last_seq == 1
            results = await asyncio.gather(
                *(stream.send("no-such-session", [user(f"x{i}")]) for i in range(10)),
                return_exceptions=True,
            )
            assert all(isinstance(r, CtxwardenError) for r in results), results
            assert any(isinstance(r, NotFoundError) for r in results)
        assert [t for _, t in await _stored(client, sid)] == ["first"]


def test_sync_send_many_coalesces_and_opt_out_does_not(server_target: str) -> None:
    with Client(server_target, timeout=20) as client:
        sid = client.create_session(title="sync coalesced").session_id
        requests = [
            pb.AppendMessagesRequest(session_id=sid, messages=[user(f"s{i}")]) for i in range(SENDS)
        ]
        with client.stream_messages(max_in_flight=SENDS) as stream:
            seqs = [r.last_seq for r in stream.send_many(requests)]
            coalesced = stream.requests_sent
        assert seqs == list(range(1, SENDS + 1))
        assert coalesced < SENDS
        with client.stream_messages(max_in_flight=SENDS, coalesce=False) as stream:
            seqs = [r.last_seq for r in stream.send_many(requests)]
            assert stream.requests_sent == SENDS
        assert seqs == list(range(SENDS + 1, 2 * SENDS + 1))


@pytest.mark.parametrize("window", [0.0, 5.0])
async def test_a_lone_sender_is_never_held(server_target: str, window: float) -> None:
    """Nothing unanswered, nothing to wait for: a 5 s window must not delay a send
    past its 2 s deadline."""
    async with AsyncClient(server_target, timeout=20) as client:
        sid = (await client.create_session(title="lone")).session_id
        async with client.stream_messages(coalesce_window=window, timeout=2) as stream:
            for i in range(5):
                assert (await stream.send(sid, [user(f"l{i}")])).last_seq == i + 1
            assert stream.requests_sent == 5
