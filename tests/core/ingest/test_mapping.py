"""What each provider's fields map to, and what is rejected (with its JSON path)."""

from __future__ import annotations

import json
from typing import Any

import anthropic.types as at
import openai.types.responses as orr
import pytest
from google.genai import types as gt

from ctxwarden.core.errors import InvalidArgument
from ctxwarden.core.ingest import (
    ingest_items,
    ingest_response,
    parse_reasoning_signature,
    reasoning_signature,
)
from ctxwarden.core.ingest.gemini import call_id
from ctxwarden.core.messages import ContentBlock, ContentKind, Message, Role, StopReason
from ctxwarden.core.reasons import ErrorReason
from ctxwarden.core.render import Format, render
from tests.core.ingest import sdk_fixtures as fx
from tests.render.transcripts import assistant, call, image, result, user


def _rejected(fmt: Format, body: object, field: str, *, items: bool = False) -> InvalidArgument:
    with pytest.raises(InvalidArgument) as info:
        if items:
            ingest_items(fmt, body)
        else:
            ingest_response(fmt, body)
    assert info.value.reason == ErrorReason.INVALID_MODEL_OUTPUT
    assert info.value.field == field, info.value.message
    assert info.value.message.startswith(field)
    return info.value


def _kept(message: Message, family: str) -> list[Any]:
    """The PROVIDER blocks of ``message``, parsed (all of ``family``)."""
    blocks = [b for b in message.content if b.kind is ContentKind.PROVIDER]
    assert {b.family for b in blocks} <= {family}
    return [json.loads(b.provider_json) for b in blocks]


def _one(fmt: Format, body: object) -> Message:
    (message,) = ingest_response(fmt, body).messages
    return message


def _chat(*calls: tuple[str, str], finish: str = "tool_calls", text: str | None = None) -> Any:
    rendered: dict[str, Any] = {"content": text}
    if calls:
        rendered["tool_calls"] = [
            {"id": f"call_{i}", "function": {"name": name, "arguments": args}}
            for i, (name, args) in enumerate(calls)
        ]
    return fx.dump(fx.chat_completion(rendered, finish))


def _anthropic(blocks: list[dict[str, Any]], stop: str = "end_turn") -> Any:
    return fx.dump(fx.anthropic_message(blocks, stop))


# -- formats and shapes ---------------------------------------------------------------


def test_native_has_no_wire_form() -> None:
    with pytest.raises(InvalidArgument) as info:
        ingest_response(Format.NATIVE, {})
    assert (info.value.reason, info.value.field) == (ErrorReason.INVALID_FORMAT, "format")


@pytest.mark.parametrize(
    "fmt",
    [Format.OPENAI_CHAT, Format.OPENAI_RESPONSES, Format.ANTHROPIC_MESSAGES, Format.GEMINI],
)
def test_a_body_must_be_an_object_or_a_list_of_events(fmt: Format) -> None:
    _rejected(fmt, "hello", "response_json")
    _rejected(fmt, ["hello"], "response_json[0]")
    _rejected(fmt, {"x": 1}, "items_json", items=True)


def test_the_root_field_name_can_be_chosen() -> None:
    with pytest.raises(InvalidArgument) as info:
        ingest_response(Format.OPENAI_CHAT, ["x"], field="body")
    assert info.value.field == "body[0]"


# -- OpenAI Chat ------------------------------------------------------------------------


def test_chat_bad_arguments_name_their_path() -> None:
    body = _chat(("read", '{"path":"a"}'), ("ls", "not json"))
    error = _rejected(
        Format.OPENAI_CHAT,
        body,
        "response_json.choices[0].message.tool_calls[1].function.arguments",
    )
    assert "not valid JSON" in error.message
    body = _chat(("read", "[1]"))
    _rejected(
        Format.OPENAI_CHAT,
        body,
        "response_json.choices[0].message.tool_calls[0].function.arguments",
    )


