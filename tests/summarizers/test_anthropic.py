"""AnthropicMessagesSummarizer against a fake Anthropic server."""

from __future__ import annotations

import pytest

from ctxwarden.core.compaction.types import SummarizerError
from ctxwarden.summarizers.anthropic import AnthropicMessagesSummarizer
from tests.summarizers.fake_providers import FakeProvider
from tests.summarizers.helpers import SYSTEM, USER, SleepRecorder, request

MODEL = "claude-haiku-4-5"
KEY = "sk-ant-test"


def make(fake: FakeProvider, **kwargs: object) -> AnthropicMessagesSummarizer:
    options: dict[str, object] = {"timeout": 5.0, "backoff_base": 0.0}
    options.update(kwargs)
    return AnthropicMessagesSummarizer(fake.base_url, MODEL, KEY, **options)  # type: ignore[arg-type]


async def test_request_shape(fake_anthropic: FakeProvider) -> None:
    fake_anthropic.api_key = KEY
    fake_anthropic.reply_text = "## Goal\nFix the bug."
    summary = await make(fake_anthropic).summarize(request(max_tokens=640))
    assert summary == "## Goal\nFix the bug."
    [sent] = fake_anthropic.requests
    assert sent.method == "POST"
    assert sent.path == "/v1/messages"
    assert sent.headers["x-api-key"] == KEY
    assert sent.headers["anthropic-version"] == "2023-06-01"
    assert sent.headers["content-type"] == "application/json"
    assert "authorization" not in sent.headers
    assert sent.body == {
        "model": MODEL,
        "max_tokens": 640,
        "system": SYSTEM,
        "messages": [{"role": "user", "content": USER}],
    }


async def test_name_limits_and_default_url(fake_anthropic: FakeProvider) -> None:
    assert AnthropicMessagesSummarizer(model=MODEL, api_key=KEY).base_url == (
        "https://api.anthropic.com"
    )
    summarizer = make(fake_anthropic, max_output_tokens=2048)
    assert summarizer.name == f"anthropic:{MODEL}"
    assert summarizer.max_output_tokens == 2048
    await summarizer.summarize(request(max_tokens=64_000))
    assert fake_anthropic.requests[0].body["max_tokens"] == 2048


async def test_empty_system_is_omitted(fake_anthropic: FakeProvider) -> None:
    await make(fake_anthropic).summarize(request(system=""))
    assert "system" not in fake_anthropic.requests[0].body


async def test_text_blocks_are_concatenated(fake_anthropic: FakeProvider) -> None:
    fake_anthropic.reply_json = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": MODEL,
        "content": [
            {"type": "thinking", "thinking": "hmm", "signature": "sig"},
            {"type": "text", "text": "## Goal\n"},
            {"type": "text", "text": "Fix it."},
        ],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": 10, "output_tokens": 5},
    }
    assert await make(fake_anthropic).summarize(request()) == "## Goal\nFix it."


async def test_max_tokens_stop_is_accepted(fake_anthropic: FakeProvider) -> None:
    fake_anthropic.finish_reason = "max_tokens"
    fake_anthropic.reply_text = "## Goal\nPartial"
    assert await make(fake_anthropic).summarize(request()) == "## Goal\nPartial"


@pytest.mark.parametrize(("stop", "retryable"), [("end_turn", True), ("refusal", False)])
async def test_empty_text_is_an_error(
    fake_anthropic: FakeProvider, stop: str, retryable: bool
) -> None:
    fake_anthropic.reply_text = ""
    fake_anthropic.finish_reason = stop
    with pytest.raises(SummarizerError, match="empty summary") as info:
        await make(fake_anthropic).summarize(request())
    assert info.value.retryable is retryable


@pytest.mark.parametrize("status", [429, 500, 529])
async def test_retries_then_succeeds(fake_anthropic: FakeProvider, status: int) -> None:
    fake_anthropic.fail_next(3, status)
    assert await make(fake_anthropic).summarize(request()) == "fake summary"
    assert [r.status for r in fake_anthropic.responses] == [status] * 3 + [200]


async def test_overloaded_gives_up(fake_anthropic: FakeProvider) -> None:
    fake_anthropic.fail_next(10, 529)
    with pytest.raises(SummarizerError) as info:
        await make(fake_anthropic, max_retries=3).summarize(request())
    assert info.value.retryable
    message = str(info.value)
    assert message.startswith(f"anthropic:{MODEL}: gave up after 4 attempts: HTTP 529")
    assert "overloaded_error: Overloaded" in message
    assert len(fake_anthropic.requests) == 4


async def test_retry_after_is_honoured(fake_anthropic: FakeProvider) -> None:
    sleep = SleepRecorder()
    fake_anthropic.fail_next(1, 429, retry_after="12")
    fake_anthropic.fail_next(1, 529, retry_after="Thu, 01 Jan 1970 00:00:00 GMT")
    await make(fake_anthropic, sleep=sleep).summarize(request())
    assert sleep.delays == [12.0, 0.0]


async def test_long_retry_after_is_capped(fake_anthropic: FakeProvider) -> None:
    sleep = SleepRecorder()
    fake_anthropic.fail_next(1, 429, retry_after="3600")
    await make(fake_anthropic, sleep=sleep).summarize(request())
    assert sleep.delays == [60.0]


async def test_bad_request_is_not_retried(fake_anthropic: FakeProvider) -> None:
    fake_anthropic.fail_next(3, 400, message="prompt is too long: 210000 tokens > 200000 maximum")
    with pytest.raises(SummarizerError) as info:
        await make(fake_anthropic).summarize(request())
    assert not info.value.retryable
    assert "prompt is too long: 210000 tokens > 200000 maximum" in str(info.value)
    assert len(fake_anthropic.requests) == 1


async def test_wrong_key(fake_anthropic: FakeProvider) -> None:
    fake_anthropic.api_key = "sk-ant-other"
    with pytest.raises(SummarizerError, match="authentication_error: invalid x-api-key") as info:
        await make(fake_anthropic).summarize(request())
    assert not info.value.retryable


async def test_missing_key(fake_anthropic: FakeProvider) -> None:
    fake_anthropic.api_key = KEY
    summarizer = AnthropicMessagesSummarizer(fake_anthropic.base_url, MODEL, "")
    with pytest.raises(SummarizerError, match="x-api-key header is required") as info:
        await summarizer.summarize(request())
    assert not info.value.retryable
    assert "x-api-key" not in fake_anthropic.requests[0].headers


async def test_timeout(fake_anthropic: FakeProvider) -> None:
    fake_anthropic.delay = 3.0
    with pytest.raises(SummarizerError, match="no response within") as info:
        await make(fake_anthropic, timeout=0.2, max_retries=1).summarize(request())
    assert info.value.retryable
    assert len(fake_anthropic.requests) == 2


def test_model_is_required() -> None:
    with pytest.raises(ValueError, match="model"):
        AnthropicMessagesSummarizer(api_key=KEY)
