"""Accepted data can always be read back: responses bounded by size.

A session of nine 7.9 MB messages (each under the 8 MiB message limit) is
71 MB, more than the 64 MiB the server sends in one gRPC message. ListMessages
pages stop at a byte budget, BuildModelInput of such a session is a clear
RESPONSE_TOO_LARGE (never the transport's bare "Sent message larger than
max"), and a rendered format does not send the input twice unless asked.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator

import grpc
import pytest

from ctxwarden.v1 import context_service_pb2 as pb
from ctxwarden.v1 import context_service_pb2_grpc as pb_grpc
from ctxwarden.v1 import message_pb2 as m
from ctxwarden.v1 import session_pb2 as ses
from tests.support.builders import assistant, user
from tests.support.errors import error_info, expect_error
from tests.support.server import ServerProcess

MiB = 1024 * 1024
PAGE_BYTES = 4 * MiB
"""The documented ListMessages page budget."""
SEND_LIMIT = 64 * MiB
"""The server's largest response (its request limit, 64 MiB per message)."""
BIG = 7_900_000
"""Characters of one big message: under the 8 MiB message limit."""


@pytest.fixture(scope="module")
def stub(server: ServerProcess) -> Iterator[pb_grpc.ContextServiceStub]:
    options = [
        ("grpc.max_receive_message_length", 512 * MiB),
        ("grpc.max_send_message_length", SEND_LIMIT),
    ]
    with grpc.insecure_channel(server.target, options=options) as channel:
        yield pb_grpc.ContextServiceStub(channel)


def _session(stub: pb_grpc.ContextServiceStub) -> str:
    created = stub.CreateSession(
        pb.CreateSessionRequest(
            session_id=f"big-{uuid.uuid4().hex[:12]}",
            session=ses.Session(policy=ses.ContextPolicy(tokenizer="heuristic")),
        ),
        timeout=30,
    )
    return created.session_id


def _big(i: int) -> m.Message:
    text = (f"[{i}]" + "x" * BIG)[:BIG]
    return user(text) if i % 2 == 0 else assistant(text)


def _fill(stub: pb_grpc.ContextServiceStub, count: int) -> str:
    sid = _session(stub)
    for i in range(count):
        stub.AppendMessages(
            pb.AppendMessagesRequest(
                session_id=sid, messages=[_big(i)], view=pb.MESSAGE_VIEW_BASIC
            ),
            timeout=120,
        )
    return sid


@pytest.fixture(scope="module")
def nine(stub: pb_grpc.ContextServiceStub) -> str:
    """A session of nine 7.9 MB messages: 71 MB, more than one response may carry."""
    return _fill(stub, 9)


@pytest.fixture(scope="module")
def five(stub: pb_grpc.ContextServiceStub) -> str:
    """Five 7.9 MB messages: 40 MB, which fits once but not twice."""
    return _fill(stub, 5)


def _pages(
    stub: pb_grpc.ContextServiceStub, sid: str, page_size: int = 0
) -> list[pb.ListMessagesResponse]:
    pages = []
    token = ""
    while True:
        page = stub.ListMessages(
            pb.ListMessagesRequest(session_id=sid, page_size=page_size, page_token=token),
            timeout=120,
        )
        pages.append(page)
        token = page.next_page_token
        if not token:
            return pages
        assert len(pages) < 100, "paging does not end"


def test_list_messages_of_a_71_mb_session_pages_through_everything(
    stub: pb_grpc.ContextServiceStub, nine: str
) -> None:
    pages = _pages(stub, nine)
    seen = [msg for page in pages for msg in page.messages]
    assert [msg.seq for msg in seen] == list(range(1, 10))
    for i, msg in enumerate(seen):
        assert msg.content[0].text.text == _big(i).content[0].text.text
    for page in pages:
        assert len(page.messages) >= 1
        # One 7.9 MB message is over the budget on its own: a page holds just it.
        assert len(page.messages) == 1 or page.ByteSize() <= PAGE_BYTES


def test_list_messages_pages_stop_at_the_byte_budget(stub: pb_grpc.ContextServiceStub) -> None:
    sid = _session(stub)
    one_mb = [user(f"{i:04d}" + "y" * 1_000_000) for i in range(10)]
    for batch in (one_mb[:5], one_mb[5:]):
        stub.AppendMessages(
            pb.AppendMessagesRequest(session_id=sid, messages=batch, view=pb.MESSAGE_VIEW_BASIC),
            timeout=60,
        )
    pages = _pages(stub, sid, page_size=1000)
    assert [len(p.messages) for p in pages] == [4, 4, 2]  # 4 x 1 MB fit in 4 MiB, 5 do not
    assert all(p.ByteSize() <= PAGE_BYTES for p in pages)
    seen = [msg.content[0].text.text for p in pages for msg in p.messages]
    assert seen == [x.content[0].text.text for x in one_mb]
    # The count still bounds pages of small messages, and the token continues.
    small = _session(stub)
    stub.AppendMessages(
        pb.AppendMessagesRequest(session_id=small, messages=[user(f"m{i}") for i in range(7)]),
        timeout=30,
    )
    assert [len(p.messages) for p in _pages(stub, small, page_size=3)] == [3, 3, 1]