def test_chat_tool_calls_keep_their_arguments_text() -> None:
    message = _one(Format.OPENAI_CHAT, _chat(("read", '{"path": "a.txt"}'), text="Reading."))
    assert message.content == (
        ContentBlock.of_text("Reading."),
        ContentBlock.of_tool_call("call_0", "read", '{"path": "a.txt"}'),
    )
    assert (message.role, message.stop_reason, message.provider) == (
        Role.ASSISTANT,
        StopReason.TOOL_USE,
        "openai",
    )


@pytest.mark.parametrize(
    ("finish", "stop"),
    [
        ("stop", StopReason.STOP),
        ("length", StopReason.LENGTH),
        ("content_filter", StopReason.ERROR),
        ("function_call", StopReason.TOOL_USE),
    ],
)
def test_chat_finish_reasons(finish: str, stop: StopReason) -> None:
    message = _one(Format.OPENAI_CHAT, _chat(text="x", finish=finish))
    assert message.stop_reason is stop
    assert bool(message.error_message) == (stop is StopReason.ERROR)


def test_chat_stream_without_finish_reason_is_aborted() -> None:
    chunks = [fx.dump(c) for c in fx.chat_chunks(fx.chat_completion({"content": "Hi"}, "stop"))]
    message = _one(Format.OPENAI_CHAT, chunks[:-2])
    assert (message.stop_reason, message.text, message.usage) == (StopReason.ABORTED, "Hi", None)


def test_chat_refusal_is_text_and_audio_is_rejected() -> None:
    body = _chat(text=None, finish="stop")
    body["choices"][0]["message"]["refusal"] = "I can't help with that."
    assert _one(Format.OPENAI_CHAT, body).text == "I can't help with that."
    body["choices"][0]["message"]["audio"] = {"id": "a", "data": "", "expires_at": 0}
    _rejected(Format.OPENAI_CHAT, body, "response_json.choices[0].message.audio")


def test_chat_no_choices() -> None:
    body = _chat(text="x")
    body["choices"] = []
    _rejected(Format.OPENAI_CHAT, body, "response_json.choices")


def test_chat_items() -> None:
    messages = [
        user("look", image(b"\x89PNG", "image/png")),
        assistant(call("call_1", "read")),
        result("call_1", "text out", image(b"img", "image/jpeg"), name="read"),
    ]
    items = json.loads(render(Format.OPENAI_CHAT, "", (), messages, model="m").json)["messages"]
    got = ingest_items(Format.OPENAI_CHAT, items, model="m")
    # The moved images go back to their tool result; the name comes from the call.
    assert [m.role for m in got] == [Role.USER, Role.ASSISTANT, Role.TOOL_RESULT]
    assert got[0].content == messages[0].content
    assert got[1].content == messages[1].content
    assert (got[1].model, got[1].provider) == ("m", "openai")
    assert got[2].content == messages[2].content
    assert (got[2].tool_call_id, got[2].tool_name) == ("call_1", "read")


def test_chat_items_rejected() -> None:
    system = [{"role": "system", "content": "Be brief."}]
    error = _rejected(Format.OPENAI_CHAT, system, "items_json[0].role", items=True)
    assert "system prompt" in error.message
    url_part = {"type": "image_url", "image_url": {"url": "https://x"}}
    audio_part = {"type": "input_audio", "input_audio": {"data": "", "format": "wav"}}
    parts = [{"type": "text", "text": "a"}, url_part, audio_part]
    (kept,) = ingest_items(Format.OPENAI_CHAT, [{"role": "user", "content": parts}])
    assert kept.content[0] == ContentBlock.of_text("a")
    assert _kept(kept, "openai-chat") == [url_part, audio_part]
    file_in_tool = [{"role": "tool", "tool_call_id": "c", "content": [audio_part]}]
    _rejected(Format.OPENAI_CHAT, file_in_tool, "items_json[0].content[0].type", items=True)
    no_id = [{"role": "tool", "content": "x"}]
    _rejected(Format.OPENAI_CHAT, no_id, "items_json[0].tool_call_id", items=True)


