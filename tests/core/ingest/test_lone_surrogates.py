"""A lone surrogate (\\ud800-\\udfff) never reaches the store through AppendModelOutput.

JSON may escape one; decoded, it is a string no UTF-8 encoder takes, so token
counting, rendering and the database would fail on it (INTERNAL) from then on.
The service refuses one escaped in the document itself; these tests cover what
ingest decodes a second time (tool-call arguments sent as JSON text, Anthropic's
streamed ``input_json_delta``) and re-serialises: what is stored is checked, on
every path, as AppendModelOutput reads it (``load_json``, ingest, then the same
``check_messages`` as AppendMessages).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from google.genai import types as gt

from ctxwarden.core.errors import InvalidArgument
from ctxwarden.core.ingest import ingest_items, ingest_response
from ctxwarden.core.messages import ContentBlock, ContentKind, Message, Role
from ctxwarden.core.reasons import ErrorReason
from ctxwarden.core.render import Format
from ctxwarden.core.validation import MAX_JSON_DEPTH, check_messages, load_json
from tests.core.ingest import sdk_fixtures as fx

LONE = "\ud800"
ESCAPED_ARGS = '{"p":"\\ud800"}'
"""Tool-call arguments as JSON text that escapes a lone surrogate."""


def _appended(fmt: Format, document: Any, *, items: bool = False) -> tuple[Message, ...]:
    """What AppendModelOutput would append for ``document`` (sent as JSON text)."""
    field = "items_json" if items else "response_json"
    parsed = load_json(json.dumps(document), field, MAX_JSON_DEPTH + 16)
    if items:
        messages = ingest_items(fmt, parsed, model="m")
    else:
        messages = ingest_response(fmt, parsed).messages
    check_messages(messages, 100)
    return messages


def _chat(stream: bool) -> Any:
    call = {"id": "c1", "function": {"name": "read", "arguments": ESCAPED_ARGS}}
    completion = fx.chat_completion({"content": None, "tool_calls": [call]}, "tool_calls")
    if stream:
        return [fx.dump(c) for c in fx.chat_chunks(completion)]
    return fx.dump(completion)


def _responses(stream: bool) -> Any:
    call = {"type": "function_call", "call_id": "c1", "name": "read", "arguments": ESCAPED_ARGS}
    final = fx.response(fx.responses_output([call]))
    if stream:  # the call is the added item with its argument deltas applied
        events = [fx.dump(e) for e in fx.responses_events(final, done=False)]
        del events[-1]["response"]["output"]
        return events
    return fx.dump(final)


def _anthropic(stream: bool) -> Any:
    block = {"type": "tool_use", "id": "toolu_1", "name": "read", "input": {"p": LONE}}
    message = fx.anthropic_message([block], "tool_use")
    if stream:
        return [fx.dump(e) for e in fx.anthropic_events(message)]
    return fx.dump(message)


def _anthropic_server_tool() -> Any:
    """A streamed server_tool_use block, its input in ``input_json_delta`` texts."""
    events = _anthropic(True)
    start = events[1]["content_block"]
    start.update(type="server_tool_use", id="srvtoolu_1", name="web_search")
    return events


def _gemini(stream: bool) -> Any:
    part = gt.Part(function_call=gt.FunctionCall(name="read", args={"p": LONE}))
    if stream:
        return [fx.dump_gemini(c) for c in fx.gemini_chunks([part])]
    return fx.dump_gemini(fx.gemini_response([part]))


RESPONSES: dict[str, tuple[Format, Callable[[], Any], str, str]] = {
    "openai-chat": (
        Format.OPENAI_CHAT,
        lambda: _chat(False),
        "INVALID_MODEL_OUTPUT",
        "response_json.choices[0].message.tool_calls[0].function.arguments",
    ),
    "openai-chat-stream": (
        Format.OPENAI_CHAT,
        lambda: _chat(True),
        "INVALID_MODEL_OUTPUT",
        "response_json[1].choices[0].delta.tool_calls[0].function.arguments",
    ),
    "openai-responses": (
        Format.OPENAI_RESPONSES,
        lambda: _responses(False),
        "INVALID_MODEL_OUTPUT",
        "response_json.output[0].arguments",
    ),
    "openai-responses-stream": (
        Format.OPENAI_RESPONSES,
        lambda: _responses(True),
        "INVALID_MODEL_OUTPUT",
        "response_json[1].item.arguments",
    ),
    "anthropic": (
        Format.ANTHROPIC_MESSAGES,
        lambda: _anthropic(False),
        "INVALID_JSON",
        "response_json",
    ),
    "anthropic-stream": (
        Format.ANTHROPIC_MESSAGES,
        lambda: _anthropic(True),
        "INVALID_MODEL_OUTPUT",
        "response_json[1].content_block.input",
    ),
    "anthropic-stream-server-tool": (
        Format.ANTHROPIC_MESSAGES,
        _anthropic_server_tool,
        "INVALID_MODEL_OUTPUT",
        "response_json[1].content_block.input",
    ),
    "gemini": (Format.GEMINI, lambda: _gemini(False), "INVALID_JSON", "response_json"),
    "gemini-stream": (Format.GEMINI, lambda: _gemini(True), "INVALID_JSON", "response_json"),
}


@pytest.mark.parametrize("case", sorted(RESPONSES))
def test_a_lone_surrogate_in_a_response_is_refused(case: str) -> None:
    fmt, document, reason, field = RESPONSES[case]
    with pytest.raises(InvalidArgument) as info:
        _appended(fmt, document())
    assert "surrogate" in info.value.message
    assert (info.value.reason, info.value.field) == (reason, field)


ITEMS: dict[Format, list[Any]] = {
    Format.OPENAI_CHAT: [
        {
            "role": "assistant",
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "read", "arguments": ESCAPED_ARGS},
                }
            ],
        }
    ],
    Format.OPENAI_RESPONSES: [
        {"type": "function_call", "call_id": "c1", "name": "read", "arguments": ESCAPED_ARGS}
    ],
    Format.ANTHROPIC_MESSAGES: [
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "t1", "name": "read", "input": {"p": LONE}}],
        }
    ],
    Format.GEMINI: [
        {"role": "model", "parts": [{"functionCall": {"name": "read", "args": {"p": LONE}}}]}
    ],
}


@pytest.mark.parametrize("fmt", sorted(ITEMS), ids=lambda f: f.name)
def test_a_lone_surrogate_in_items_is_refused(fmt: Format) -> None:
    with pytest.raises(InvalidArgument) as info:
        _appended(fmt, ITEMS[fmt], items=True)
    assert "surrogate" in info.value.message
    assert info.value.reason in (ErrorReason.INVALID_MODEL_OUTPUT, ErrorReason.INVALID_JSON)


def test_escaped_surrogate_pairs_are_kept() -> None:
    """A pair is a character (U+1F600): stored as the character itself."""
    message = fx.anthropic_message(
        [{"type": "tool_use", "id": "toolu_1", "name": "read", "input": {"p": "\U0001f600"}}],
        "tool_use",
    )
    events = [fx.dump(e) for e in fx.anthropic_events(message)]
    (stored,) = _appended(Format.ANTHROPIC_MESSAGES, events)
    assert stored.content[0].arguments_json == '{"p":"\U0001f600"}'


# -- what is stored is checked, whatever produced it ------------------------------------


@pytest.mark.parametrize(
    ("block", "field", "reason"),
    [
        (
            ContentBlock.of_tool_call("c1", "read", '{"p":"' + LONE + '"}'),
            "messages[0].content[0].arguments_json",
            ErrorReason.INVALID_JSON,
        ),
        (
            ContentBlock.of_provider("anthropic", '{"type":"x","q":"' + LONE + '"}'),
            "messages[0].content[0].provider_json",
            ErrorReason.INVALID_JSON,
        ),
        (
            ContentBlock.of_text("a" + LONE),
            "messages[0].content[0].text",
            ErrorReason.INVALID_CONTENT,
        ),
        (
            ContentBlock(ContentKind.THINKING, text="t", signature=LONE),
            "messages[0].content[0].signature",
            ErrorReason.INVALID_CONTENT,
        ),
    ],
)
def test_stored_strings_with_a_lone_surrogate_are_refused(
    block: ContentBlock, field: str, reason: ErrorReason
) -> None:
    """The decoded character, not only its JSON escape (what ingest may produce)."""
    with pytest.raises(InvalidArgument) as info:
        check_messages([Message(Role.ASSISTANT, (block,))], 100)
    assert (info.value.reason, info.value.field) == (reason, field)
    assert "surrogate" in info.value.message
