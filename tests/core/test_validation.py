"""Validation of client input: every error names the offending field."""

from __future__ import annotations

import pytest

from ctxwarden.core.errors import ErrorKind, InvalidArgument
from ctxwarden.core.messages import ContentBlock, ContentKind, Message, Role, StopReason, Usage
from ctxwarden.core.validation import (
    check_json_object,
    check_key,
    check_message,
    check_messages,
    check_session_id,
)

PNG = ContentBlock(ContentKind.IMAGE, mime_type="image/png", data=b"\x89PNG")


def text(t: str = "hi") -> ContentBlock:
    return ContentBlock.of_text(t)


def user(*blocks: ContentBlock, message_id: str = "") -> Message:
    return Message(Role.USER, blocks or (text(),), message_id=message_id)


def assistant(*blocks: ContentBlock, stop: StopReason = StopReason.STOP) -> Message:
    return Message(Role.ASSISTANT, blocks, stop_reason=stop)


def tool_result(call_id: str = "c1", *blocks: ContentBlock) -> Message:
    return Message(Role.TOOL_RESULT, blocks or (text("out"),), tool_call_id=call_id)


def rejects(messages: list[Message], max_messages: int = 100) -> InvalidArgument:
    with pytest.raises(InvalidArgument) as err:
        check_messages(messages, max_messages)
    assert err.value.kind is ErrorKind.INVALID_ARGUMENT
    assert err.value.field.split(".")[0].split("[")[0] == "messages"
    return err.value


# -- messages ------------------------------------------------------------------------


def test_valid_conversation_passes() -> None:
    check_messages(
        [
            user(text("look"), PNG, message_id="u-1"),
            assistant(
                ContentBlock(ContentKind.THINKING, text="hmm", signature="sig"),
                text("calling"),
                ContentBlock.of_tool_call("c1", "grep", '{"q": "x"}'),
                ContentBlock.of_tool_call("c2", "ls", ""),
                stop=StopReason.TOOL_USE,
            ),
            tool_result("c1"),
            tool_result("c2", PNG),
        ],
        100,
    )


def test_empty_request() -> None:
    err = rejects([])
    assert (err.field, err.reason) == ("messages", "MISSING_FIELD")


def test_too_many_messages() -> None:
    err = rejects([user() for _ in range(4)], max_messages=3)
    assert (err.field, err.reason) == ("messages", "TOO_MANY_MESSAGES")
    assert "4 messages" in err.message
    assert "limit is 3" in err.message
    check_messages([user() for _ in range(3)], 3)


@pytest.mark.parametrize("role", [Role.USER, Role.TOOL_RESULT])
def test_empty_content(role: Role) -> None:
    err = rejects([user(), Message(role, (), tool_call_id="c1")])
    assert (err.field, err.reason) == ("messages[1].content", "EMPTY_CONTENT")


@pytest.mark.parametrize(
    "stop", [StopReason.UNSPECIFIED, StopReason.STOP, StopReason.LENGTH, StopReason.TOOL_USE]
)
def test_successful_assistant_needs_content(stop: StopReason) -> None:
    err = rejects([assistant(stop=stop)])
    assert (err.field, err.reason) == ("messages[0].content", "EMPTY_CONTENT")


@pytest.mark.parametrize("stop", [StopReason.ERROR, StopReason.ABORTED])
def test_failed_assistant_without_content_is_accepted(stop: StopReason) -> None:
    check_messages([Message(Role.ASSISTANT, (), stop_reason=stop, error_message="boom")], 10)
    check_message(Message(Role.ASSISTANT, (), stop_reason=stop), "m")


def test_tool_result_without_tool_call_id() -> None:
    err = rejects([user(), user(), tool_result("")])
    assert (err.field, err.reason) == ("messages[2].tool_call_id", "MISSING_FIELD")


@pytest.mark.parametrize(
    ("arguments", "detail", "reason"),
    [
        ("[1]", "got list", "INVALID_JSON"),
        ("not json", "not valid JSON", "INVALID_JSON"),
        ("1", "got int", "INVALID_JSON"),
        ('"s"', "got str", "INVALID_JSON"),
        ("null", "got NoneType", "INVALID_JSON"),
        ("{", "not valid JSON", "INVALID_JSON"),
        ("[" * 100_000, "the limit is 64", "JSON_TOO_DEEP"),
        ('{"a":' * 65 + "1" + "}" * 65, "nests 65 levels", "JSON_TOO_DEEP"),
    ],
)
def test_tool_call_arguments_must_be_json_object(arguments: str, detail: str, reason: str) -> None:
    msg = assistant(
        text("x"),
        ContentBlock.of_tool_call("c0", "ok", "{}"),
        ContentBlock.of_tool_call("c1", "t", arguments),
        stop=StopReason.TOOL_USE,
    )
    err = rejects([user(), msg])
    assert err.field == "messages[1].content[2].tool_call.arguments_json"
    assert err.reason == reason
    assert detail in err.message


@pytest.mark.parametrize("arguments", ["", "{}", '{"a": [1, {"b": null}]}', ' {"x": 1} '])
def test_tool_call_arguments_accepted(arguments: str) -> None:
    check_json_object(arguments, "f")
    check_message(assistant(ContentBlock.of_tool_call("c", "t", arguments)), "m")