# -- OpenAI Responses ----------------------------------------------------------------------


def _reasoning(summary: list[str], encrypted: str | None = "ENC") -> orr.ResponseReasoningItem:
    return orr.ResponseReasoningItem(
        type="reasoning",
        id="rs_1",
        summary=[{"type": "summary_text", "text": t} for t in summary],  # type: ignore[misc]
        encrypted_content=encrypted,
    )


def test_responses_reasoning_keeps_id_and_encrypted_content() -> None:
    output = [
        _reasoning(["First.", "Then."]),
        *fx.responses_output([{"role": "assistant", "content": "Hi"}]),
    ]
    message = _one(Format.OPENAI_RESPONSES, fx.dump(fx.response(output)))
    thinking, text = message.content
    assert thinking.kind is ContentKind.THINKING
    assert thinking.text == "First.\n\nThen."
    assert parse_reasoning_signature(thinking.signature) == ("rs_1", "ENC")
    assert text == ContentBlock.of_text("Hi")
    bare = _one(Format.OPENAI_RESPONSES, fx.dump(fx.response([_reasoning([], None)])))
    assert parse_reasoning_signature(bare.content[0].signature) == ("rs_1", "")
    assert reasoning_signature("rs_1") == '{"id":"rs_1"}'
    assert parse_reasoning_signature("c2ln") is None


def test_responses_reasoning_streamed() -> None:
    final = fx.response([_reasoning(["Thinking about it."])])
    events = [fx.dump(e) for e in fx.responses_events(final, done=False)]
    del events[-1]["response"]["output"]
    message = _one(Format.OPENAI_RESPONSES, events)
    assert message.content[0].text == "Thinking about it."
    assert parse_reasoning_signature(message.content[0].signature) == ("rs_1", "ENC")


@pytest.mark.parametrize(
    ("status", "extra", "stop"),
    [
        ("incomplete", {"incomplete_details": {"reason": "max_output_tokens"}}, StopReason.LENGTH),
        ("incomplete", {"incomplete_details": {"reason": "content_filter"}}, StopReason.ERROR),
        ("failed", {"error": {"code": "server_error", "message": "boom"}}, StopReason.ERROR),
        ("cancelled", {}, StopReason.ABORTED),
    ],
)
def test_responses_status(status: str, extra: dict[str, Any], stop: StopReason) -> None:
    text = fx.responses_output([{"role": "assistant", "content": "partial"}])
    message = _one(Format.OPENAI_RESPONSES, fx.dump(fx.response(text, status, **extra)))
    assert message.stop_reason is stop
    if status == "failed":
        assert message.error_message == "boom"


def test_responses_unmodelled_output_items_are_kept() -> None:
    search = fx.dump(
        orr.ResponseFunctionWebSearch(
            id="ws_1",
            status="completed",
            type="web_search_call",
            action={"type": "search", "query": "q"},  # type: ignore[arg-type]
        )
    )
    text = fx.responses_output([{"role": "assistant", "content": "x"}])
    body = fx.dump(fx.response(text))
    body["output"].insert(0, search)
    message = _one(Format.OPENAI_RESPONSES, body)
    assert [b.kind for b in message.content] == [ContentKind.PROVIDER, ContentKind.TEXT]
    assert _kept(message, "openai-responses") == [search]
    cited = fx.dump(fx.response(text))
    cited["output"][0]["content"][0]["annotations"] = [{"type": "url_citation", "url": "u"}]
    message = _one(Format.OPENAI_RESPONSES, cited)
    assert _kept(message, "openai-responses") == [cited["output"][0]]
    assert (message.stop_reason, len(message.content)) == (StopReason.STOP, 1)
    wrong = fx.dump(fx.response([]))
    wrong["output"] = [{"type": "web_search_call", "id": 1}]
    message = _one(Format.OPENAI_RESPONSES, wrong)  # kept as sent: not ctxwarden's to check
    assert _kept(message, "openai-responses") == wrong["output"]
    untyped = fx.dump(fx.response([]))
    untyped["output"] = [{"type": "function_call_output", "call_id": "c", "output": "x"}]
    _rejected(Format.OPENAI_RESPONSES, untyped, "response_json.output[0].type")


