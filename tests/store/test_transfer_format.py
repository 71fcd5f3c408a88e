"""Rows <-> export records are lossless: a record turns back into the row it came from."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from ctxwarden.core.messages import (
    ContentBlock,
    ContentKind,
    Message,
    MessageState,
    Role,
    StopReason,
    Usage,
    Visibility,
)
from ctxwarden.store.codec import message_row_values
from ctxwarden.store.transfer_format import message_record, message_row

MESSAGES = [
    Message(
        Role.ASSISTANT,
        (
            ContentBlock(ContentKind.THINKING, text="hm", signature="sig", redacted=False),
            ContentBlock.of_text("héllo \u0000 \U0001f600"),
            ContentBlock.of_tool_call("c1", "read", '{"path":"a"}'),
            ContentBlock.of_provider("anthropic", '{"type":"server_tool_use"}'),
        ),
        seq=7,
        message_id="m7",
        stop_reason=StopReason.TOOL_USE,
        usage=Usage(10, 2, 3, 4, 19),
        model="gpt-4o",
        provider="openai",
        token_count=42,
        counted_with="tiktoken:o200k_base|3|openai",
        create_time_us=1_700_000_000_123_456,
        metadata={"k": "v"},
        calibration=(1.0625, 3),
    ),
    Message(
        Role.USER,
        (ContentBlock(ContentKind.IMAGE, mime_type="image/png", data=b"\x89PNG\x00\xff"),),
        seq=8,
        message_id="m8",
        state=MessageState.ROLLED_BACK,
        create_time_us=1,
    ),
    Message(
        Role.TOOL_RESULT,
        (ContentBlock.of_text("out"),),
        seq=9,
        message_id="m9",
        tool_call_id="c1",
        tool_name="read",
        is_error=True,
        create_time_us=2,
        visibility=Visibility.HISTORY_ONLY,
    ),
]


@pytest.mark.parametrize("message", MESSAGES, ids=lambda m: m.message_id)
def test_message_rows_survive_their_record(message: Message) -> None:
    row = message_row_values("t~s", message)
    row["rolled_back_at_seq"] = 11 if message.state is MessageState.ROLLED_BACK else 0
    record = message_record(SimpleNamespace(**row))
    json.dumps(record)  # plain JSON
    assert message_row(json.loads(json.dumps(record)), "t~s") == row


def test_a_legacy_json_body_exports_like_a_messagepack_one() -> None:
    message = Message(
        Role.USER, (ContentBlock.of_text("old"),), seq=1, message_id="m1", create_time_us=5
    )
    row = message_row_values("s", message)
    legacy = dict(row, data=None, body=json.dumps({"content": [{"t": "text", "text": "old"}]}))
    assert message_record(SimpleNamespace(**legacy)) == message_record(SimpleNamespace(**row))
