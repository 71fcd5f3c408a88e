"""The built-in model table: families, prefix matching, aliases, unknown models."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from ctxwarden.core import models
from ctxwarden.core.images import IMAGE_RULES
from ctxwarden.core.models import (
    BUILTIN_MODELS,
    DEFAULT_CONTEXT_WINDOW,
    UNKNOWN_MODEL,
    ModelEntry,
    ModelInfo,
    install_models,
    lookup_model,
    model_entries,
    normalize_model_id,
    reset_models,
)
from ctxwarden.core.session import ContextPolicy, effective_policy
from ctxwarden.tokenizers import SUPPORTED_SPECS, is_tokenizer_spec, load_tokenizer

O200K = "tiktoken:o200k_base"
CL100K = "tiktoken:cl100k_base"


@pytest.fixture(autouse=True)
def _builtin_table() -> Iterator[None]:
    reset_models()
    yield
    reset_models()


# (model, model_id, provider, window, max_output, tokenizer, image_rule)
FAMILIES = [
    # OpenAI
    ("gpt-4o", "gpt-4o", "openai", 128000, 16384, O200K, "openai"),
    ("gpt-4o-2024-08-06", "gpt-4o", "openai", 128000, 16384, O200K, "openai"),
    ("chatgpt-4o-latest", "gpt-4o", "openai", 128000, 16384, O200K, "openai"),
    ("gpt-4o-mini-2024-07-18", "gpt-4o-mini", "openai", 128000, 16384, O200K, "openai"),
    ("gpt-4.1", "gpt-4.1", "openai", 1047576, 32768, O200K, "openai"),
    ("gpt-4.1-mini-2025-04-14", "gpt-4.1-mini", "openai", 1047576, 32768, O200K, "openai"),
    ("gpt-4.1-nano", "gpt-4.1-nano", "openai", 1047576, 32768, O200K, "openai"),
    ("gpt-5", "gpt-5", "openai", 400000, 128000, O200K, "openai"),
    ("gpt-5-2025-08-07", "gpt-5", "openai", 400000, 128000, O200K, "openai"),
    ("gpt-5-codex", "gpt-5", "openai", 400000, 128000, O200K, "openai"),
    ("gpt-5-mini", "gpt-5-mini", "openai", 400000, 128000, O200K, "openai"),
    ("gpt-5-nano-2025-08-07", "gpt-5-nano", "openai", 400000, 128000, O200K, "openai"),
    ("gpt-5-chat-latest", "gpt-5-chat", "openai", 128000, 16384, O200K, "openai"),
    ("o1", "o1", "openai", 200000, 100000, O200K, "openai"),
    ("o1-mini-2024-09-12", "o1-mini", "openai", 128000, 65536, O200K, "default"),
    ("o3", "o3", "openai", 200000, 100000, O200K, "openai"),
    ("o3-mini-2025-01-31", "o3-mini", "openai", 200000, 100000, O200K, "default"),
    ("o4-mini", "o4-mini", "openai", 200000, 100000, O200K, "openai"),
    ("gpt-4-turbo-2024-04-09", "gpt-4-turbo", "openai", 128000, 4096, CL100K, "openai"),
    ("gpt-4-0613", "gpt-4", "openai", 8192, 8192, CL100K, "default"),
    ("gpt-3.5-turbo-0125", "gpt-3.5-turbo", "openai", 16385, 4096, CL100K, "default"),
    ("gpt-oss-120b", "gpt-oss", "openai", 131072, 131072, O200K, "default"),
    # Anthropic
    ("claude-opus-4-20250514", "claude-opus-4", "anthropic", 200000, 32000, "heuristic",
     "anthropic"),
    ("claude-opus-4-1-20250805", "claude-opus-4-1", "anthropic", 200000, 32000, "heuristic",
     "anthropic"),
    ("claude-sonnet-4-20250514", "claude-sonnet-4", "anthropic", 200000, 64000, "heuristic",
     "anthropic"),
    ("claude-sonnet-4-5", "claude-sonnet-4-5", "anthropic", 200000, 64000, "heuristic",
     "anthropic"),
    ("claude-haiku-4-5-20251001", "claude-haiku-4-5", "anthropic", 200000, 64000, "heuristic",
     "anthropic"),
    ("claude-3-5-sonnet-20241022", "claude-3-5-sonnet", "anthropic", 200000, 8192, "heuristic",
     "anthropic"),
    ("claude-2.1", "claude-", "anthropic", 200000, 8192, "heuristic", "anthropic"),
    # Google
    ("gemini-2.0-flash", "gemini-2.0-flash", "google", 1048576, 8192, "heuristic", "gemini"),
    ("gemini-2.0-flash-001", "gemini-2.0-flash", "google", 1048576, 8192, "heuristic", "gemini"),
    ("gemini-2.5-pro", "gemini-2.5-pro", "google", 1048576, 65536, "heuristic", "gemini"),
    ("gemini-2.5-flash", "gemini-2.5-flash", "google", 1048576, 65536, "heuristic", "gemini"),
    ("gemini-2.5-flash-lite", "gemini-2.5-flash-lite", "google", 1048576, 65536, "heuristic",
     "gemini"),
    ("gemini-2.5-flash-preview-09-2025", "gemini-2.5-flash", "google", 1048576, 65536,
     "heuristic", "gemini"),
    ("gemini-exp-1206", "gemini-", "google", 1048576, 8192, "heuristic", "gemini"),
    # DeepSeek
    ("deepseek-chat", "deepseek-chat", "deepseek", 128000, 8192, "heuristic", "default"),
    ("deepseek-reasoner", "deepseek-reasoner", "deepseek", 128000, 65536, "heuristic",
     "default"),
    ("deepseek-v3", "deepseek", "deepseek", 128000, 8192, "heuristic", "default"),
    # Qwen
    ("qwen2.5-72b-instruct", "qwen2.5", "qwen", 131072, 8192, "heuristic", "default"),
    ("qwen3-235b-a22b", "qwen3", "qwen", 131072, 32768, "heuristic", "default"),
    ("qwen3:8b", "qwen3", "qwen", 131072, 32768, "heuristic", "default"),
    ("qwen3-coder-plus", "qwen3-coder", "qwen", 262144, 65536, "heuristic", "default"),
    ("qwen-max-latest", "qwen-max", "qwen", 32768, 8192, "heuristic", "default"),
    ("qwen-plus", "qwen-plus", "qwen", 131072, 16384, "heuristic", "default"),
    ("qwen-turbo", "qwen-turbo", "qwen", 1000000, 16384, "heuristic", "default"),
    # Meta
    ("llama-3.1-70b-instruct", "llama-3.1", "meta", 131072, 0, "heuristic", "default"),
    ("llama3.2:3b", "llama-3.2", "meta", 131072, 0, "heuristic", "default"),
    ("llama-3.3-70b-versatile", "llama-3.3", "meta", 131072, 0, "heuristic", "default"),
    ("Meta-Llama-3.1-8B-Instruct", "llama-3.1", "meta", 131072, 0, "heuristic", "default"),
    ("llama-4-maverick-17b-128e-instruct", "llama-4-maverick", "meta", 1048576, 0, "heuristic",
     "default"),
    ("llama-4-scout-17b-16e-instruct", "llama-4-scout", "meta", 10485760, 0, "heuristic",
     "default"),
    # Mistral
    ("mistral-large-latest", "mistral-large", "mistral", 128000, 0, "heuristic", "default"),
    ("mistral-small-2503", "mistral-small", "mistral", 128000, 0, "heuristic", "default"),
    ("codestral-latest", "codestral", "mistral", 256000, 0, "heuristic", "default"),
    ("ministral-8b-latest", "ministral", "mistral", 128000, 0, "heuristic", "default"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("model", "model_id", "provider", "window", "max_out", "tokenizer", "image_rule"), FAMILIES
)
def test_families(
    model: str,
    model_id: str,
    provider: str,
    window: int,
    max_out: int,
    tokenizer: str,
    image_rule: str,
) -> None:
    info = lookup_model(model)
    assert info.known is True
    assert (info.model_id, info.provider, info.context_window) == (model_id, provider, window)
    assert (info.max_output_tokens, info.tokenizer, info.image_rule) == (
        max_out,
        tokenizer,
        image_rule,
    )


@pytest.mark.parametrize(
    ("model", "model_id"),
    [
        # vendor prefixes
        ("openai/gpt-4o", "gpt-4o"),
        ("anthropic/claude-sonnet-4-5", "claude-sonnet-4-5"),
        ("openrouter/anthropic/claude-opus-4.1", "claude-opus-4-1"),
        ("models/gemini-2.5-pro", "gemini-2.5-pro"),
        ("meta-llama/Llama-3.3-70B-Instruct", "llama-3.3"),
        ("Qwen/Qwen2.5-Coder-32B-Instruct", "qwen2.5"),
        ("deepseek-ai/deepseek-reasoner", "deepseek-reasoner"),
        # OpenRouter's dotted Claude names
        ("anthropic/claude-sonnet-4.5", "claude-sonnet-4-5"),
        ("anthropic/claude-3.7-sonnet", "claude-3-7-sonnet"),
        ("anthropic/claude-haiku-4.5", "claude-haiku-4-5"),
        # Bedrock
        ("anthropic.claude-3-5-sonnet-20241022-v2:0", "claude-3-5-sonnet"),
        ("us.anthropic.claude-sonnet-4-5-20250929-v1:0", "claude-sonnet-4-5"),
        ("global.anthropic.claude-opus-4-5-20251101-v1:0", "claude-opus-4-5"),
        ("meta.llama3-1-70b-instruct-v1:0", "llama-3.1"),
        ("mistral.mistral-large-2407-v1:0", "mistral-large"),
        ("openai.gpt-oss-120b-1:0", "gpt-oss"),
        # Vertex
        ("claude-sonnet-4-5@20250929", "claude-sonnet-4-5"),
        # case and whitespace
        ("  GPT-4o-Mini  ", "gpt-4o-mini"),
        # the longest key wins
        ("claude-opus-4-1", "claude-opus-4-1"),
        ("claude-opus-4-5-20251101", "claude-opus-4-5"),
        ("gpt-4.1-nano-2025-04-14", "gpt-4.1-nano"),
        ("gemini-2.5-flash-lite-preview-06-17", "gemini-2.5-flash-lite"),
        ("o3-pro-2025-06-10", "o3-pro"),
    ],
)
def test_prefixes_and_aliases(model: str, model_id: str) -> None:
    assert lookup_model(model).model_id == model_id


@pytest.mark.parametrize(
    "model",
    [
        "",
        "   ",
        "x/",
        "my-local-model",
        "claude",  # only "claude-..." is the family
        "text-davinci-003",
        "gpt-4.7",  # "." is no separator: not a gpt-4
        "o10",
        "gpt",
        "gemini",
        "qwenfoo",
        "llamafile",
        "deepseek.r1-v1:0",  # Bedrock's name for R1 is not guessed
    ],
)
def test_unknown_models(model: str) -> None:
    info = lookup_model(model)
    assert info is UNKNOWN_MODEL
    assert info.known is False
    assert (info.provider, info.context_window, info.tokenizer) == ("", 128000, "heuristic")
    assert info.context_window == DEFAULT_CONTEXT_WINDOW
    assert info.image_rule == "default"
    assert info.max_output_tokens == 0


def test_dot_is_not_a_separator() -> None:
    assert lookup_model("gpt-4.5-preview").model_id == "gpt-4.5"
    assert lookup_model("gpt-4.5-preview").tokenizer == O200K
    assert lookup_model("gpt-5.1-codex").model_id == "gpt-5.1"
    assert lookup_model("qwen2-72b-instruct").model_id == "qwen2"


def test_framing() -> None:
    gpt = lookup_model("gpt-4o")
    assert (gpt.framing_tokens, gpt.reply_tokens) == (3, 3)
    for model in ("claude-sonnet-4-5", "gemini-2.5-pro", "qwen3", "llama-3.1", "deepseek-chat"):
        info = lookup_model(model)
        assert info.framing_tokens > 0, model
        assert info.reply_tokens > 0, model
    assert (UNKNOWN_MODEL.framing_tokens, UNKNOWN_MODEL.reply_tokens) == (0, 0)


def test_every_builtin_entry_is_consistent() -> None:
    ids = [normalize_model_id(e.model_id) for e in BUILTIN_MODELS]
    assert len(ids) == len(set(ids)), "duplicate model IDs"
    keys = [normalize_model_id(k) for e in BUILTIN_MODELS for k in e.keys]
    assert len(keys) == len(set(keys)), "a key belongs to two entries"
    for entry in BUILTIN_MODELS:
        info = entry.info
        assert info.known
        assert info.model_id == entry.model_id
        assert info.provider
        assert info.context_window > 0
        assert 0 <= info.max_output_tokens <= info.context_window, entry.model_id
        assert info.tokenizer in SUPPORTED_SPECS, entry.model_id
        assert is_tokenizer_spec(info.tokenizer)
        assert info.image_rule in IMAGE_RULES, entry.model_id
        for key in entry.keys:
            assert lookup_model(key) is info, key


def test_builtin_tokenizers_load() -> None:
    for spec in {e.info.tokenizer for e in BUILTIN_MODELS}:
        assert load_tokenizer(spec).spec == spec


def test_equality_is_by_the_original_fields() -> None:
    """tests/core compares ModelInfo(provider, window, tokenizer, known) with results."""
    assert lookup_model("gpt-4o") == ModelInfo("openai", 128000, O200K, known=True)
    assert lookup_model("claude-sonnet-4-5") == ModelInfo("anthropic", 200000, "heuristic")


def test_effective_policy_uses_the_table() -> None:
    p = effective_policy(ContextPolicy(), "us.anthropic.claude-sonnet-4-5-20250929-v1:0")
    assert (p.context_window, p.tokenizer) == (200000, "heuristic")
    p = effective_policy(ContextPolicy(), "openai/gpt-4.1-mini")
    assert (p.context_window, p.tokenizer) == (1047576, O200K)
    p = effective_policy(ContextPolicy(), "no-such-model")
    assert (p.context_window, p.tokenizer) == (128000, "heuristic")


def test_lookups_are_cached_and_a_table_change_is_seen() -> None:
    first = lookup_model("acme-7b-chat")
    assert first is UNKNOWN_MODEL
    assert lookup_model("gpt-4o") is lookup_model("gpt-4o")
    info = ModelInfo("acme", 32768, "heuristic", model_id="acme-7b")
    install_models([ModelEntry("acme-7b", info)])
    assert lookup_model("acme-7b-chat") is info
    reset_models()
    assert lookup_model("acme-7b-chat") is UNKNOWN_MODEL


def test_install_replaces_by_id_and_keeps_aliases() -> None:
    old = lookup_model("chatgpt-4o-latest")
    info = ModelInfo("openai", 64000, O200K, model_id="gpt-4o")
    install_models([ModelEntry("GPT-4o", info, ("my-4o",))])
    assert lookup_model("gpt-4o-2024-08-06") is info
    assert lookup_model("chatgpt-4o-latest") is info
    assert lookup_model("my-4o") is info
    assert old.context_window == 128000
    assert len(model_entries()) == len(BUILTIN_MODELS)
    # the family fallbacks were not disturbed
    assert lookup_model("gpt-4o-mini").context_window == 128000


def test_cache_is_bounded() -> None:
    for i in range(5000):
        lookup_model(f"random-model-{i}")
    assert lookup_model("gpt-4o").context_window == 128000
    assert lookup_model("random-model-4999") is UNKNOWN_MODEL
    assert len(models._table.cache) <= models._CACHE_LIMIT
