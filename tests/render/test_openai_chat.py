"""OpenAI Chat Completions rendering."""

from __future__ import annotations

from ctxwarden.core.render import (
    EMPTY_MESSAGE_OMITTED,
    THINKING_DROPPED,
    TOOL_RESULT_IMAGES_MOVED,
    Format,
    openai_chat_tool_id,
)
from ctxwarden.core.render._common import dumps
from ctxwarden.core.session import ToolDefinition
from tests.render.sdk import check_chat_rules, validate_typed
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

FMT = Format.OPENAI_CHAT

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
    assert rendered.json == (
        '{"messages":['
        '{"role":"system","content":"Be brief."},'
        '{"role":"user","content":"Read a.txt please."},'
        '{"role":"assistant","content":"Reading it.","tool_calls":[{"id":"call_1",'
        '"type":"function","function":{"name":"read","arguments":"{\\"path\\":\\"a.txt\\"}"}}]},'
        '{"role":"tool","tool_call_id":"call_1","content":"hello"},'
        '{"role":"assistant","content":"It says hello."},'
        '{"role":"user","content":"Thanks"}],'
        '"tools":[{"type":"function","function":{"name":"read","description":"Read a file",'
        '"parameters":{"type":"object","properties":{"path":{"type":"string"}},'
        '"required":["path"]}}}]}'
    )
    assert [(n.code, n.seq) for n in rendered.notices] == [(THINKING_DROPPED, 2)]
    assert rendered.tool_id_map == {}
    validate_typed(FMT, body(FMT, rendered))


def test_no_system_message_and_no_tools_when_empty() -> None:
    rendered = render_all(FMT, [user("hi")], system="", tools=())
    assert rendered.json == '{"messages":[{"role":"user","content":"hi"}]}'


def test_user_images_are_data_url_parts() -> None:
    rendered = render_all(FMT, [user("look", image(b"\x01\x02", "image/jpg"))], system="")
    assert body(FMT, rendered)["messages"] == [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "look"},
                {"type": "image_url", "image_url": {"url": "data:image/jpeg;base64,AQI="}},
            ],
        }
    ]


def test_summary_is_an_ordinary_user_message() -> None:
    rendered = render_all(FMT, [summary("S"), user("go on")], system="")
    assert body(FMT, rendered)["messages"] == [
        {"role": "user", "content": "S"},
        {"role": "user", "content": "go on"},
    ]


def test_several_text_blocks_become_parts_and_empty_arguments_become_an_object() -> None:
    messages = numbered(
        [user("hi"), assistant("a", "", "b", call("c1", "ls", "")), result("c1", "x", name="ls")]
    )
    out = body(FMT, render_all(FMT, messages, system=""))["messages"]
    assert out[1] == {
        "role": "assistant",
        "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}],
        "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "ls", "arguments": "{}"}}
        ],
    }


def test_tool_only_assistant_message_has_null_content() -> None:
    messages = numbered([user("hi"), assistant(call("c1")), result("c1", "x")])
    out = body(FMT, render_all(FMT, messages, system=""))["messages"]
    assert out[1]["content"] is None
    assert list(out[1]) == ["role", "content", "tool_calls"]


def test_thinking_only_message_is_omitted_with_notices() -> None:
    messages = numbered([user("hi"), assistant(thinking()), user("again")])
    rendered = render_all(FMT, messages, system="")
    assert body(FMT, rendered)["messages"] == [
        {"role": "user", "content": "hi"},
        {"role": "user", "content": "again"},
    ]
    assert [(n.code, n.seq) for n in rendered.notices] == [
        (THINKING_DROPPED, 2),
        (EMPTY_MESSAGE_OMITTED, 2),
    ]


def test_tool_result_images_follow_the_tool_messages_in_a_user_message() -> None:
    messages = numbered(
        [
            user("shoot"),
            assistant(call("c1", "shot"), call("c2", "ls")),
            result("c1", "took it", image(b"\x00"), name="shot"),
            result("c2", "a.txt", name="ls"),
            user("nice"),
        ]
    )
    rendered = render_all(FMT, messages, system="")
    out = body(FMT, rendered)["messages"]
    assert out[2:] == [
        {"role": "tool", "tool_call_id": "c1", "content": "took it"},
        {"role": "tool", "tool_call_id": "c2", "content": "a.txt"},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "[image output of tool call c1 (shot)]"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,AA=="}},
            ],
        },
        {"role": "user", "content": "nice"},
    ]
    assert [(n.code, n.seq) for n in rendered.notices] == [(TOOL_RESULT_IMAGES_MOVED, 3)]
    check_chat_rules(body(FMT, rendered))
    validate_typed(FMT, body(FMT, rendered))


def test_long_call_ids_are_shortened_consistently() -> None:
    long_id = "call_" + "x" * 60
    messages = numbered([user("hi"), assistant(call(long_id)), result(long_id, "ok")])
    rendered = render_all(FMT, messages, system="")
    out = body(FMT, rendered)["messages"]
    short = openai_chat_tool_id(long_id)
    assert len(short) == 40
    assert out[1]["tool_calls"][0]["id"] == short
    assert out[2]["tool_call_id"] == short
    assert rendered.tool_id_map == {short: long_id}


def test_empty_and_invalid_tool_schemas() -> None:
    tools = (ToolDefinition("a"), ToolDefinition("b", "", "[1]"))
    rendered = render_all(FMT, [user("hi")], system="", tools=tools)
    functions = [t["function"] for t in body(FMT, rendered)["tools"]]
    assert functions == [
        {"name": "a", "parameters": {"type": "object", "properties": {}}},
        {"name": "b", "parameters": {"type": "object", "properties": {}}},
    ]
    assert [n.code for n in rendered.notices] == ["INVALID_TOOL_SCHEMA"]


def test_non_ascii_is_kept_as_utf8() -> None:
    rendered = render_all(FMT, [user("héllo ✓")], system="", tools=())
    assert rendered.json == dumps({"messages": [{"role": "user", "content": "héllo ✓"}]})
    assert "héllo ✓" in rendered.json
