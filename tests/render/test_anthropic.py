"""Anthropic Messages rendering."""

from __future__ import annotations

import json
from typing import Any

from ctxwarden.core.messages import Message
from ctxwarden.core.render import (
    FIRST_MESSAGE_INSERTED,
    IMAGE_UNSUPPORTED,
    THINKING_DROPPED,
    Format,
    anthropic_tool_id,
)
from ctxwarden.core.render._common import dumps
from tests.render.sdk import check_anthropic_rules, validate_typed
from tests.render.transcripts import (
    LS,
    OTHER_MODEL,
    READ,
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

FMT = Format.ANTHROPIC_MESSAGES
CACHE = {"type": "ephemeral"}

TRANSCRIPT = numbered(
    [
        user("Read a.txt please."),
        assistant(thinking("plan", "c2ln"), "Reading it.", call("call_1")),
        result("call_1", "hello"),
        assistant("It says hello."),
        user("Thanks"),
    ]
)


def messages_of(*messages: Message) -> list[dict[str, Any]]:
    """The rendered messages, checked against the SDK and Anthropic's rules."""
    value = body(FMT, render_all(FMT, numbered(messages)))
    check_anthropic_rules(value)
    validate_typed(FMT, value)
    out: list[dict[str, Any]] = value["messages"]
    return out


def test_exact_json() -> None:
    rendered = render_all(FMT, TRANSCRIPT)
    expected = {
        "system": [{"type": "text", "text": "Be brief.", "cache_control": CACHE}],
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "Read a.txt please."}]},
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": "plan", "signature": "c2ln"},
                    {"type": "text", "text": "Reading it."},
                    {
                        "type": "tool_use",
                        "id": "call_1",
                        "name": "read",
                        "input": {"path": "a.txt"},
                    },
                ],
            },
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "call_1",
                        "content": [{"type": "text", "text": "hello"}],
                        "is_error": False,
                    }
                ],
            },
            {"role": "assistant", "content": [{"type": "text", "text": "It says hello."}]},
            {
                "role": "user",
                "content": [{"type": "text", "text": "Thanks", "cache_control": CACHE}],
            },
        ],
        "tools": [
            {
                "name": "read",
                "description": "Read a file",
                "input_schema": {
                    "type": "object",
                    "properties": {"path": {"type": "string"}},
                    "required": ["path"],
                },
                "cache_control": CACHE,
            }
        ],
    }
    assert rendered.json == dumps(expected)
    assert rendered.notices == ()
    validate_typed(FMT, body(FMT, rendered))


def test_no_system_when_the_prompt_is_empty_and_no_tools_when_none() -> None:
    rendered = render_all(FMT, [user("hi")], system="", tools=())
    assert rendered.json == (
        '{"messages":[{"role":"user","content":[{"type":"text","text":"hi",'
        '"cache_control":{"type":"ephemeral"}}]}]}'
    )


# -- alternation -------------------------------------------------------------------


def test_user_text_after_tool_results_joins_their_message() -> None:
    out = messages_of(
        user("go"),
        assistant(call("a"), call("b")),
        result("b", "B"),
        synthetic("a"),
        user("and now?"),
    )
    assert [m["role"] for m in out] == ["user", "assistant", "user"]
    blocks = out[2]["content"]
    assert [(b["type"], b.get("tool_use_id")) for b in blocks] == [
        ("tool_result", "b"),
        ("tool_result", "a"),
        ("text", None),
    ]
    assert blocks[1]["is_error"] is True
    assert blocks[1]["content"] == [{"type": "text", "text": "No result provided"}]


def test_consecutive_same_role_messages_merge() -> None:
    out = messages_of(user("one"), user("two", image()), assistant("a"), assistant("b"))
    assert out == [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "one"},
                {"type": "text", "text": "two"},
                {
                    "type": "image",
                    "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw=="},
                    "cache_control": CACHE,
                },
            ],
        },
        {
            "role": "assistant",
            "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}],
        },
    ]


def test_a_view_that_starts_with_the_assistant_gets_a_user_message_first() -> None:
    rendered = render_all(FMT, numbered([assistant("where was I"), user("here")]))
    value = body(FMT, rendered)
    assert value["messages"][0] == {
        "role": "user",
        "content": [{"type": "text", "text": "(continued)"}],
    }
    assert [(n.code, n.seq) for n in rendered.notices] == [(FIRST_MESSAGE_INSERTED, 1)]
    check_anthropic_rules(value)


def test_the_summary_is_a_user_message_with_a_breakpoint() -> None:
    out = messages_of(summary("S"), user("go"), assistant("ok"))
    assert out[0] == {
        "role": "user",
        "content": [
            {"type": "text", "text": "S", "cache_control": CACHE},
            {"type": "text", "text": "go", "cache_control": CACHE},
        ],
    }


def test_four_breakpoints_at_most_and_where() -> None:
    messages = numbered(
        [summary("S"), assistant("a"), user("u1"), assistant(call("c")), result("c", "r")]
    )
    value = body(FMT, render_all(FMT, messages, tools=(READ, LS)))
    assert json.dumps(value).count("cache_control") == 4
    assert "cache_control" in value["system"][0]
    assert "cache_control" not in value["tools"][0]
    assert "cache_control" in value["tools"][1]
    assert value["messages"][0]["content"][-1]["cache_control"] == CACHE  # summary
    assert "cache_control" not in value["messages"][2]["content"][-1]  # u1: not the last user
    assert value["messages"][-1]["content"][-1]["cache_control"] == CACHE  # the tool result


# -- thinking ---------------------------------------------------------------------


