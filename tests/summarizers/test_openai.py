"""OpenAIChatSummarizer against a fake OpenAI-compatible server."""

from __future__ import annotations

import asyncio
import json
import socket
import time

import httpx
import pytest

from ctxwarden.core.compaction.types import SummarizerError
from ctxwarden.summarizers.openai import OpenAIChatSummarizer
from tests.summarizers.fake_providers import FakeProvider
from tests.summarizers.helpers import SYSTEM, USER, SleepRecorder, request

MODEL = "gpt-4o-mini"
KEY = "sk-test-openai"


def make(fake: FakeProvider, **kwargs: object) -> OpenAIChatSummarizer:
    options: dict[str, object] = {"timeout": 5.0, "backoff_base": 0.0}
    options.update(kwargs)
    return OpenAIChatSummarizer(fake.base_url, MODEL, KEY, **options)  # type: ignore[arg-type]


async def test_request_shape(fake_openai: FakeProvider) -> None:
    fake_openai.api_key = KEY
    fake_openai.reply_text = "## Goal\nFix the bug."
    summary = await make(fake_openai).summarize(request(max_tokens=777))
    assert summary == "## Goal\nFix the bug."
    [sent] = fake_openai.requests
    assert sent.method == "POST"
    assert sent.path == "/v1/chat/completions"
    assert sent.headers["authorization"] == f"Bearer {KEY}"
    assert sent.headers["content-type"] == "application/json"
    assert sent.body == {
        "model": MODEL,
        "messages": [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": USER},
        ],
        "max_tokens": 777,
    }


async def test_name_and_limits(fake_openai: FakeProvider) -> None:
    summarizer = make(fake_openai, max_output_tokens=4096)
    assert summarizer.name == f"openai:{MODEL}"
    assert summarizer.max_output_tokens == 4096
    await summarizer.summarize(request(max_tokens=100_000))
    assert fake_openai.requests[0].body["max_tokens"] == 4096


async def test_no_key_no_authorization_header(fake_openai: FakeProvider) -> None:
    summarizer = OpenAIChatSummarizer(fake_openai.base_url, "llama3.2", "", backoff_base=0.0)
    assert await summarizer.summarize(request()) == "fake summary"
    assert "authorization" not in fake_openai.requests[0].headers


async def test_empty_system_prompt_is_not_sent(fake_openai: FakeProvider) -> None:
    await make(fake_openai).summarize(request(system=""))
    assert fake_openai.requests[0].body["messages"] == [{"role": "user", "content": USER}]


async def test_trailing_slash_in_base_url(fake_openai: FakeProvider) -> None:
    summarizer = OpenAIChatSummarizer(fake_openai.base_url + "/", MODEL, KEY)
    await summarizer.summarize(request())
    assert fake_openai.requests[0].path == "/v1/chat/completions"


async def test_finish_reason_length_is_accepted(fake_openai: FakeProvider) -> None:
    fake_openai.finish_reason = "length"
    fake_openai.reply_text = "## Goal\nA summary cut off in the mid"
    assert await make(fake_openai).summarize(request()) == "## Goal\nA summary cut off in the mid"


async def test_think_block_is_stripped(fake_openai: FakeProvider) -> None:
    fake_openai.reply_text = "<think>\nlet me see\n</think>\n\n## Goal\nX"
    assert await make(fake_openai).summarize(request()) == "## Goal\nX"


@pytest.mark.parametrize("content", ["", "   \n", None])
async def test_empty_content_is_an_error(fake_openai: FakeProvider, content: str | None) -> None:
    fake_openai.reply_json = {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1,
        "model": MODEL,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content},
                "finish_reason": "stop",
            }
        ],
    }
    with pytest.raises(SummarizerError, match="empty summary") as info:
        await make(fake_openai).summarize(request())
    assert info.value.retryable


async def test_empty_content_cut_by_length_is_not_retryable(fake_openai: FakeProvider) -> None:
    fake_openai.reply_text = ""
    fake_openai.finish_reason = "length"
    with pytest.raises(SummarizerError, match="finish_reason='length'") as info:
        await make(fake_openai).summarize(request())
    assert not info.value.retryable


async def test_content_parts_are_joined(fake_openai: FakeProvider) -> None:
    fake_openai.reply_json = {
        "choices": [
            {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}],
                },
                "finish_reason": "stop",
            }
        ]
    }
    assert await make(fake_openai).summarize(request()) == "ab"


async def test_error_in_a_200_body(fake_openai: FakeProvider) -> None:
    fake_openai.reply_json = {"error": {"message": "upstream provider failed", "code": 502}}
    with pytest.raises(SummarizerError, match="upstream provider failed") as info:
        await make(fake_openai).summarize(request())
    assert info.value.retryable


