"""The adapters of ctxwarden_client.integrations against a real server.

The frameworks' own tests (tests/frameworks) prove the interfaces; these check what is
ctxwarden's: items and messages are ctxwarden's own model (the client-side mapping gives
the blocks the server's OpenAI Responses ingest gives), compaction reaches the framework,
pop and clear keep the history, and the session keys are reversible.
"""

from __future__ import annotations

import asyncio
import json
import secrets
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ctxwarden_client import Client, context_service_pb2, message_pb2, session_pb2
from ctxwarden_client.integrations.openai_agents import CtxwardenSession
from ctxwarden_client.integrations.responses_items import item_to_message, message_to_items
from ctxwarden_client.integrations.session_ids import session_key, split_session_key

RESPONSES = context_service_pb2.MODEL_INPUT_FORMAT_OPENAI_RESPONSES

ITEMS: list[dict[str, Any]] = [
    {"role": "user", "content": "What is in a.py?"},
    {
        "role": "user",
        "content": [
            {"type": "input_text", "text": "and this?"},
            {
                "type": "input_image",
                "image_url": "data:image/png;base64,iVBORw0KGgo=",
                "detail": "auto",
            },
        ],
    },
    {
        "type": "reasoning",
        "id": "rs_1",
        "summary": [{"type": "summary_text", "text": "Look at the file."}],
        "encrypted_content": "opaque",
    },
    {
        "type": "reasoning",
        "id": "rs_2",
        "summary": [
            {"type": "summary_text", "text": "**Plan**\n\nRead it."},
            {"type": "summary_text", "text": "Then answer."},
        ],
        "encrypted_content": "opaque",
    },
    {"type": "function_call", "call_id": "call_1", "name": "read", "arguments": '{"path":"a.py"}'},
    {"type": "function_call_output", "call_id": "call_1", "output": "print(1)"},
    {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": "It prints 1.", "annotations": []}],
    },
    {"type": "web_search_call", "id": "ws_1", "status": "completed"},
]


@pytest.fixture
def client(server_target: str) -> Iterator[Client]:
    with Client(server_target) as c:
        yield c


def _blocks(message: message_pb2.Message) -> list[str]:
    return [b.SerializeToString(deterministic=True).hex() for b in message.content]


def test_items_are_mapped_as_the_server_ingest_maps_them(client: Client) -> None:
    """Item by item, the client's message has the blocks AppendModelOutput makes."""
    names = {"call_1": "read"}
    for item in ITEMS:
        sid = client.create_session().session_id
        stored = client.append_model_output(sid, RESPONSES, items_json=[item]).messages
        assert len(stored) == 1, item
        ours = item_to_message(item, names)
        assert ours.role == stored[0].role, item
        assert _blocks(ours) == _blocks(stored[0]), item
        assert ours.tool_call_id == stored[0].tool_call_id
        assert message_to_items(ours) == [item]


def test_reasoning_appended_by_the_server_reads_back_verbatim(client: Client) -> None:
    """Without the adapter's envelope (AppendModelOutput made the message), a reasoning
    item comes back as ctxwarden's renderer sends it back: verbatim, parts and all."""
    for item in (i for i in ITEMS if i.get("type") == "reasoning"):
        sid = client.create_session().session_id
        (stored,) = client.append_model_output(sid, RESPONSES, items_json=[item]).messages
        assert message_to_items(stored) == [item]
        rendered = client.build_model_input(sid, format=RESPONSES).rendered_json
        assert json.loads(rendered)["input"] == [item]


def test_get_items_is_the_effective_context_after_compaction(client: Client) -> None:
    def summarize(system: str, prompt: str, max_tokens: int) -> str:
        return "## Goal\nCount."

    policy = session_pb2.ContextPolicy(keep_recent_tokens=60)
    template = session_pb2.Session(policy=policy)
    session = CtxwardenSession(
        f"count-{secrets.token_hex(4)}", client, template=template, summarizer=summarize
    )

    async def run() -> list[Any]:
        for i in range(12):
            await session.add_items(
                [
                    {"role": "user", "content": f"Count to {i}. " * 10},
                    {"role": "assistant", "content": " ".join(map(str, range(i + 1)))},
                ]
            )
        await session.run_compaction({"force": True})
        return await session.get_items()

    items = asyncio.run(run())
    assert "## Goal\nCount." in items[0]["content"]
    assert items[-1] == {"role": "assistant", "content": " ".join(map(str, range(12)))}
    assert len(items) < 24
    history = list(client.list_messages(session.ctxwarden_session_id))
    assert len(history) == 24  # nothing was deleted


def test_pop_and_clear_keep_the_history(client: Client) -> None:
    template = session_pb2.Session(system_prompt="Be brief.", model="gpt-4o")
    session = CtxwardenSession(f"pop-{secrets.token_hex(4)}", client, template=template)

    async def run() -> tuple[Any, list[Any], list[Any]]:
        await session.add_items(
            [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]
        )
        popped = await session.pop_item()
        after_pop = await session.get_items()
        await session.clear_session()
        return popped, after_pop, await session.get_items()

    popped, after_pop, after_clear = asyncio.run(run())
    assert popped == {"role": "user", "content": "b"}
    assert after_pop == [{"role": "user", "content": "a"}]
    assert after_clear == []
    fresh = client.get_session(session.ctxwarden_session_id)
    assert (fresh.system_prompt, fresh.model, fresh.last_seq) == ("Be brief.", "gpt-4o", 0)


@given(st.text(), st.lists(st.text(), max_size=3))
def test_session_keys_are_reversible(first: str, rest: list[str]) -> None:
    key = session_key("adk", first, *rest)
    assert split_session_key(key) == ("adk", first, *rest)
    assert all(c.isascii() and (c.isalnum() or c in "._:-") for c in key)


def test_different_tuples_never_share_a_key() -> None:
    assert session_key("adk", "a:b", "c") != session_key("adk", "a", "b:c")
    assert session_key("adk", "a.3A") != session_key("adk", "a:")


def test_an_item_ctxwarden_refuses_is_kept_verbatim(client: Client) -> None:
    odd = {
        "role": "user",
        "content": [{"type": "input_image", "image_url": "data:image/x-odd;base64,AAAA"}],
    }
    items = [{"role": "user", "content": "look"}, odd]
    session = CtxwardenSession(f"odd-{secrets.token_hex(4)}", client)

    async def run() -> list[Any]:
        await session.add_items(items)  # type: ignore[arg-type]
        return await session.get_items()

    assert asyncio.run(run()) == items
