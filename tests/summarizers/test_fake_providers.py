"""The fake servers speak the real wire formats: their replies validate as
the official SDKs' types, and the SDK clients themselves work against them.

Skipped when the ``openai`` / ``anthropic`` packages are not installed.
"""

from __future__ import annotations

from typing import Any

import pytest

from ctxwarden.summarizers.anthropic import AnthropicMessagesSummarizer
from ctxwarden.summarizers.openai import OpenAIChatSummarizer
from tests.summarizers.fake_providers import FakeProvider
from tests.summarizers.helpers import request


def _assert_known_fields(body: dict[str, Any], model: Any) -> None:
    """The fake invents no top-level field the SDK type does not know."""
    assert set(body) <= set(model.model_fields), set(body) - set(model.model_fields)


async def test_openai_replies_validate(fake_openai: FakeProvider) -> None:
    openai = pytest.importorskip("openai")
    from openai.types import ErrorObject
    from openai.types.chat import ChatCompletion

    fake_openai.api_key = "sk-right"
    summarizer = OpenAIChatSummarizer(fake_openai.base_url, "gpt-4o-mini", "sk-right")
    fake_openai.fail_next(1, 429)
    fake_openai.fail_next(1, 500)
    fake_openai.reply_text = "## Goal\nok"
    await summarizer.summarize(request())
    fake_openai.fail_next(1, 400, message="bad")
    with pytest.raises(Exception, match="bad"):
        await summarizer.summarize(request())
    assert [r.status for r in fake_openai.responses] == [429, 500, 200, 400]
    for response in fake_openai.responses:
        if response.status == 200:
            completion = ChatCompletion.model_validate(response.body)
            _assert_known_fields(response.body, ChatCompletion)
            assert completion.object == "chat.completion"
            assert completion.choices[0].message.content == "## Goal\nok"
            assert completion.choices[0].finish_reason == "stop"
            assert completion.usage is not None
        else:
            assert set(response.body) == {"error"}
            error = ErrorObject.model_validate(response.body["error"])
            _assert_known_fields(response.body["error"], ErrorObject)
            assert error.message
    assert openai  # imported for the skip


async def test_anthropic_replies_validate(fake_anthropic: FakeProvider) -> None:
    pytest.importorskip("anthropic")
    from anthropic.types import ErrorResponse, Message

    summarizer = AnthropicMessagesSummarizer(
        fake_anthropic.base_url, "claude-haiku-4-5", "k", backoff_base=0.0
    )
    fake_anthropic.fail_next(1, 529)
    fake_anthropic.fail_next(1, 429)
    fake_anthropic.reply_text = "## Goal\nok"
    await summarizer.summarize(request())
    fake_anthropic.fail_next(1, 400, message="bad")
    with pytest.raises(Exception, match="bad"):
        await summarizer.summarize(request())
    assert [r.status for r in fake_anthropic.responses] == [529, 429, 200, 400]
    for response in fake_anthropic.responses:
        if response.status == 200:
            message = Message.model_validate(response.body)
            _assert_known_fields(response.body, Message)
            assert message.type == "message"
            assert message.role == "assistant"
            assert message.stop_reason == "end_turn"
            assert [b.type for b in message.content] == ["text"]
        else:
            error = ErrorResponse.model_validate(response.body)
            _assert_known_fields(response.body, ErrorResponse)
            assert error.type == "error"
            assert error.error.type in {"overloaded_error", "rate_limit_error"} or (
                response.status == 400 and error.error.type == "invalid_request_error"
            )


async def test_openai_sdk_client_works_against_the_fake(fake_openai: FakeProvider) -> None:
    openai = pytest.importorskip("openai")
    fake_openai.api_key = "sk-sdk"
    fake_openai.reply_text = "from the fake"
    async with openai.AsyncOpenAI(
        base_url=fake_openai.base_url, api_key="sk-sdk", max_retries=0
    ) as client:
        completion = await client.chat.completions.create(
            model="gpt-4o-mini",
            messages=[{"role": "user", "content": "hi"}],
            max_completion_tokens=50,
        )
        assert completion.choices[0].message.content == "from the fake"
        fake_openai.fail_next(1, 429, message="Rate limit reached for requests")
        with pytest.raises(openai.RateLimitError, match="Rate limit reached for requests"):
            await client.chat.completions.create(
                model="gpt-4o-mini", messages=[{"role": "user", "content": "hi"}]
            )
    assert fake_openai.requests[0].path == "/v1/chat/completions"
    assert fake_openai.requests[0].headers["authorization"] == "Bearer sk-sdk"


async def test_anthropic_sdk_client_works_against_the_fake(fake_anthropic: FakeProvider) -> None:
    anthropic = pytest.importorskip("anthropic")
    fake_anthropic.api_key = "sk-ant-sdk"
    fake_anthropic.reply_text = "from the fake"
    async with anthropic.AsyncAnthropic(
        base_url=fake_anthropic.base_url, api_key="sk-ant-sdk", max_retries=0
    ) as client:
        message = await client.messages.create(
            model="claude-haiku-4-5",
            max_tokens=50,
            system="be brief",
            messages=[{"role": "user", "content": "hi"}],
        )
        assert message.content[0].type == "text"
        assert message.content[0].text == "from the fake"
        fake_anthropic.fail_next(1, 529)
        with pytest.raises(anthropic.APIStatusError, match="Overloaded") as info:
            await client.messages.create(
                model="claude-haiku-4-5",
                max_tokens=50,
                messages=[{"role": "user", "content": "hi"}],
            )
        assert info.value.status_code == 529
    sent = fake_anthropic.requests[0]
    assert sent.path == "/v1/messages"
    assert sent.headers.get("x-api-key", sent.headers.get("authorization")) in {
        "sk-ant-sdk",
        "Bearer sk-ant-sdk",
    }
    assert sent.headers["anthropic-version"]