@pytest.mark.parametrize("status", [429, 500, 502, 503])
async def test_retries_then_succeeds(fake_openai: FakeProvider, status: int) -> None:
    fake_openai.fail_next(2, status)
    assert await make(fake_openai).summarize(request()) == "fake summary"
    assert [r.status for r in fake_openai.responses] == [status, status, 200]
    assert len(fake_openai.requests) == 3
    # Every attempt sends the same body.
    assert len({json.dumps(r.body, sort_keys=True) for r in fake_openai.requests}) == 1


async def test_gives_up_after_max_retries(fake_openai: FakeProvider) -> None:
    fake_openai.fail_next(10, 429, message="Rate limit reached for gpt-4o-mini")
    with pytest.raises(SummarizerError) as info:
        await make(fake_openai, max_retries=2).summarize(request())
    assert info.value.retryable
    assert "gave up after 3 attempts" in str(info.value)
    assert "Rate limit reached for gpt-4o-mini" in str(info.value)
    assert len(fake_openai.requests) == 3


async def test_zero_retries(fake_openai: FakeProvider) -> None:
    fake_openai.fail_next(1, 500)
    with pytest.raises(SummarizerError, match="gave up after 1 attempt:") as info:
        await make(fake_openai, max_retries=0).summarize(request())
    assert info.value.retryable
    assert len(fake_openai.requests) == 1


async def test_retry_after_is_honoured(fake_openai: FakeProvider) -> None:
    sleep = SleepRecorder()
    fake_openai.fail_next(1, 429, retry_after="7")
    fake_openai.fail_next(1, 503, retry_after="1.5")
    await make(fake_openai, sleep=sleep).summarize(request())
    assert sleep.delays == [7.0, 1.5]


async def test_exponential_backoff_without_retry_after(fake_openai: FakeProvider) -> None:
    sleep = SleepRecorder()
    fake_openai.fail_next(3, 500, retry_after=None)
    await make(fake_openai, sleep=sleep, backoff_base=1.0, backoff_max=3.0).summarize(request())
    assert len(sleep.delays) == 3
    for delay, nominal in zip(sleep.delays, [1.0, 2.0, 3.0], strict=True):
        assert 0.75 * nominal <= delay <= nominal


@pytest.mark.parametrize("status", [400, 401, 403, 404])
async def test_client_errors_are_not_retried(fake_openai: FakeProvider, status: int) -> None:
    fake_openai.fail_next(5, status, message=f"provider says no ({status})")
    with pytest.raises(SummarizerError) as info:
        await make(fake_openai).summarize(request())
    assert not info.value.retryable
    assert f"provider says no ({status})" in str(info.value)
    assert f"HTTP {status}" in str(info.value)
    assert len(fake_openai.requests) == 1


async def test_wrong_key_is_not_retried(fake_openai: FakeProvider) -> None:
    fake_openai.api_key = "sk-the-right-one"
    with pytest.raises(SummarizerError, match="Incorrect API key provided") as info:
        await make(fake_openai).summarize(request())
    assert not info.value.retryable
    assert KEY not in str(info.value)


async def test_timeout_then_success(fake_openai: FakeProvider) -> None:
    fake_openai.slow_next(1, 3.0)
    started = time.monotonic()
    assert await make(fake_openai, timeout=0.3).summarize(request()) == "fake summary"
    assert time.monotonic() - started < 2.5
    assert len(fake_openai.requests) == 2


async def test_timeouts_exhaust_retries(fake_openai: FakeProvider) -> None:
    fake_openai.delay = 3.0
    started = time.monotonic()
    with pytest.raises(SummarizerError, match=r"no response within 0\.2s") as info:
        await make(fake_openai, timeout=0.2, max_retries=1).summarize(request())
    assert info.value.retryable
    assert time.monotonic() - started < 2.5
    # The second try was sent; the server may read it only after the client gave up.
    assert await asyncio.to_thread(fake_openai.wait_for_requests, 2) == 2


async def test_connection_refused_is_retryable() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    summarizer = OpenAIChatSummarizer(
        f"http://127.0.0.1:{port}/v1", MODEL, KEY, max_retries=2, backoff_base=0.0
    )
    with pytest.raises(SummarizerError, match="gave up after 3 attempts: connection error") as info:
        await summarizer.summarize(request())
    assert info.value.retryable


async def test_non_json_success_body() -> None:
    def handler(_: httpx.Request) -> httpx.Response:
        return httpx.Response(200, text="<html>proxy login</html>")

    async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
        summarizer = OpenAIChatSummarizer("https://llm.example/v1", MODEL, KEY, http_client=client)
        with pytest.raises(SummarizerError, match="not a JSON object") as info:
            await summarizer.summarize(request())
    assert info.value.retryable


# --- max_tokens vs max_completion_tokens ---------------------------------------