def test_responses_stream_events_name_their_path() -> None:
    events = [fx.dump(e) for e in fx.responses_events(fx.response([]))]
    events.insert(1, {"type": "response.output_text.delta", "output_index": 4, "delta": "x"})
    _rejected(Format.OPENAI_RESPONSES, events, "response_json[1].output_index")
    events = [fx.dump(e) for e in fx.responses_events(fx.response([]))][:1]
    assert _one(Format.OPENAI_RESPONSES, events).stop_reason is StopReason.ABORTED


def test_responses_items() -> None:
    items = [
        {"role": "user", "content": [{"type": "input_text", "text": "hi"}]},
        fx.dump(_reasoning(["Plan."])),
        {"type": "function_call", "call_id": "c1", "name": "read", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "done"},
    ]
    got = ingest_items(Format.OPENAI_RESPONSES, items, model="m")
    assert [m.role for m in got] == [Role.USER, Role.ASSISTANT, Role.TOOL_RESULT]
    assert [b.kind for b in got[1].content] == [ContentKind.THINKING, ContentKind.TOOL_CALL]
    assert (got[2].tool_name, got[2].text) == ("read", "done")
    (reference,) = ingest_items(Format.OPENAI_RESPONSES, [{"type": "item_reference", "id": "x"}])
    assert reference.role is Role.ASSISTANT
    assert _kept(reference, "openai-responses") == [{"type": "item_reference", "id": "x"}]
    _rejected(
        Format.OPENAI_RESPONSES,
        [{"role": "developer", "content": "x"}],
        "items_json[0].role",
        items=True,
    )
    part = {"type": "input_image", "file_id": "f"}
    (file_image,) = ingest_items(Format.OPENAI_RESPONSES, [{"role": "user", "content": [part]}])
    assert (file_image.role, _kept(file_image, "openai-responses")) == (Role.USER, [part])


# -- Anthropic ----------------------------------------------------------------------------


def test_anthropic_thinking_and_redacted_thinking() -> None:
    blocks = [
        {"type": "thinking", "thinking": "Let me see.", "signature": "SIG"},
        {"type": "redacted_thinking", "data": "OPAQUE"},
        {"type": "text", "text": "Done."},
    ]
    message = _one(Format.ANTHROPIC_MESSAGES, _anthropic(blocks))
    assert message.content == (
        ContentBlock(ContentKind.THINKING, text="Let me see.", signature="SIG"),
        ContentBlock(ContentKind.THINKING, signature="OPAQUE", redacted=True),
        ContentBlock.of_text("Done."),
    )
    assert message.usage is not None and message.usage.cache_write_tokens == 5


@pytest.mark.parametrize(
    ("reason", "stop"),
    [
        ("max_tokens", StopReason.LENGTH),
        ("refusal", StopReason.ERROR),
        ("stop_sequence", StopReason.STOP),
        ("pause_turn", StopReason.STOP),
        ("model_context_window_exceeded", StopReason.LENGTH),
    ],
)
def test_anthropic_stop_reasons(reason: str, stop: StopReason) -> None:
    message = _one(Format.ANTHROPIC_MESSAGES, _anthropic([{"type": "text", "text": "x"}], reason))
    assert message.stop_reason is stop


