"""Request options of the Python client against a live server: append views, replays,
explicit resume tokens, listings started from a page token."""

from __future__ import annotations

import pytest

from ctxwarden_client import AsyncClient, Client, assistant, user
from ctxwarden_client.v1 import context_service_pb2 as pb
from ctxwarden_client.v1 import context_service_pb2_grpc as pb_grpc


def test_append_view_basic_leaves_the_content_out(server_target: str) -> None:
    with Client(server_target) as client:
        sid = client.create_session().session_id
        full = client.append_messages(sid, [user("hello")])
        basic = client.append_messages(sid, [user("again")], view=pb.MESSAGE_VIEW_BASIC)
        assert full.messages[0].content and not basic.messages[0].content
        assert basic.messages[0].seq == 2 and basic.messages[0].token_count > 0
        with client.stream_messages() as stream:
            streamed = stream.send(sid, [user("streamed")], view=pb.MESSAGE_VIEW_BASIC)
        assert not streamed.messages[0].content and streamed.messages[0].seq == 3
        # The stored messages are whole.
        assert all(m.content for m in client.list_messages(sid))


def test_build_model_input_replay_and_explicit_resume_token(server_target: str) -> None:
    with Client(server_target) as client:
        sid = client.create_session(system_prompt="sp").session_id
        client.append_messages(sid, [user("one"), assistant("two")])
        before = client.build_model_input(sid)
        client.append_messages(sid, [user("three")])
        # The input as it was just before message 3 was appended.
        replay = client.build_model_input(sid, as_of_seq=3)
        assert replay.last_seq == 2
        assert list(replay.messages) == list(before.messages)
        # Only what changed since the held input; the caller keeps the rest.
        resumed = client.build_model_input(sid, resume_token=before.resume_token)
        assert resumed.messages_offset == 2
        assert [m.seq for m in resumed.messages] == [3]
        whole = client.build_model_input(sid)
        assert [*before.messages[: resumed.messages_offset], *resumed.messages] == list(
            whole.messages
        )
        with pytest.raises(TypeError, match="incremental"):
            client.build_model_input(sid, incremental=True, resume_token=before.resume_token)
        with pytest.raises(TypeError, match="incremental"):
            client.build_model_input(sid, incremental=True, as_of_seq=1)


def test_listing_starts_at_a_page_token(server_target: str) -> None:
    with Client(server_target) as client:
        sid = client.create_session().session_id
        client.append_messages(sid, [user(f"m{i}") for i in range(5)])
        # A token from elsewhere (here a raw call): the listing continues from there.
        first = pb_grpc.ContextServiceStub(client.channel).ListMessages(
            pb.ListMessagesRequest(session_id=sid, page_size=2)
        )
        assert first.next_page_token
        rest = client.list_messages(sid, page_size=2, page_token=first.next_page_token)
        assert [m.seq for m in rest] == [3, 4, 5]


async def test_async_request_options(server_target: str) -> None:
    async with AsyncClient(server_target) as client:
        sid = (await client.create_session()).session_id
        basic = await client.append_messages(
            sid, [user("a"), assistant("b"), user("c")], view=pb.MESSAGE_VIEW_BASIC
        )
        assert [m.seq for m in basic.messages] == [1, 2, 3]
        assert not any(m.content for m in basic.messages)
        async with client.stream_messages() as stream:
            streamed = await stream.send(sid, [assistant("d")], view=pb.MESSAGE_VIEW_BASIC)
        assert streamed.last_seq == 4 and not streamed.messages[0].content
        replay = await client.build_model_input(sid, as_of_seq=3)
        assert [m.seq for m in replay.messages] == [1, 2]
        held = await client.build_model_input(sid)
        resumed = await client.build_model_input(sid, resume_token=held.resume_token)
        assert resumed.messages_offset == 4 and not resumed.messages
        page = await pb_grpc.ContextServiceStub(client.channel).ListMessages(
            pb.ListMessagesRequest(session_id=sid, page_size=3)
        )
        rest = [m.seq async for m in client.list_messages(sid, page_token=page.next_page_token)]
        assert rest == [4]