async def test_openai_hosts_get_max_completion_tokens() -> None:
    seen: list[httpx.Request] = []

    def handler(req: httpx.Request) -> httpx.Response:
        seen.append(req)
        return httpx.Response(
            200,
            json={
                "id": "chatcmpl-1",
                "object": "chat.completion",
                "created": 1,
                "model": "gpt-5-mini",
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": "ok"},
                        "finish_reason": "stop",
                    }
                ],
            },
        )

    async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
        summarizer = OpenAIChatSummarizer(
            "https://api.openai.com/v1", "gpt-5-mini", KEY, http_client=client
        )
        assert summarizer.token_parameter == "max_completion_tokens"
        assert await summarizer.summarize(request(max_tokens=900)) == "ok"
    [sent] = seen
    assert str(sent.url) == "https://api.openai.com/v1/chat/completions"
    body = json.loads(sent.content)
    assert body["max_completion_tokens"] == 900
    assert "max_tokens" not in body


@pytest.mark.parametrize(
    "url",
    [
        "http://localhost:11434/v1",
        "http://vllm:8000/v1",
        "https://api.deepseek.com/v1",
        "http://127.0.0.1:8080/v1",
    ],
)
def test_compatible_servers_get_max_tokens(url: str) -> None:
    assert OpenAIChatSummarizer(url, MODEL, "").token_parameter == "max_tokens"


async def test_switches_parameter_when_rejected(fake_openai: FakeProvider) -> None:
    fake_openai.unsupported_parameters = {"max_tokens"}
    summarizer = make(fake_openai)
    assert await summarizer.summarize(request(max_tokens=500)) == "fake summary"
    assert summarizer.token_parameter == "max_completion_tokens"
    first, second = fake_openai.requests
    assert first.body["max_tokens"] == 500
    assert second.body["max_completion_tokens"] == 500
    assert "max_tokens" not in second.body
    # The choice sticks: the next call needs one request.
    await summarizer.summarize(request())
    assert len(fake_openai.requests) == 3
    assert "max_completion_tokens" in fake_openai.requests[2].body


async def test_switches_back_to_max_tokens(fake_openai: FakeProvider) -> None:
    fake_openai.unsupported_parameters = {"max_completion_tokens"}
    summarizer = make(fake_openai, token_parameter="auto")
    summarizer._token_parameter = "max_completion_tokens"
    await summarizer.summarize(request())
    assert summarizer.token_parameter == "max_tokens"


async def test_pinned_parameter_does_not_switch(fake_openai: FakeProvider) -> None:
    fake_openai.unsupported_parameters = {"max_tokens"}
    summarizer = make(fake_openai, token_parameter="max_tokens")
    with pytest.raises(SummarizerError, match="Unsupported parameter: 'max_tokens'") as info:
        await summarizer.summarize(request())
    assert not info.value.retryable
    assert len(fake_openai.requests) == 1


def test_constructor_validation() -> None:
    with pytest.raises(ValueError, match="model"):
        OpenAIChatSummarizer("http://localhost/v1", "", "")
    with pytest.raises(ValueError, match="http"):
        OpenAIChatSummarizer("localhost:11434/v1", MODEL, "")
    with pytest.raises(ValueError, match="token_parameter"):
        OpenAIChatSummarizer("http://localhost/v1", MODEL, "", token_parameter="tokens")  # type: ignore[arg-type]


async def test_other_unsupported_parameter_does_not_switch() -> None:
    calls: list[dict[str, object]] = []

    def handler(req: httpx.Request) -> httpx.Response:
        calls.append(json.loads(req.content))
        error = {
            "message": "Unsupported value: 'stream' does not support true with max_tokens set.",
            "type": "invalid_request_error",
            "param": "stream",
            "code": "unsupported_value",
        }
        return httpx.Response(400, json={"error": error})

    async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
        summarizer = OpenAIChatSummarizer("http://vllm:8000/v1", MODEL, "", http_client=client)
        with pytest.raises(SummarizerError, match="Unsupported value") as info:
            await summarizer.summarize(request())
    assert not info.value.retryable
    assert len(calls) == 1
    assert summarizer.token_parameter == "max_tokens"


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ({"object": "error", "message": "vLLM says no", "type": "BadRequestError"}, "vLLM says no"),
        ({"error": "ollama says no"}, "ollama says no"),
        ({"detail": "proxy says no"}, "proxy says no"),
        (None, "plain text says no"),
    ],
)
async def test_error_shapes_of_compatible_servers(body: object, expected: str) -> None:
    def handler(_: httpx.Request) -> httpx.Response:
        if body is None:
            return httpx.Response(422, text="plain text says no")
        return httpx.Response(422, json=body)

    async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
        summarizer = OpenAIChatSummarizer("http://localhost:8000/v1", MODEL, "", http_client=client)
        with pytest.raises(SummarizerError, match=expected) as info:
            await summarizer.summarize(request())
    assert not info.value.retryable