def test_thinking_of_another_model_is_dropped() -> None:
    messages = numbered([user("q"), assistant(thinking("t", "sig"), "answer", model=OTHER_MODEL)])
    rendered = render_all(FMT, messages)
    assert body(FMT, rendered)["messages"][1]["content"] == [{"type": "text", "text": "answer"}]
    assert [(n.code, n.seq) for n in rendered.notices] == [(THINKING_DROPPED, 2)]
    assert OTHER_MODEL in rendered.notices[0].detail


def test_thinking_without_signature_is_dropped_even_for_the_same_model() -> None:
    messages = numbered([user("q"), assistant(thinking("t", ""), "answer")])
    rendered = render_all(FMT, messages)
    assert body(FMT, rendered)["messages"][1]["content"] == [{"type": "text", "text": "answer"}]
    assert rendered.notices[0].code == THINKING_DROPPED
    assert "signature" in rendered.notices[0].detail


def test_an_unknown_model_keeps_no_thinking() -> None:
    messages = numbered([user("q"), assistant(thinking("t", "sig"), "a", model="")])
    rendered = render_all(FMT, messages, model="")
    assert [n.code for n in rendered.notices] == [THINKING_DROPPED]


def test_redacted_thinking() -> None:
    out = messages_of(
        user("q"),
        assistant(
            thinking("", "ENCRYPTED", redacted=True),
            thinking("DATA-IN-TEXT", "", redacted=True),
            "a",
        ),
    )
    assert out[1]["content"] == [
        {"type": "redacted_thinking", "data": "ENCRYPTED"},
        {"type": "redacted_thinking", "data": "DATA-IN-TEXT"},
        {"type": "text", "text": "a"},
    ]


def test_an_assistant_message_of_only_dropped_thinking_disappears_and_users_merge() -> None:
    out = messages_of(user("q"), assistant(thinking(), model=OTHER_MODEL), user("again"))
    assert out == [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "q"},
                {"type": "text", "text": "again", "cache_control": CACHE},
            ],
        }
    ]


# -- content ---------------------------------------------------------------------


def test_unsupported_image_types_become_text() -> None:
    rendered = render_all(FMT, numbered([user(image(b"BM", "image/bmp"))]), tools=())
    assert body(FMT, rendered)["messages"][0]["content"] == [
        {
            "type": "text",
            "text": "[image omitted: image/bmp is not supported here]",
            "cache_control": CACHE,
        }
    ]
    assert [(n.code, n.seq) for n in rendered.notices] == [(IMAGE_UNSUPPORTED, 1)]


def test_tool_results_with_images_and_empty_results() -> None:
    out = messages_of(
        user("go"),
        assistant(call("a"), call("b"), call("c")),
        result("a", "seen", image(b"\x01", "image/gif")),
        result("b", ""),
        result("c", "", is_error=True),
    )
    results = out[2]["content"]
    assert results[0]["content"] == [
        {"type": "text", "text": "seen"},
        {"type": "image", "source": {"type": "base64", "media_type": "image/gif", "data": "AQ=="}},
    ]
    assert results[1] == {"type": "tool_result", "tool_use_id": "b", "is_error": False}
    assert results[2]["content"] == [{"type": "text", "text": "(no output)"}]


def test_arguments_are_parsed_and_empty_means_an_empty_object() -> None:
    out = messages_of(
        user("go"),
        assistant(call("a", "ls", ""), call("b", "read", '{"z":1,"a":[true,null]}')),
        result("a", "x"),
        result("b", "y"),
    )
    assert [b["input"] for b in out[1]["content"]] == [{}, {"z": 1, "a": [True, None]}]


def test_tool_ids_are_normalised_the_same_way_on_use_and_result() -> None:
    odd = "functions.read:0"
    rendered = render_all(FMT, numbered([user("go"), assistant(call(odd)), result(odd, "x")]))
    value = body(FMT, rendered)
    use_id = value["messages"][1]["content"][0]["id"]
    assert use_id == anthropic_tool_id(odd)
    assert value["messages"][2]["content"][0]["tool_use_id"] == use_id
    assert rendered.tool_id_map == {use_id: odd}


def test_a_repeated_call_id_gets_a_unique_stand_in() -> None:
    rendered = render_all(
        FMT,
        numbered(
            [
                user("go"),
                assistant(call("call_0")),
                result("call_0", "first"),
                assistant(call("call_0")),
                result("call_0", "second"),
            ]
        ),
    )
    value = body(FMT, rendered)
    check_anthropic_rules(value)
    first = value["messages"][1]["content"][0]["id"]
    second = value["messages"][3]["content"][0]["id"]
    assert first == "call_0"
    assert second != first
    assert value["messages"][4]["content"][0]["tool_use_id"] == second
    assert rendered.tool_id_map == {second: "call_0"}


def test_thinking_of_a_dated_snapshot_goes_back_to_its_alias() -> None:
    """Asked for claude-sonnet-4-5, Anthropic answers as its dated snapshot."""
    made = assistant(thinking("t", "sig"), "answer", model="claude-sonnet-4-5-20250929")
    rendered = render_all(FMT, numbered([user("q"), made]), model="claude-sonnet-4-5")
    assert body(FMT, rendered)["messages"][1]["content"][0]["type"] == "thinking"
    assert rendered.notices == ()
    other = assistant(thinking("t", "sig"), "answer", model="claude-opus-4-1-20250805")
    rendered = render_all(FMT, numbered([user("q"), other]), model="claude-sonnet-4-5")
    assert [n.code for n in rendered.notices] == [THINKING_DROPPED]
