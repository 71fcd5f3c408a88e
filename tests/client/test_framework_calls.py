"""The Python client's calls for framework adapters, against a live server (both
backends): state on create and in deltas, history-only items, tail reads, pops."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import pytest
from google.protobuf import json_format

import ctxwarden_client as cw
from ctxwarden_client import AbortedError
from ctxwarden_client._calls import as_state_delta


def test_history_only_and_state_delta_builders() -> None:
    marked = cw.history_only(cw.assistant("x"), metadata={"k": "v"}, message_id="m1")
    assert marked.visibility == cw.message_pb2.MESSAGE_VISIBILITY_HISTORY_ONLY
    assert marked.content[0].text.text == "x" and dict(marked.metadata) == {"k": "v"}
    assert marked.message_id == "m1"
    original = cw.assistant("x")
    cw.history_only(original)
    assert original.visibility == 0  # a copy is marked
    bare = cw.history_only(metadata={"event": "e1"})
    assert bare.role == cw.message_pb2.ROLE_USER and list(bare.content) == []
    delta = cw.state_delta({"a": 1, "b": None}, project={"p": "x"})
    assert json_format.MessageToDict(delta) == {
        "session": {"a": 1, "b": None},
        "project": {"p": "x"},
    }
    with pytest.raises(TypeError):
        as_state_delta({"sessions": {}})


def test_framework_calls_end_to_end(server_target: str) -> None:
    project = f"p-{uuid.uuid4().hex[:8]}"
    with cw.Client(server_target) as client:
        sid = client.create_session(project_id=project, user_id="u", state={"step": 0}).session_id
        client.append_messages(
            sid,
            [cw.user("q"), cw.history_only(metadata={"event": "start"}), cw.assistant("a")],
            state_delta={"session": {"step": 1}, "user": {"lang": "en"}},
        )
        since = datetime.now(UTC)
        client.append_messages(sid, [], state_delta=cw.state_delta(project={"repo": "r"}))
        got = client.get_session(sid)
        assert json_format.MessageToDict(got.state) == {"step": 1}
        assert json_format.MessageToDict(got.user_state) == {"lang": "en"}
        assert json_format.MessageToDict(got.project_state) == {"repo": "r"}
        newest = list(client.list_messages(sid, page_size=2, newest_first=True))
        assert [m.seq for m in newest] == [3, 2, 1]  # the iterator follows the pages
        assert [m.seq for m in client.list_messages(sid, after_seq=1)] == [2, 3]
        assert list(client.list_messages(sid, after_time=since)) == []
        assert client.build_model_input(sid).last_seq == 3
        assert [m.seq for m in client.build_model_input(sid).messages] == [1, 3]
        top = next(iter(client.list_messages(sid, page_size=1, newest_first=True)))
        with pytest.raises(AbortedError) as err:
            client.rollback_turn(sid, to_seq=top.seq - 1, expected_last_seq=2)
        assert err.value.reason == "LAST_SEQ_MISMATCH"
        popped = client.rollback_turn(sid, to_seq=top.seq - 1, expected_last_seq=3)
        assert list(popped.rolled_back_seqs) == [3]


async def test_async_framework_calls(server_target: str) -> None:
    async with cw.AsyncClient(server_target) as client:
        sid = (await client.create_session(state={"a": 1})).session_id
        await client.append_messages(sid, cw.user("q"), state_delta=cw.state_delta({"a": None}))
        got = await client.get_session(sid)
        assert json_format.MessageToDict(got.state) == {}
        seqs = [m.seq async for m in client.list_messages(sid, newest_first=True, after_seq=0)]
        assert seqs == [1]
        done = await client.rollback_turn(sid, to_seq=0, expected_last_seq=1)
        assert list(done.rolled_back_seqs) == [1]