def test_anthropic_unmodelled_blocks_are_kept() -> None:
    body = _anthropic([{"type": "text", "text": "x"}])
    server = {"type": "server_tool_use", "id": "s", "name": "web_search", "input": {}}
    body["content"].append(server)
    message = _one(Format.ANTHROPIC_MESSAGES, body)
    assert message.content[0] == ContentBlock.of_text("x")
    assert _kept(message, "anthropic") == [server]
    body["content"].append({"text": "no type"})
    _rejected(Format.ANTHROPIC_MESSAGES, body, "response_json.content[2].type")
    cited = fx.dump(
        at.Message(
            id="m",
            type="message",
            role="assistant",
            model="x",
            content=[
                at.TextBlock(
                    type="text",
                    text="x",
                    citations=[
                        at.CitationCharLocation(
                            type="char_location",
                            cited_text="x",
                            document_index=0,
                            start_char_index=0,
                            end_char_index=1,
                        )
                    ],
                )
            ],
            usage=fx.anthropic_usage(),
        )
    )
    message = _one(Format.ANTHROPIC_MESSAGES, cited)
    assert _kept(message, "anthropic") == [cited["content"][0]]


def test_anthropic_stream_errors() -> None:
    events = [fx.dump(e) for e in fx.anthropic_events(fx.anthropic_message([], "end_turn"))]
    _rejected(Format.ANTHROPIC_MESSAGES, events[1:], "response_json[0].type")
    error_event = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    message = _one(Format.ANTHROPIC_MESSAGES, [events[0], error_event])
    assert (message.stop_reason, message.error_message) == (StopReason.ERROR, "Overloaded")
    assert _one(Format.ANTHROPIC_MESSAGES, events[:1]).stop_reason is StopReason.ABORTED


def test_anthropic_items() -> None:
    items = [
        {"role": "user", "content": "hi"},
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "t1", "name": "read", "input": {"p": 1}}],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "t1", "content": "out", "is_error": True},
                {"type": "text", "text": "and then?", "cache_control": {"type": "ephemeral"}},
            ],
        },
    ]
    got = ingest_items(Format.ANTHROPIC_MESSAGES, items)
    assert [m.role for m in got] == [Role.USER, Role.ASSISTANT, Role.TOOL_RESULT, Role.USER]
    assert got[1].content[0].arguments_json == '{"p":1}'
    assert (got[2].tool_name, got[2].is_error, got[2].text) == ("read", True, "out")
    url = {"type": "image", "source": {"type": "url", "url": "u"}}
    doc = {"type": "document", "source": {}, "cache_control": {"type": "ephemeral"}}
    (kept,) = ingest_items(Format.ANTHROPIC_MESSAGES, [{"role": "user", "content": [url, doc]}])
    # cache_control is ignored, on kept blocks too: the renderer places breakpoints.
    assert _kept(kept, "anthropic") == [url, {"type": "document", "source": {}}]


# -- Gemini --------------------------------------------------------------------------------


def _gemini(parts: list[gt.Part], finish: str = "STOP") -> Any:
    return fx.dump_gemini(fx.gemini_response(parts, finish))


def test_gemini_calls_without_ids_get_stable_ones() -> None:
    parts = [gt.Part(function_call=gt.FunctionCall(name="read", args={"p": "a"}))]
    first = _one(Format.GEMINI, _gemini(parts))
    again = _one(Format.GEMINI, _gemini(parts))
    (block,) = first.content
    assert block.tool_call_id == again.content[0].tool_call_id
    assert block.tool_call_id == call_id("resp-g1", 0, "read", '{"p":"a"}')
    assert block.tool_call_id.startswith("gemini_")
    assert first.stop_reason is StopReason.TOOL_USE


def test_gemini_signatures() -> None:
    parts = [
        gt.Part(text="Plan.", thought=True, thought_signature=b"sig1"),
        gt.Part(text="Answer.", thought_signature=b"sig2"),
    ]
    message = _one(Format.GEMINI, _gemini(parts))
    assert [(b.kind, b.text, b.signature) for b in message.content] == [
        (ContentKind.THINKING, "Plan.", "c2lnMQ=="),
        (ContentKind.THINKING, "", "c2lnMg=="),
        (ContentKind.TEXT, "Answer.", ""),
    ]


