"""build_summarizer: settings to a summariser, and its configuration errors."""

from __future__ import annotations

import pytest

from ctxwarden.core.compaction.extractive import ExtractiveSummarizer
from ctxwarden.summarizers import (
    AnthropicMessagesSummarizer,
    OpenAIChatSummarizer,
    build_summarizer,
)
from tests.summarizers.fake_providers import FakeProvider
from tests.summarizers.helpers import request

ENV = "CTXWARDEN_TEST_SUMMARIZER_KEY"


def build(kind: str, base_url: str = "", model: str = "m", api_key_env: str = ENV) -> object:
    return build_summarizer(
        kind,
        base_url=base_url,
        model=model,
        api_key_env=api_key_env,
        timeout=30.0,
        max_output_tokens=8192,
    )


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (ENV, "OPENAI_API_KEY", "ANTHROPIC_API_KEY"):
        monkeypatch.delenv(name, raising=False)


@pytest.mark.parametrize("kind", ["", "none", " None "])
def test_no_summarizer(kind: str) -> None:
    assert build(kind) is None


def test_extractive() -> None:
    summarizer = build("extractive", model="")
    assert isinstance(summarizer, ExtractiveSummarizer)
    assert summarizer.name == "extractive"


def test_openai_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV, "sk-x")
    summarizer = build("openai", model="gpt-4o-mini")
    assert isinstance(summarizer, OpenAIChatSummarizer)
    assert summarizer.name == "openai:gpt-4o-mini"
    assert summarizer.base_url == "https://api.openai.com/v1"
    assert summarizer.max_output_tokens == 8192


def test_anthropic_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV, "sk-ant-x")
    summarizer = build("Anthropic", model="claude-haiku-4-5")
    assert isinstance(summarizer, AnthropicMessagesSummarizer)
    assert summarizer.name == "anthropic:claude-haiku-4-5"
    assert summarizer.base_url == "https://api.anthropic.com"


def test_default_env_var_names(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-x")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-x")
    assert build("openai", api_key_env="") is not None
    assert build("anthropic", api_key_env="") is not None


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
def test_missing_key_is_a_config_error(kind: str) -> None:
    with pytest.raises(ValueError, match=ENV):
        build(kind)


def test_empty_key_counts_as_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV, "  ")
    with pytest.raises(ValueError, match=ENV):
        build("openai", base_url="https://api.deepseek.com/v1")


def test_missing_default_env_var_is_named() -> None:
    with pytest.raises(ValueError, match="ANTHROPIC_API_KEY"):
        build("anthropic", api_key_env="")


@pytest.mark.parametrize(
    "url",
    ["http://localhost:11434/v1", "http://127.0.0.1:8000/v1", "http://[::1]:8080/v1"],
)
def test_local_openai_needs_no_key(url: str) -> None:
    summarizer = build("openai", base_url=url, model="llama3.2")
    assert isinstance(summarizer, OpenAIChatSummarizer)


def test_local_anthropic_still_needs_a_key() -> None:
    with pytest.raises(ValueError, match="API key"):
        build("anthropic", base_url="http://localhost:9000")


def test_unknown_kind() -> None:
    with pytest.raises(ValueError, match="unknown summarizer kind 'gemini'"):
        build("gemini")


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
def test_model_is_required(kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV, "k")
    with pytest.raises(ValueError, match="model"):
        build(kind, model=" ")


def test_bad_base_url(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV, "k")
    with pytest.raises(ValueError, match="http"):
        build("openai", base_url="ftp://example.com/v1")


def test_bad_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV, "k")
    with pytest.raises(ValueError, match="timeout"):
        build_summarizer(
            "openai", base_url="", model="m", api_key_env=ENV, timeout=0, max_output_tokens=1
        )


async def test_built_openai_summarizer_calls_the_server(
    fake_openai: FakeProvider, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(ENV, "sk-from-env")
    fake_openai.api_key = "sk-from-env"
    summarizer = build_summarizer(
        "openai",
        base_url=fake_openai.base_url,
        model="qwen3",
        api_key_env=ENV,
        timeout=5.0,
        max_output_tokens=100,
    )
    assert summarizer is not None
    assert await summarizer.summarize(request(max_tokens=1000)) == "fake summary"
    assert fake_openai.requests[0].body["max_tokens"] == 100
    assert fake_openai.requests[0].headers["authorization"] == "Bearer sk-from-env"


async def test_built_anthropic_summarizer_calls_the_server(
    fake_anthropic: FakeProvider, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(ENV, "sk-ant-env")
    fake_anthropic.api_key = "sk-ant-env"
    summarizer = build_summarizer(
        "anthropic",
        base_url=fake_anthropic.base_url,
        model="claude-sonnet-4-5",
        api_key_env=ENV,
        timeout=5.0,
        max_output_tokens=4096,
    )
    assert summarizer is not None
    assert await summarizer.summarize(request()) == "fake summary"


def test_extractive_takes_the_output_limit() -> None:
    summarizer = build("extractive")
    assert isinstance(summarizer, ExtractiveSummarizer)
    assert summarizer.max_output_tokens == 8192