def test_tool_call_missing_id_and_name() -> None:
    err = rejects([assistant(ContentBlock.of_tool_call("", "t"))])
    assert (err.field, err.reason) == ("messages[0].content[0].tool_call.id", "MISSING_FIELD")
    err = rejects([assistant(ContentBlock.of_tool_call("c", ""))])
    assert (err.field, err.reason) == ("messages[0].content[0].tool_call.name", "MISSING_FIELD")


def test_repeated_tool_call_id_in_one_message() -> None:
    msg = assistant(ContentBlock.of_tool_call("c", "t"), ContentBlock.of_tool_call("c", "u"))
    err = rejects([msg])
    assert (err.field, err.reason) == (
        "messages[0].content[1].tool_call.id",
        "DUPLICATE_TOOL_CALL_ID",
    )


def test_duplicate_message_ids_in_a_request() -> None:
    err = rejects([user(message_id="a"), user(message_id="b"), user(message_id="a")])
    assert (err.field, err.reason) == ("messages[2].message_id", "DUPLICATE_MESSAGE_ID")
    assert "'a'" in err.message


def test_messages_without_ids_are_not_duplicates() -> None:
    check_messages([user(), user(), user(message_id="x"), user()], 10)


def test_malformed_message_id() -> None:
    err = rejects([user(), user(message_id="has space")])
    assert (err.field, err.reason) == ("messages[1].message_id", "INVALID_KEY")


def test_user_message_cannot_carry_tool_call() -> None:
    err = rejects([user(text("x"), ContentBlock.of_tool_call("c1", "t"))])
    assert (err.field, err.reason) == ("messages[0].content[1]", "INVALID_CONTENT")
    assert "user message cannot carry tool_call" in err.message


@pytest.mark.parametrize(
    ("message", "field"),
    [
        (user(ContentBlock(ContentKind.THINKING, text="t")), "messages[0].content[0]"),
        (tool_result("c", ContentBlock.of_tool_call("c2", "t")), "messages[0].content[0]"),
        (tool_result("c", ContentBlock(ContentKind.THINKING, text="t")), "messages[0].content[0]"),
        (assistant(text(), PNG), "messages[0].content[1]"),
        (user(ContentBlock(ContentKind.IMAGE, mime_type="image/png")), "messages[0].content[0]"),
    ],
    ids=["user-thinking", "result-tool-call", "result-thinking", "assistant-image", "empty-image"],
)
def test_invalid_content(message: Message, field: str) -> None:
    err = rejects([message])
    assert (err.field, err.reason) == (field, "INVALID_CONTENT")


@pytest.mark.parametrize(
    "usage",
    [
        Usage(input_tokens=-1),
        Usage(output_tokens=-1),
        Usage(cache_read_tokens=-1),
        Usage(cache_write_tokens=-1),
        Usage(total_tokens=-1),
    ],
)
def test_negative_usage(usage: Usage) -> None:
    msg = Message(Role.ASSISTANT, (text(),), stop_reason=StopReason.STOP, usage=usage)
    err = rejects([msg])
    assert (err.field, err.reason) == ("messages[0].usage", "INVALID_USAGE")


def test_check_message_uses_given_field_prefix() -> None:
    with pytest.raises(InvalidArgument) as err:
        check_message(Message(Role.USER, ()), "message")
    assert err.value.field == "message.content"


# -- session id and keys ----------------------------------------------------------------


@pytest.mark.parametrize(
    "session_id",
    ["a", "7", "S", "agent-1", "run_2024.01.02", "tenant:abc:xyz", "a" * 255, "A-._:"],
)
def test_session_id_accepted(session_id: str) -> None:
    check_session_id(session_id)


@pytest.mark.parametrize(
    "session_id",
    [
        "-a",
        ".a",
        "_a",
        ":a",
        "a b",
        "a/b",
        "a\\b",
        "a" * 256,
        "séance",
        "a\x00",
        "a\n",
        "a" * 255 + "\n",
        "\na",
    ],
)
def test_session_id_rejected(session_id: str) -> None:
    with pytest.raises(InvalidArgument) as err:
        check_session_id(session_id)
    assert (err.value.field, err.value.reason) == ("session_id", "INVALID_SESSION_ID")


def test_session_id_missing() -> None:
    with pytest.raises(InvalidArgument) as err:
        check_session_id("", field="parent.session_id")
    assert (err.value.field, err.value.reason) == ("parent.session_id", "MISSING_FIELD")


def test_session_id_error_names_custom_field() -> None:
    with pytest.raises(InvalidArgument) as err:
        check_session_id("bad id", field="sessions[3].session_id")
    assert err.value.field == "sessions[3].session_id"


@pytest.mark.parametrize("key", ["", "a", "req-1", "!~", "x" * 128])
def test_key_accepted(key: str) -> None:
    check_key(key, "request_id")


@pytest.mark.parametrize("key", ["a b", "x" * 129, "é", "a\t", "a\n", "\x7f"])
def test_key_rejected(key: str) -> None:
    with pytest.raises(InvalidArgument) as err:
        check_key(key, "request_id")
    assert (err.value.field, err.value.reason) == ("request_id", "INVALID_KEY")
