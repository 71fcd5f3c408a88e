"""Responses built from a core assistant message read back to that message's form.

For each format: render an assistant message, wrap its provider form in the
provider's SDK response type, ingest the dumped response and render the
result: the provider form is the same. The streamed form of the same
response (SDK event types) reads to the same message, and so does what the
SDK's own stream accumulator makes of the events.
"""

from __future__ import annotations

import itertools
import json
from dataclasses import replace
from typing import Any

from anthropic.lib.streaming._messages import accumulate_event
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from openai import omit
from openai.lib.streaming.chat import ChatCompletionStreamState
from openai.lib.streaming.responses._responses import ResponseStreamState
from openai.types.responses import ResponseCompletedEvent

from ctxwarden.core.ingest import IngestedTurn, ingest_response
from ctxwarden.core.messages import ContentKind, Message, StopReason, Usage
from ctxwarden.core.render import Format, render
from tests.core.ingest import sdk_fixtures as fx
from tests.render.transcripts import assistant_steps

SETTINGS = settings(
    max_examples=80,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

assistant_messages = assistant_steps().map(lambda step: step[0])


def _form(fmt: Format, message: Message) -> Any:
    """The provider form of one assistant message (None when nothing is sent)."""
    body = json.loads(render(fmt, "", (), [message], model=fx.MODEL).json)
    if fmt is Format.OPENAI_CHAT:
        return body["messages"][0] if body["messages"] else None
    if fmt is Format.OPENAI_RESPONSES:
        return body["input"] or None
    if fmt is Format.ANTHROPIC_MESSAGES:
        last = body["messages"][-1] if body["messages"] else None
        return last["content"] if last and last["role"] == "assistant" else None
    last = body["contents"][-1] if body["contents"] else None
    return last["parts"] if last and last["role"] == "model" else None


def _only(turn: IngestedTurn) -> Message:
    assert len(turn.messages) == 1
    return turn.messages[0]


def _stop(message: Message) -> StopReason:
    has_calls = any(b.kind is ContentKind.TOOL_CALL for b in message.content)
    return StopReason.TOOL_USE if has_calls else StopReason.STOP


def _check(fmt: Format, message: Message, ingested: Message, usage: Usage) -> None:
    assert _form(fmt, ingested) == _form(fmt, message)
    assert ingested.stop_reason is _stop(message)
    assert ingested.usage == usage
    assert ingested.model == fx.MODEL


# -- OpenAI Chat -------------------------------------------------------------------

CHAT_USAGE = Usage(
    input_tokens=15, output_tokens=30, cache_read_tokens=100, cache_write_tokens=5, total_tokens=150
)


@SETTINGS
@given(message=assistant_messages)
def test_chat_completion(message: Message) -> None:
    form = _form(Format.OPENAI_CHAT, message)
    assume(form is not None and not isinstance(form["content"], list))
    completion = fx.chat_completion(form, "tool_calls" if "tool_calls" in form else "stop")
    turn = ingest_response(Format.OPENAI_CHAT, fx.dump(completion))
    ingested = _only(turn)
    _check(Format.OPENAI_CHAT, message, ingested, CHAT_USAGE)
    assert (turn.response_id, ingested.provider, turn.streamed) == ("chatcmpl-1", "openai", False)

    chunks = fx.chat_chunks(completion)
    streamed = ingest_response(Format.OPENAI_CHAT, [fx.dump(c) for c in chunks])
    assert streamed.streamed
    assert _only(streamed) == ingested

    state: ChatCompletionStreamState[None] = ChatCompletionStreamState()
    for chunk in chunks:
        state.handle_chunk(chunk)
    accumulated = ingest_response(Format.OPENAI_CHAT, fx.dump(state.get_final_completion()))
    assert _only(accumulated) == ingested


# -- OpenAI Responses --------------------------------------------------------------

RESPONSES_USAGE = Usage(
    input_tokens=15,
    output_tokens=30,
    cache_read_tokens=100,
    cache_write_tokens=5,
    total_tokens=150,
    reasoning_tokens=10,  # output_tokens_details.reasoning_tokens, part of output_tokens
)


@SETTINGS
@given(message=assistant_messages, done=st.booleans())
def test_responses_response(message: Message, done: bool) -> None:
    form = _form(Format.OPENAI_RESPONSES, message)
    assume(form is not None)
    # The provider gives each output item its own id; two reasoning items of one response
    # never share one (the SDK's stream accumulator refuses that).
    reasoning_ids = [item["id"] for item in form if item.get("type") == "reasoning"]
    assume(len(reasoning_ids) == len(set(reasoning_ids)))
    final = fx.response(fx.responses_output(form))
    turn = ingest_response(Format.OPENAI_RESPONSES, fx.dump(final))
    ingested = _only(turn)
    _check(Format.OPENAI_RESPONSES, message, ingested, RESPONSES_USAGE)
    assert turn.response_id == "resp_1"

    events = fx.responses_events(final, done=done)
    dumped = [fx.dump(e) for e in events]
    assert _only(ingest_response(Format.OPENAI_RESPONSES, dumped)) == ingested
    # A terminal event without output: the items come from the stream itself.
    del dumped[-1]["response"]["output"]
    assert _only(ingest_response(Format.OPENAI_RESPONSES, dumped)) == ingested

    state: ResponseStreamState[None] = ResponseStreamState(input_tools=omit, text_format=omit)
    completed = [
        out for e in events for out in state.handle_event(e) if out.type == "response.completed"
    ]
    assert isinstance(completed[0], ResponseCompletedEvent)
    accumulated = ingest_response(Format.OPENAI_RESPONSES, fx.dump(completed[0].response))
    assert _only(accumulated) == ingested


# -- Anthropic ---------------------------------------------------------------------

ANTHROPIC_USAGE = Usage(
    input_tokens=20, output_tokens=30, cache_read_tokens=100, cache_write_tokens=5
)


@SETTINGS
@given(message=assistant_messages)
def test_anthropic_message(message: Message) -> None:
    form = _form(Format.ANTHROPIC_MESSAGES, message)
    assume(form is not None)
    has_calls = any(b["type"] == "tool_use" for b in form)
    sdk_message = fx.anthropic_message(form, "tool_use" if has_calls else "end_turn")
    turn = ingest_response(Format.ANTHROPIC_MESSAGES, fx.dump(sdk_message))
    ingested = _only(turn)
    _check(Format.ANTHROPIC_MESSAGES, message, ingested, ANTHROPIC_USAGE)
    assert (turn.response_id, ingested.provider) == ("msg_1", "anthropic")

    events = fx.anthropic_events(sdk_message)
    streamed = ingest_response(Format.ANTHROPIC_MESSAGES, [fx.dump(e) for e in events])
    assert _only(streamed) == ingested

    snapshot = None
    json_bufs: dict[int, bytes] = {}
    for event in events:
        snapshot = accumulate_event(event=event, current_snapshot=snapshot, json_bufs=json_bufs)
    assert snapshot is not None
    accumulated = ingest_response(Format.ANTHROPIC_MESSAGES, fx.dump(snapshot))
    assert _only(accumulated) == ingested


# -- Gemini ------------------------------------------------------------------------

GEMINI_USAGE = Usage(
    input_tokens=20,
    output_tokens=30,
    cache_read_tokens=100,
    cache_write_tokens=0,
    total_tokens=150,
    reasoning_tokens=10,  # thoughtsTokenCount, counted in output_tokens
)


def _adjacent_texts(parts: list[dict[str, Any]]) -> bool:
    """Two text parts in a row that a stream could not tell from one."""
    return any(
        "text" in a
        and "text" in b
        and bool(a.get("thought")) == bool(b.get("thought"))
        and "thoughtSignature" not in b
        for a, b in itertools.pairwise(parts)
    )


@SETTINGS
@given(message=assistant_messages, camel=st.booleans())
def test_gemini_response(message: Message, camel: bool) -> None:
    form = _form(Format.GEMINI, message)
    assume(form is not None)
    parts = [fx.gemini_part(p) for p in form]
    sdk_response = fx.gemini_response(parts)
    turn = ingest_response(Format.GEMINI, fx.dump_gemini(sdk_response, camel=camel))
    ingested = _only(turn)
    _check(Format.GEMINI, message, ingested, GEMINI_USAGE)
    assert (turn.response_id, ingested.provider) == ("resp-g1", "google")

    if not _adjacent_texts(form):
        chunks = [fx.dump_gemini(c, camel=camel) for c in fx.gemini_chunks(parts)]
        streamed = _only(ingest_response(Format.GEMINI, chunks))
        assert streamed == ingested


def test_gemini_stream_joins_text_pieces() -> None:
    parts = [fx.gemini_part({"text": "Hello, world"})]
    chunks = [fx.dump_gemini(c) for c in fx.gemini_chunks(parts)]
    assert len(chunks) > 3
    message = _only(ingest_response(Format.GEMINI, chunks))
    assert [b.text for b in message.content] == ["Hello, world"]
    assert replace(message, usage=None).stop_reason is StopReason.STOP
