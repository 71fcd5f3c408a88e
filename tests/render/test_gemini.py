"""Gemini rendering."""

from __future__ import annotations

from typing import Any

from ctxwarden.core.messages import Message
from ctxwarden.core.render import FIRST_MESSAGE_INSERTED, THINKING_DROPPED, Format
from ctxwarden.core.render._common import dumps
from tests.render.sdk import check_gemini_rules, validate_gemini
from tests.render.transcripts import (
    OTHER_MODEL,
    assistant,
    body,
    call,
    image,
    numbered,
    render_all,
    result,
    summary,
    synthetic,
    thinking,
    user,
)

FMT = Format.GEMINI
SIG = "c2lnbmF0dXJl"

TRANSCRIPT = numbered(
    [
        user("Read a.txt please."),
        assistant(thinking("plan", SIG), "Reading it.", call("call_1")),
        result("call_1", "hello"),
        assistant("It says hello."),
        user("Thanks"),
    ]
)


def contents_of(*messages: Message) -> list[dict[str, Any]]:
    value = body(FMT, render_all(FMT, numbered(messages)))
    validate_gemini(value)
    check_gemini_rules(value)
    out: list[dict[str, Any]] = value["contents"]
    return out


def test_exact_json() -> None:
    rendered = render_all(FMT, TRANSCRIPT)
    expected = {
        "systemInstruction": {"parts": [{"text": "Be brief."}]},
        "contents": [
            {"role": "user", "parts": [{"text": "Read a.txt please."}]},
            {
                "role": "model",
                "parts": [
                    {"text": "plan", "thought": True, "thoughtSignature": SIG},
                    {"text": "Reading it."},
                    {"functionCall": {"id": "call_1", "name": "read", "args": {"path": "a.txt"}}},
                ],
            },
            {
                "role": "user",
                "parts": [
                    {
                        "functionResponse": {
                            "id": "call_1",
                            "name": "read",
                            "response": {"output": "hello"},
                        }
                    }
                ],
            },
            {"role": "model", "parts": [{"text": "It says hello."}]},
            {"role": "user", "parts": [{"text": "Thanks"}]},
        ],
        "tools": [
            {
                "functionDeclarations": [
                    {
                        "name": "read",
                        "description": "Read a file",
                        "parametersJsonSchema": {
                            "type": "object",
                            "properties": {"path": {"type": "string"}},
                            "required": ["path"],
                        },
                    }
                ]
            }
        ],
    }
    assert rendered.json == dumps(expected)
    assert rendered.notices == ()
    validate_gemini(body(FMT, rendered))


def test_no_system_instruction_and_no_tools_when_empty() -> None:
    rendered = render_all(FMT, [summary("S")], system="", tools=())
    assert rendered.json == '{"contents":[{"role":"user","parts":[{"text":"S"}]}]}'


def test_function_responses_are_user_parts_and_merge_with_user_text() -> None:
    out = contents_of(
        user("go"),
        assistant(call("a", "ls"), call("b")),
        result("b", "B", name=""),  # the name comes from the call
        synthetic("a", "ls"),
        user("next"),
    )
    assert out[2] == {
        "role": "user",
        "parts": [
            {"functionResponse": {"id": "b", "name": "read", "response": {"output": "B"}}},
            {
                "functionResponse": {
                    "id": "a",
                    "name": "ls",
                    "response": {"error": "No result provided"},
                }
            },
            {"text": "next"},
        ],
    }


def test_tool_result_images_go_in_the_function_response_parts() -> None:
    out = contents_of(
        user("shoot", image(b"\x01", "image/jpeg")),
        assistant(call("c", "shot")),
        result("c", "done", image(b"\x00"), image(b"BM", "image/bmp"), name="shot"),
    )
    assert out[0]["parts"][1] == {"inlineData": {"mimeType": "image/jpeg", "data": "AQ=="}}
    assert out[2]["parts"][0] == {
        "functionResponse": {
            "id": "c",
            "name": "shot",
            "response": {"output": "done\n[image omitted: image/bmp is not supported here]"},
            "parts": [{"inlineData": {"mimeType": "image/png", "data": "AA=="}}],
        }
    }


def test_consecutive_model_messages_merge_and_a_model_first_view_gets_a_user_turn() -> None:
    rendered = render_all(FMT, numbered([assistant("a"), assistant("b"), user("c")]))
    value = body(FMT, rendered)
    assert value["contents"] == [
        {"role": "user", "parts": [{"text": "(continued)"}]},
        {"role": "model", "parts": [{"text": "a"}, {"text": "b"}]},
        {"role": "user", "parts": [{"text": "c"}]},
    ]
    assert [(n.code, n.seq) for n in rendered.notices] == [(FIRST_MESSAGE_INSERTED, 1)]


def test_a_signature_without_text_goes_on_the_next_part() -> None:
    out = contents_of(
        user("go"),
        assistant(thinking("", SIG), call("c"), "after", thinking("", "AAAA")),
        result("c", "x"),
    )
    assert out[1]["parts"] == [
        {
            "functionCall": {"id": "c", "name": "read", "args": {"path": "a.txt"}},
            "thoughtSignature": SIG,
        },
        {"text": "after"},
        {"text": "", "thoughtSignature": "AAAA"},
    ]


def test_two_pending_signatures_do_not_overwrite_each_other() -> None:
    out = contents_of(
        user("go"), assistant(thinking("", SIG), thinking("", "AAAA"), thinking("t", "BBBB"), "x")
    )
    assert out[1]["parts"] == [
        {"text": "", "thoughtSignature": SIG},
        {"text": "", "thoughtSignature": "AAAA"},
        {"text": "t", "thought": True, "thoughtSignature": "BBBB"},
        {"text": "x"},
    ]


def test_thinking_that_cannot_go_back_is_dropped() -> None:
    messages = numbered(
        [
            user("q"),
            assistant(thinking("t", SIG), "other model", model=OTHER_MODEL),
            user("q2"),
            assistant(
                thinking("no sig", ""),
                thinking("bad sig", "not base64!"),
                thinking("", SIG, redacted=True),
                "same model",
            ),
        ]
    )
    rendered = render_all(FMT, messages)
    value = body(FMT, rendered)
    assert value["contents"][1]["parts"] == [{"text": "other model"}]
    assert value["contents"][3]["parts"] == [{"text": "same model"}]
    assert [(n.code, n.seq) for n in rendered.notices] == [
        (THINKING_DROPPED, 2),
        (THINKING_DROPPED, 4),
    ]
    assert "3 thinking" in rendered.notices[1].detail


def test_url_safe_signatures_are_accepted() -> None:
    out = contents_of(user("q"), assistant(thinking("t", "-_-_"), "a"))
    assert out[1]["parts"][0]["thoughtSignature"] == "-_-_"
