"""The PROVIDER content block: validated, stored, labelled and rendered only to its family."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from ctxwarden.core.compaction.serialize import provider_label
from ctxwarden.core.errors import InvalidArgument
from ctxwarden.core.messages import ContentBlock, Message, Role
from ctxwarden.core.render import PROVIDER_CONTENT_DROPPED, Format, render
from ctxwarden.core.validation import check_message
from ctxwarden.store.codec import message_from_row, message_row_values

SEARCH = json.dumps(
    {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_1", "content": []},
    separators=(",", ":"),
)


def _assistant(*blocks: ContentBlock, model: str = "claude-sonnet-4-5") -> Message:
    return Message(role=Role.ASSISTANT, content=blocks, seq=2, model=model, provider="anthropic")


@pytest.mark.parametrize(
    ("family", "text", "reason"),
    [
        ("", SEARCH, "MISSING_FIELD"),
        ("azure", SEARCH, "INVALID_CONTENT"),
        ("anthropic", "42", "INVALID_JSON"),
        ("anthropic", "{not json", "INVALID_JSON"),
        ("anthropic", "[" * 200 + "]" * 200, "JSON_TOO_DEEP"),
    ],
)
def test_a_bad_provider_block_is_refused(family: str, text: str, reason: str) -> None:
    message = _assistant(ContentBlock.of_provider(family, text))
    with pytest.raises(InvalidArgument) as caught:
        check_message(message, "messages[0]")
    assert caught.value.reason == reason
    assert caught.value.field.startswith("messages[0].content[0].provider")


def test_a_provider_block_is_stored_and_read_back_unchanged() -> None:
    message = _assistant(
        ContentBlock.of_text("searching"), ContentBlock.of_provider("anthropic", SEARCH)
    )
    values = message_row_values("s-1", message)
    row = SimpleNamespace(**values)
    back = message_from_row(row)
    assert back.content == message.content


def test_compaction_prompts_show_a_label_not_the_json() -> None:
    big = json.dumps({"type": "web_search_tool_result", "content": ["x" * 10_000]})
    assert (
        provider_label(ContentBlock.of_provider("anthropic", big))
        == "[anthropic web_search_tool_result]"
    )
    gemini = json.dumps({"executableCode": {"language": "PYTHON", "code": "print(1)"}})
    assert provider_label(ContentBlock.of_provider("google", gemini)) == "[google executableCode]"


def test_rendered_to_its_family_only() -> None:
    messages = [
        Message(role=Role.USER, content=(ContentBlock.of_text("q"),), seq=1),
        _assistant(ContentBlock.of_text("found it"), ContentBlock.of_provider("anthropic", SEARCH)),
    ]
    own = render(Format.ANTHROPIC_MESSAGES, "", (), messages, model="claude-sonnet-4-5")
    blocks = json.loads(own.json)["messages"][1]["content"]
    assert json.loads(SEARCH) in blocks
    assert not any(n.code == PROVIDER_CONTENT_DROPPED for n in own.notices)
    other = render(Format.OPENAI_CHAT, "", (), messages, model="claude-sonnet-4-5")
    assert "web_search_tool_result" not in other.json
    assert [n.code for n in other.notices if n.code == PROVIDER_CONTENT_DROPPED] == [
        PROVIDER_CONTENT_DROPPED
    ]
