"""OpenAI Responses reasoning items go back to OpenAI Responses as they came.

A stateless reasoning loop (``store: false``, zero data retention) keeps its
reasoning between tool calls only if every reasoning item, with its
``encrypted_content``, is sent back in the next request, in its place. Other
formats cannot take it: there it is dropped with THINKING_DROPPED.
"""

from __future__ import annotations

import json
from typing import Any

import openai.types.responses as orr
import pytest

from ctxwarden.core.ingest import ingest_items, ingest_response
from ctxwarden.core.messages import ContentBlock, ContentKind, Message, Role
from ctxwarden.core.render import THINKING_DROPPED, Format, finished, new_state, render
from tests.core.ingest import sdk_fixtures as fx
from tests.render.sdk import check_responses_rules, validate_typed
from tests.render.transcripts import READ, numbered

FMT = Format.OPENAI_RESPONSES
MODEL = fx.MODEL


def _reasoning(summary: list[str], encrypted: str | None = "gAAAAB3ncrypted==") -> Any:
    item = orr.ResponseReasoningItem(
        type="reasoning",
        id="rs_68a1",
        summary=[{"type": "summary_text", "text": t} for t in summary],  # type: ignore[misc]
        encrypted_content=encrypted,
    )
    return fx.dump(item)


SUMMARY = ["**Reading the file**\n\nI need a.txt first.", "**Then**\n\nAnswer."]
"""Two summary parts, each with a blank line inside, as OpenAI writes them."""


def _turn(reasoning: Any) -> list[Message]:
    """A user message, the model's reasoning and call (a response body), the tool result."""
    call = {"type": "function_call", "call_id": "call_1", "name": "read", "arguments": "{}"}
    body = fx.dump(fx.response(fx.responses_output([call])))
    body["output"].insert(0, reasoning)
    (answer,) = ingest_response(FMT, body).messages
    output = [{"type": "function_call_output", "call_id": "call_1", "output": "hello"}]
    (result,) = ingest_items(FMT, output)
    user = Message(Role.USER, (ContentBlock.of_text("Read a.txt"),))
    return numbered([user, answer, result])


def _input(
    messages: list[Message], fmt: Format = FMT, model: str = MODEL
) -> tuple[list[Any], list[str]]:
    rendered = render(fmt, "", (READ,), messages, model=model)
    body = json.loads(rendered.json)
    if fmt is FMT:
        validate_typed(FMT, body)
        check_responses_rules(body)
    key = {Format.GEMINI: "contents", FMT: "input"}.get(fmt, "messages")
    return body[key], [n.code for n in rendered.notices]


@pytest.mark.parametrize(
    "reasoning",
    [
        _reasoning(SUMMARY),
        _reasoning(["One part."]),
        _reasoning([]),
        _reasoning(SUMMARY, None),
        _reasoning(["a\n\n", "", "\n\nb"]),
        _reasoning([""]),
    ],
    ids=["two-parts", "one-part", "no-summary", "no-encrypted-content", "blank-lines", "empty"],
)
def test_reasoning_goes_back_verbatim_before_its_call(reasoning: Any) -> None:
    items, notices = _input(_turn(reasoning))
    assert [i.get("type") for i in items] == [
        None,
        "reasoning",
        "function_call",
        "function_call_output",
    ]
    assert items[1] == reasoning
    assert THINKING_DROPPED not in notices


def test_streamed_reasoning_goes_back_verbatim() -> None:
    item = orr.ResponseReasoningItem.model_validate(_reasoning(SUMMARY))
    text = fx.responses_output([{"role": "assistant", "content": "Done."}])
    events = [fx.dump(e) for e in fx.responses_events(fx.response([item, *text]), done=False)]
    del events[-1]["response"]["output"]  # the items are the stream's own
    (answer,) = ingest_response(FMT, events).messages
    items, _ = _input([answer])
    assert items == [_reasoning(SUMMARY), {"role": "assistant", "content": "Done."}]


def test_reasoning_text_content_goes_back_as_content() -> None:
    reasoning = {
        "type": "reasoning",
        "id": "rs_2",
        "summary": [],
        "content": [{"type": "reasoning_text", "text": "Step 1.\n\nStep 2."}],
    }
    (message,) = ingest_items(FMT, [reasoning])
    items, _ = _input([message])
    assert items == [reasoning]


def test_an_item_with_both_summary_and_content_is_kept_verbatim() -> None:
    reasoning = {
        "type": "reasoning",
        "id": "rs_3",
        "summary": [{"type": "summary_text", "text": "Plan."}],
        "content": [{"type": "reasoning_text", "text": "Step 1."}],
        "encrypted_content": "RU5D",
    }
    (message,) = ingest_items(FMT, [reasoning])
    assert [b.kind for b in message.content] == [ContentKind.PROVIDER]
    items, _ = _input([message])
    assert items == [reasoning]


def test_other_formats_drop_it_with_a_notice() -> None:
    messages = _turn(_reasoning(SUMMARY))
    for fmt, model in [
        (Format.OPENAI_CHAT, MODEL),
        (Format.ANTHROPIC_MESSAGES, "claude-sonnet-4-5"),
        (Format.GEMINI, "gemini-2.5-pro"),
    ]:
        items, notices = _input(messages, fmt, model)
        assert "rs_68a1" not in json.dumps(items)
        assert THINKING_DROPPED in notices, fmt


def test_thinking_that_is_no_reasoning_item_is_still_dropped() -> None:
    """Anthropic's or Gemini's signatures are no Responses item ids."""
    thinking = ContentBlock(ContentKind.THINKING, text="hmm", signature="c2ln")
    message = Message(Role.ASSISTANT, (thinking, ContentBlock.of_text("Hi")), model=MODEL)
    items, notices = _input(numbered([message]))
    assert items == [{"role": "assistant", "content": "Hi"}]
    assert notices == [THINKING_DROPPED]


def test_a_signature_without_part_lengths_is_one_summary_part() -> None:
    """As ingest wrote it before part lengths were kept, or a client wrote it."""
    thinking = ContentBlock(
        ContentKind.THINKING, text="A.\n\nB.", signature='{"id":"rs_9","encrypted_content":"RU5D"}'
    )
    items, _ = _input(numbered([Message(Role.ASSISTANT, (thinking,), model=MODEL)]))
    assert items == [
        {
            "type": "reasoning",
            "id": "rs_9",
            "summary": [{"type": "summary_text", "text": "A.\n\nB."}],
            "encrypted_content": "RU5D",
        }
    ]


def test_the_rendering_grows_at_its_end_and_resumes() -> None:
    """Fed one message at a time, each rendering begins with the one before,
    byte for byte, and its marks let a holder of the earlier one resume."""
    messages = _turn(_reasoning(SUMMARY))
    state = new_state(FMT, "", (READ,), model=MODEL)
    held = finished(state)
    for n in range(1, len(messages) + 1):
        state.feed(messages[n - 1 : n])
        now = finished(state)
        assert now.json == render(FMT, "", (READ,), messages[:n], model=MODEL).json
        assert held.marks is not None and now.marks is not None
        stable = held.marks.stable
        assert now.marks.holds(stable, held.marks.digests[stable])
        cut = now.marks.utf8[stable]
        assert now.json.encode()[:cut] == held.json.encode()[:cut]
        assert (held.json.encode()[:cut] + now.after(stable).encode()).decode() == now.json
        held = now
