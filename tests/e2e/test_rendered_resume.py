"""Rendered inputs resume like native ones: with the resume_token of the
rendered input it holds, a client is sent only the rendered JSON after the
provider messages that did not change, and its splice is the whole input."""

from __future__ import annotations

import json

import pytest

from ctxwarden.v1 import context_service_pb2 as pb
from tests.e2e.conftest import NewSession, Stub
from tests.e2e.test_messages import append
from tests.support.builders import assistant, result, user

FORMATS = [
    pb.MODEL_INPUT_FORMAT_OPENAI_CHAT,
    pb.MODEL_INPUT_FORMAT_OPENAI_RESPONSES,
    pb.MODEL_INPUT_FORMAT_ANTHROPIC_MESSAGES,
    pb.MODEL_INPUT_FORMAT_GEMINI,
]
ARRAYS = {2: "messages", 3: "input", 4: "messages", 5: "contents"}


def build(stub: Stub, sid: str, fmt: int, token: str = "") -> pb.ModelInput:
    request = pb.BuildModelInputRequest(session_id=sid, format=fmt, resume_token=token)  # type: ignore[arg-type]
    return stub.BuildModelInput(request)


def splice(held: str, delta: pb.ModelInput) -> str:
    if delta.rendered_prefix_bytes == 0:
        return delta.rendered_json
    return (held.encode()[: delta.rendered_prefix_bytes] + delta.rendered_json.encode()).decode()


@pytest.mark.parametrize("fmt", FORMATS, ids=lambda f: pb.ModelInputFormat.Name(f))
def test_an_agent_loop_is_sent_only_the_new_tail(
    stub: Stub, new_session: NewSession, fmt: int
) -> None:
    sid = new_session(system_prompt="Be brief. ✓", model="claude-sonnet-4-5").session_id
    append(stub, sid, user("look around, ünïcödé please"))
    held = build(stub, sid, fmt)
    assert held.rendered_prefix_bytes == 0 and held.resume_token.startswith(f"r{fmt}.")
    text = held.rendered_json
    for step in range(10):
        call = f"call_{step}"
        append(stub, sid, assistant("checking ✓", [(call, "ls", {"dir": "."})]))
        append(stub, sid, result(call, "a.txt\nb.txt ✓\n" * 40, name="ls"))
        if step % 3 == 2:
            append(stub, sid, user(f"and step {step}?"))
        delta = build(stub, sid, fmt, held.resume_token)
        whole = build(stub, sid, fmt)
        assert delta.rendered_prefix_bytes > 0, step
        text = splice(text, delta)
        assert text == whole.rendered_json, step
        # The resent tail is the open turn and the new items, not the history.
        assert len(delta.rendered_json) < len(whole.rendered_json) / 2 or step < 5
        assert delta.resume_token == whole.resume_token
        assert list(delta.notices) == list(whole.notices)
        held = delta
    body = json.loads(text)
    assert len(body[ARRAYS[fmt]]) >= 20


def test_a_token_for_something_else_gets_the_whole_input(
    stub: Stub, new_session: NewSession
) -> None:
    chat, anthropic = pb.MODEL_INPUT_FORMAT_OPENAI_CHAT, pb.MODEL_INPUT_FORMAT_ANTHROPIC_MESSAGES
    sid = new_session(system_prompt="S").session_id
    other = new_session(system_prompt="S").session_id
    append(stub, sid, user("hello"), assistant("hi"))
    append(stub, other, user("hola"), assistant("hi"))
    token = build(stub, sid, chat).resume_token
    native = stub.BuildModelInput(pb.BuildModelInputRequest(session_id=sid)).resume_token
    for sent in (
        build(stub, sid, anthropic, token),  # another format
        build(stub, other, chat, token),  # another session's input
        build(stub, sid, chat, native),  # a native token
        build(stub, sid, chat, "r2.99.00000000000000ff"),  # more than is stable
        build(stub, sid, chat, "r2.x.zz"),  # garbage
    ):
        assert sent.rendered_prefix_bytes == 0
        assert json.loads(sent.rendered_json)
    # With view FULL the token names the messages; rendered_json is whole.
    full = stub.BuildModelInput(
        pb.BuildModelInputRequest(
            session_id=sid, format=chat, view=pb.MODEL_INPUT_VIEW_FULL, resume_token=native
        )
    )
    assert full.messages_offset > 0 and full.rendered_prefix_bytes == 0
    assert full.rendered_json == build(stub, sid, chat).rendered_json


def test_a_rollback_resumes_from_what_is_still_the_same(
    stub: Stub, new_session: NewSession
) -> None:
    fmt = pb.MODEL_INPUT_FORMAT_OPENAI_RESPONSES
    sid = new_session().session_id
    append(stub, sid, user("one"), assistant("two"), user("three"))
    early = build(stub, sid, fmt)
    append(stub, sid, assistant("four"), user("five"))
    late = build(stub, sid, fmt)
    stub.RollbackTurn(pb.RollbackTurnRequest(session_id=sid, to_seq=3))
    whole = build(stub, sid, fmt)
    kept = build(stub, sid, fmt, early.resume_token)
    assert kept.rendered_prefix_bytes > 0
    assert splice(early.rendered_json, kept) == whole.rendered_json
    redo = build(stub, sid, fmt, late.resume_token)  # holds rolled-back items
    assert redo.rendered_prefix_bytes == 0 and redo.rendered_json == whole.rendered_json
