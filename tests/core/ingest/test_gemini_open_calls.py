"""Gemini: a functionResponse without an id answers the session's open call of
its name, as the provider pairs them; a document with none of Gemini's fields
is refused rather than stored as a failed turn."""

from __future__ import annotations

import json
from typing import Any

import pytest
from google.genai import types as gt

from ctxwarden.core.errors import InvalidArgument
from ctxwarden.core.ingest import ingest_items, ingest_response
from ctxwarden.core.messages import Role, StopReason
from ctxwarden.core.reasons import ErrorReason
from ctxwarden.core.render import Format
from tests.core.ingest import sdk_fixtures as fx

FMT = Format.GEMINI


def _responses(*responses: dict[str, Any]) -> list[Any]:
    """One user content with these function responses, as the SDK dumps them."""
    parts = [
        gt.Part(
            function_response=gt.FunctionResponse(
                id=r.get("id"), name=r["name"], response={"output": r.get("output", "ok")}
            )
        )
        for r in responses
    ]
    content = gt.Content(role="user", parts=parts)
    return [
        json.loads(json.dumps(content.model_dump(mode="json", by_alias=True, exclude_none=True)))
    ]


def test_a_response_without_an_id_answers_the_open_call_of_its_name() -> None:
    open_calls = (("gemini_aaa", "read"), ("gemini_bbb", "ls"))
    (result,) = ingest_items(FMT, _responses({"name": "ls"}), open_calls=open_calls)
    assert (result.role, result.tool_call_id, result.tool_name) == (
        Role.TOOL_RESULT,
        "gemini_bbb",
        "ls",
    )
    assert result.text == "ok"


def test_two_open_calls_of_the_name_and_no_id_is_refused_asking_for_ids() -> None:
    open_calls = (("gemini_aaa", "read"), ("gemini_bbb", "read"))
    with pytest.raises(InvalidArgument) as info:
        ingest_items(FMT, _responses({"name": "read"}), open_calls=open_calls)
    error = info.value
    assert (error.reason, error.field) == (
        ErrorReason.INVALID_MODEL_OUTPUT,
        "items_json[0].parts[0].functionResponse.id",
    )
    assert "gemini_aaa" in error.message and "gemini_bbb" in error.message
    assert "id" in error.message.split(":", 1)[1]


def test_responses_with_ids_leave_the_rest_unambiguous() -> None:
    open_calls = (("gemini_aaa", "read"), ("gemini_bbb", "read"))
    items = _responses({"name": "read", "id": "gemini_aaa"}, {"name": "read", "output": "b"})
    first, second = ingest_items(FMT, items, open_calls=open_calls)
    assert (first.tool_call_id, second.tool_call_id, second.text) == (
        "gemini_aaa",
        "gemini_bbb",
        "b",
    )
    (only,) = ingest_items(FMT, _responses({"name": "read"}), open_calls=open_calls[1:])
    assert only.tool_call_id == "gemini_bbb"
    with pytest.raises(InvalidArgument) as info:  # the second has no open call left
        ingest_items(FMT, _responses({"name": "read"}, {"name": "read"}), open_calls=[])
    assert info.value.field == "items_json[0].parts[0].functionResponse.id"
    with pytest.raises(InvalidArgument) as info:
        two = _responses({"name": "read"}, {"name": "read"})
        ingest_items(FMT, two, open_calls=open_calls[1:])
    assert info.value.field == "items_json[0].parts[1].functionResponse.id"


def test_the_calls_among_the_contents_come_first() -> None:
    contents = [
        {"role": "model", "parts": [{"functionCall": {"name": "read", "args": {}}}]},
        *_responses({"name": "read"}),
    ]
    call, result = ingest_items(FMT, contents, model="g", open_calls=(("gemini_old", "read"),))
    assert result.tool_call_id == call.content[0].tool_call_id != "gemini_old"


def test_no_open_call_of_the_name_is_refused() -> None:
    with pytest.raises(InvalidArgument) as info:
        ingest_items(FMT, _responses({"name": "read"}), open_calls=(("gemini_aaa", "ls"),))
    assert info.value.field == "items_json[0].parts[0].functionResponse.id"


# -- documents that are not Gemini's -----------------------------------------------------


def test_a_document_without_gemini_fields_is_refused() -> None:
    chat = fx.dump(fx.chat_completion({"content": "Hi"}, "stop"))
    with pytest.raises(InvalidArgument) as info:
        ingest_response(FMT, chat)
    error = info.value
    assert (error.reason, error.field) == (ErrorReason.INVALID_MODEL_OUTPUT, "response_json")
    assert "candidates" in error.message and "format" in error.message
    chunks = [fx.dump(c) for c in fx.chat_chunks(fx.chat_completion({"content": "Hi"}, "stop"))]
    with pytest.raises(InvalidArgument) as info:
        ingest_response(FMT, chunks)
    assert (info.value.reason, info.value.field) == (
        ErrorReason.INVALID_MODEL_OUTPUT,
        "response_json",
    )
    with pytest.raises(InvalidArgument):
        ingest_response(FMT, {})


def test_a_blocked_prompt_is_still_a_failed_turn() -> None:
    blocked = gt.GenerateContentResponse(
        prompt_feedback=gt.GenerateContentResponsePromptFeedback(
            block_reason=gt.BlockedReason.PROHIBITED_CONTENT
        ),
        usage_metadata=gt.GenerateContentResponseUsageMetadata(prompt_token_count=12),
        model_version="gemini-2.5-pro",
        response_id="resp-blocked",
    )
    for body in (fx.dump_gemini(blocked), [fx.dump_gemini(blocked)]):
        (message,) = ingest_response(FMT, body).messages
        assert (message.content, message.stop_reason) == ((), StopReason.ERROR)
        assert "PROHIBITED_CONTENT" in message.error_message