def test_build_model_input_too_large_is_a_clear_error(
    stub: pb_grpc.ContextServiceStub, nine: str
) -> None:
    err = expect_error(
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        "RESPONSE_TOO_LARGE",
        stub.BuildModelInput,
        pb.BuildModelInputRequest(session_id=nine),
        timeout=120,
    )
    details = err.details() or ""
    assert "Sent message larger than max" not in details
    for advice in ("resume_token", "compact", "ListMessages"):
        assert advice in details, details
    info = error_info(err)
    assert int(info.metadata["limit_bytes"]) == SEND_LIMIT
    assert int(info.metadata["response_bytes"]) > 9 * BIG
    assert f"{int(info.metadata['response_bytes']):,}" in details
    # The rendered input alone is too large as well: the same clear error.
    expect_error(
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        "RESPONSE_TOO_LARGE",
        stub.BuildModelInput,
        pb.BuildModelInputRequest(session_id=nine, format=pb.MODEL_INPUT_FORMAT_OPENAI_CHAT),
        timeout=120,
    )
    # The server carries on: the session's history is still readable.
    assert stub.GetSession(pb.GetSessionRequest(session_id=nine), timeout=30).last_seq == 9


def test_rendered_format_sends_the_input_once_by_default(
    stub: pb_grpc.ContextServiceStub, five: str
) -> None:
    native = stub.BuildModelInput(pb.BuildModelInputRequest(session_id=five), timeout=120)
    assert len(native.messages) == 5
    assert native.resume_token
    rendered = stub.BuildModelInput(
        pb.BuildModelInputRequest(session_id=five, format=pb.MODEL_INPUT_FORMAT_OPENAI_CHAT),
        timeout=120,
    )
    assert len(rendered.messages) == 0
    assert rendered.messages_offset == 0
    # The token names the rendered JSON: asked again, only what follows the
    # unchanged provider messages is sent, and the splice is the whole.
    assert rendered.resume_token.startswith("r2.")
    again = stub.BuildModelInput(
        pb.BuildModelInputRequest(
            session_id=five,
            format=pb.MODEL_INPUT_FORMAT_OPENAI_CHAT,
            resume_token=rendered.resume_token,
        ),
        timeout=120,
    )
    assert again.rendered_prefix_bytes > 0
    assert again.ByteSize() < 1_000
    held = rendered.rendered_json.encode()
    assert held[: again.rendered_prefix_bytes] + again.rendered_json.encode() == held
    body = json.loads(rendered.rendered_json)
    assert [x["content"] for x in body["messages"]] == [
        _big(i).content[0].text.text for i in range(5)
    ]
    assert rendered.tokens.total_tokens == native.tokens.total_tokens
    assert rendered.last_seq == 5
    assert rendered.ByteSize() < native.ByteSize() + 1 * MiB
    # Both at once are 80 MB: asking for them is the clear error, not a reset stream.
    expect_error(
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        "RESPONSE_TOO_LARGE",
        stub.BuildModelInput,
        pb.BuildModelInputRequest(
            session_id=five,
            format=pb.MODEL_INPUT_FORMAT_OPENAI_CHAT,
            view=pb.MODEL_INPUT_VIEW_FULL,
        ),
        timeout=120,
    )


def test_model_input_view(stub: pb_grpc.ContextServiceStub) -> None:
    sid = _session(stub)
    stub.AppendMessages(
        pb.AppendMessagesRequest(session_id=sid, messages=[user("hello"), assistant("hi")]),
        timeout=30,
    )
    gemini = pb.MODEL_INPUT_FORMAT_GEMINI
    both = stub.BuildModelInput(
        pb.BuildModelInputRequest(session_id=sid, format=gemini, view=pb.MODEL_INPUT_VIEW_FULL),
        timeout=30,
    )
    assert [x.content[0].text.text for x in both.messages] == ["hello", "hi"]
    assert len(json.loads(both.rendered_json)["contents"]) == 2
    assert both.resume_token
    basic = stub.BuildModelInput(
        pb.BuildModelInputRequest(session_id=sid, view=pb.MODEL_INPUT_VIEW_BASIC), timeout=30
    )
    assert len(basic.messages) == 0
    assert basic.rendered_json == ""
    assert basic.tokens.total_tokens == both.tokens.total_tokens > 0
    full = stub.BuildModelInput(pb.BuildModelInputRequest(session_id=sid), timeout=30)
    assert len(full.messages) == 2  # without a format the default is still everything
    expect_error(
        grpc.StatusCode.INVALID_ARGUMENT,
        "INVALID_VIEW",
        stub.BuildModelInput,
        pb.BuildModelInputRequest(session_id=sid, view=7),  # type: ignore[arg-type]
        timeout=30,
    )