@pytest.mark.parametrize(
    ("finish", "stop"),
    [
        ("MAX_TOKENS", StopReason.LENGTH),
        ("SAFETY", StopReason.ERROR),
        ("MALFORMED_FUNCTION_CALL", StopReason.ERROR),
        ("FINISH_REASON_UNSPECIFIED", StopReason.UNSPECIFIED),
    ],
)
def test_gemini_finish_reasons(finish: str, stop: StopReason) -> None:
    message = _one(Format.GEMINI, _gemini([gt.Part(text="x")], finish))
    assert message.stop_reason is stop
    if stop is StopReason.ERROR:
        assert finish in message.error_message


def test_gemini_blocked_prompt() -> None:
    body = fx.dump_gemini(
        gt.GenerateContentResponse(
            prompt_feedback=gt.GenerateContentResponsePromptFeedback(
                block_reason=gt.BlockedReason.SAFETY
            ),
        )
    )
    message = _one(Format.GEMINI, body)
    assert (message.content, message.stop_reason) == ((), StopReason.ERROR)
    assert "SAFETY" in message.error_message


def test_gemini_unmodelled_parts_are_kept() -> None:
    parts = [
        gt.Part(executable_code=gt.ExecutableCode(code="print(1)", language=gt.Language.PYTHON)),
        gt.Part(
            code_execution_result=gt.CodeExecutionResult(outcome=gt.Outcome.OUTCOME_OK, output="1")
        ),
        gt.Part(text="done"),
    ]
    body = _gemini(parts)
    message = _one(Format.GEMINI, body)
    assert _kept(message, "google") == body["candidates"][0]["content"]["parts"][:2]
    assert message.content[2] == ContentBlock.of_text("done")
    snake = fx.dump_gemini(fx.gemini_response(parts), camel=False)
    message = _one(Format.GEMINI, snake)
    assert _kept(message, "google") == snake["candidates"][0]["content"]["parts"][:2]
    image_out = _gemini([gt.Part(inline_data=gt.Blob(mime_type="image/png", data=b"x"))])
    message = _one(Format.GEMINI, image_out)
    assert _kept(message, "google") == image_out["candidates"][0]["content"]["parts"]
    bad_args = _gemini([gt.Part(function_call=gt.FunctionCall(name="read"))])
    bad_args["candidates"][0]["content"]["parts"][0]["functionCall"]["args"] = [1]
    _rejected(
        Format.GEMINI, bad_args, "response_json.candidates[0].content.parts[0].functionCall.args"
    )


def test_gemini_items() -> None:
    contents = [
        {"role": "user", "parts": [{"text": "hi"}]},
        {"role": "model", "parts": [{"functionCall": {"name": "read", "args": {}}}]},
        {
            "role": "user",
            "parts": [
                {"functionResponse": {"name": "read", "response": {"error": "no such file"}}},
                {"functionResponse": {"id": "other", "name": "ls", "response": {"files": [1]}}},
            ],
        },
    ]
    got = ingest_items(Format.GEMINI, contents, model="gemini-x")
    assert [m.role for m in got] == [Role.USER, Role.ASSISTANT, Role.TOOL_RESULT, Role.TOOL_RESULT]
    call_block = got[1].content[0]
    assert got[2].tool_call_id == call_block.tool_call_id
    assert (got[2].is_error, got[2].text, got[2].tool_name) == (True, "no such file", "read")
    assert (got[3].tool_call_id, got[3].text) == ("other", '{"files":[1]}')
    orphan = [{"role": "user", "parts": [{"functionResponse": {"name": "x", "response": {}}}]}]
    _rejected(Format.GEMINI, orphan, "items_json[0].parts[0].functionResponse.id", items=True)
    part = {"codeExecutionResult": {"outcome": "OUTCOME_OK"}, "thoughtSignature": "c2ln"}
    (code,) = ingest_items(Format.GEMINI, [{"role": "model", "parts": [part]}], model="g")
    assert (code.role, _kept(code, "google")) == (Role.ASSISTANT, [part])
    nothing = [{"role": "user", "parts": [{"videoMetadata": {}}]}]
    _rejected(Format.GEMINI, nothing, "items_json[0].parts[0]", items=True)
