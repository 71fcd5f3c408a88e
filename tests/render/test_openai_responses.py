"""OpenAI Responses rendering."""

from __future__ import annotations

from ctxwarden.core.render import THINKING_DROPPED, Format, openai_responses_call_id
from ctxwarden.core.render._common import dumps
from tests.render.sdk import check_responses_rules, validate_typed
from tests.render.transcripts import (
    assistant,
    body,
    call,
    image,
    numbered,
    render_all,
    result,
    summary,
    thinking,
    user,
)

FMT = Format.OPENAI_RESPONSES

TRANSCRIPT = numbered(
    [
        user("Read a.txt please."),
        assistant(thinking("plan", "c2ln"), "Reading it.", call("call_1")),
        result("call_1", "hello"),
        assistant("It says hello."),
        user("Thanks"),
    ]
)


def test_exact_json() -> None:
    rendered = render_all(FMT, TRANSCRIPT)
    expected = {
        "instructions": "Be brief.",
        "input": [
            {"role": "user", "content": [{"type": "input_text", "text": "Read a.txt please."}]},
            {"role": "assistant", "content": "Reading it."},
            {
                "type": "function_call",
                "call_id": "call_1",
                "name": "read",
                "arguments": '{"path":"a.txt"}',
            },
            {"type": "function_call_output", "call_id": "call_1", "output": "hello"},
            {"role": "assistant", "content": "It says hello."},
            {"role": "user", "content": [{"type": "input_text", "text": "Thanks"}]},
        ],
        "tools": [
            {
                "type": "function",
                "name": "read",
                "description": "Read a file",
                "parameters": {
                    "type": "object",
                    "properties": {"path": {"type": "string"}},
                    "required": ["path"],
                },
                "strict": False,
            }
        ],
    }
    assert rendered.json == dumps(expected)
    assert [(n.code, n.seq) for n in rendered.notices] == [(THINKING_DROPPED, 2)]
    validate_typed(FMT, body(FMT, rendered))


def test_no_instructions_and_no_tools_when_empty() -> None:
    rendered = render_all(FMT, [summary("S")], system="", tools=())
    assert rendered.json == (
        '{"input":[{"role":"user","content":[{"type":"input_text","text":"S"}]}]}'
    )


def test_assistant_items_keep_block_order() -> None:
    messages = numbered(
        [
            user("go"),
            assistant("first", call("c1", "ls", ""), "second", call("c2")),
            result("c2", "b"),
            result("c1", "a", name="ls"),
        ]
    )
    items = body(FMT, render_all(FMT, messages))["input"]
    assert [(i.get("type"), i.get("content") or i.get("call_id")) for i in items[1:]] == [
        (None, "first"),
        ("function_call", "c1"),
        (None, "second"),
        ("function_call", "c2"),
        ("function_call_output", "c2"),
        ("function_call_output", "c1"),
    ]
    assert items[2]["arguments"] == "{}"


def test_images_stay_in_the_tool_output() -> None:
    messages = numbered(
        [
            user("shoot", image(b"\x01")),
            assistant(call("c1", "shot")),
            result("c1", image(b"\x00", "image/webp"), name="shot"),
        ]
    )
    rendered = render_all(FMT, messages, tools=())
    items = body(FMT, rendered)["input"]
    assert items[0]["content"][1] == {
        "type": "input_image",
        "image_url": "data:image/png;base64,AQ==",
        "detail": "auto",
    }
    assert items[2] == {
        "type": "function_call_output",
        "call_id": "c1",
        "output": [
            {"type": "input_image", "image_url": "data:image/webp;base64,AA==", "detail": "auto"}
        ],
    }
    assert rendered.notices == ()
    check_responses_rules(body(FMT, rendered))
    validate_typed(FMT, body(FMT, rendered))


def test_call_ids_over_64_characters_are_replaced() -> None:
    long_id = "fc_" + "z" * 80
    messages = numbered([user("hi"), assistant(call(long_id)), result(long_id, "ok")])
    rendered = render_all(FMT, messages)
    items = body(FMT, rendered)["input"]
    short = openai_responses_call_id(long_id)
    assert len(short) == 64
    assert items[1]["call_id"] == items[2]["call_id"] == short
    assert rendered.tool_id_map == {short: long_id}
