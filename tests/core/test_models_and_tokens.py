"""The built-in model table, effective policies and token counting."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxwarden.core.messages import ContentBlock, ContentKind, Message, Role
from ctxwarden.core.models import DEFAULT_CONTEXT_WINDOW, UNKNOWN_MODEL, ModelInfo, lookup_model
from ctxwarden.core.session import (
    DEFAULT_KEEP_RECENT_TOKENS,
    DEFAULT_RESERVE_TOKENS,
    DEFAULT_TOOL_OUTPUT_MAX_BYTES,
    DEFAULT_TOOL_OUTPUT_MAX_LINES,
    ContextPolicy,
    EffectivePolicy,
    Session,
    effective_policy,
)
from ctxwarden.core.tokens import (
    HeuristicTokenizer,
    count_message,
    count_text,
    message_text,
    utf16_length,
)

TOK = HeuristicTokenizer()

# -- lookup_model ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("model", "provider", "window", "tokenizer"),
    [
        ("gpt-4o", "openai", 128000, "tiktoken:o200k_base"),
        ("gpt-4o-2024-08-06", "openai", 128000, "tiktoken:o200k_base"),
        ("gpt-4o-mini-2024-07-18", "openai", 128000, "tiktoken:o200k_base"),
        ("GPT-4o", "openai", 128000, "tiktoken:o200k_base"),
        ("  gpt-4o  ", "openai", 128000, "tiktoken:o200k_base"),
        ("openai/gpt-4o-2024-08-06", "openai", 128000, "tiktoken:o200k_base"),
        ("gpt-4.1-2025-04-14", "openai", 1047576, "tiktoken:o200k_base"),
        ("gpt-4.1-mini", "openai", 1047576, "tiktoken:o200k_base"),
        ("gpt-4-turbo-2024-04-09", "openai", 128000, "tiktoken:cl100k_base"),
        ("gpt-4-0613", "openai", 8192, "tiktoken:cl100k_base"),
        ("gpt-4", "openai", 8192, "tiktoken:cl100k_base"),
        ("gpt-3.5-turbo-0125", "openai", 16385, "tiktoken:cl100k_base"),
        ("gpt-5", "openai", 400000, "tiktoken:o200k_base"),
        ("gpt-5-mini-2025-08-07", "openai", 400000, "tiktoken:o200k_base"),
        ("o1-2024-12-17", "openai", 200000, "tiktoken:o200k_base"),
        ("o3-mini", "openai", 200000, "tiktoken:o200k_base"),
        ("o4-mini-2025-04-16", "openai", 200000, "tiktoken:o200k_base"),
        ("claude-sonnet-4-5", "anthropic", 200000, "heuristic"),
        ("claude-3-5-sonnet-20241022", "anthropic", 200000, "heuristic"),
        ("anthropic/claude-opus-4-1", "anthropic", 200000, "heuristic"),
        ("gemini-2.5-pro", "google", 1048576, "heuristic"),
        ("models/gemini-2.0-flash", "google", 1048576, "heuristic"),
        ("deepseek-chat", "deepseek", 128000, "heuristic"),
        ("qwen2.5-72b-instruct", "qwen", 131072, "heuristic"),
        ("meta-llama/llama-3.1-70b-instruct", "meta", 131072, "heuristic"),
        ("mistral-large-latest", "mistral", 128000, "heuristic"),
    ],
)
def test_lookup_known_models(model: str, provider: str, window: int, tokenizer: str) -> None:
    assert lookup_model(model) == ModelInfo(provider, window, tokenizer, known=True)


@pytest.mark.parametrize("model", ["", "   ", "my-local-model", "claude", "text-davinci-003", "x/"])
def test_lookup_unknown_model(model: str) -> None:
    info = lookup_model(model)
    assert info == UNKNOWN_MODEL
    assert info.known is False
    assert info.context_window == DEFAULT_CONTEXT_WINDOW == 128000
    assert info.tokenizer == "heuristic"
    assert info.provider == ""


def test_longest_prefix_wins_regardless_of_length_order() -> None:
    # "gpt-4" is a prefix of all of these, but the longer family must win.
    assert lookup_model("gpt-4o").context_window == 128000
    assert lookup_model("gpt-4.1").context_window == 1047576
    assert lookup_model("gpt-4-turbo").tokenizer == "tiktoken:cl100k_base"
    assert lookup_model("gpt-4-turbo").context_window == 128000


# -- effective_policy ------------------------------------------------------------------


def test_effective_policy_defaults_for_unknown_model() -> None:
    assert effective_policy(ContextPolicy(), "") == EffectivePolicy(
        context_window=128000,
        reserve_tokens=DEFAULT_RESERVE_TOKENS,
        keep_recent_tokens=DEFAULT_KEEP_RECENT_TOKENS,
        tool_output_max_bytes=DEFAULT_TOOL_OUTPUT_MAX_BYTES,
        tool_output_max_lines=DEFAULT_TOOL_OUTPUT_MAX_LINES,
        tokenizer="heuristic",
    )
    assert (DEFAULT_RESERVE_TOKENS, DEFAULT_KEEP_RECENT_TOKENS) == (16384, 20000)
    assert (DEFAULT_TOOL_OUTPUT_MAX_BYTES, DEFAULT_TOOL_OUTPUT_MAX_LINES) == (51200, 2000)


def test_effective_policy_takes_model_window_and_tokenizer() -> None:
    p = effective_policy(ContextPolicy(), "gpt-4o-2024-08-06")
    assert (p.context_window, p.tokenizer) == (128000, "tiktoken:o200k_base")
    p = effective_policy(ContextPolicy(), "claude-sonnet-4-5")
    assert (p.context_window, p.tokenizer) == (200000, "heuristic")


def test_effective_policy_explicit_values_win() -> None:
    policy = ContextPolicy(
        context_window=1000,
        reserve_tokens=10,
        keep_recent_tokens=20,
        tool_output_max_bytes=30,
        tool_output_max_lines=40,
        tokenizer="tiktoken:cl100k_base",
    )
    assert effective_policy(policy, "claude-sonnet-4-5") == EffectivePolicy(
        1000, 10, 20, 30, 40, "tiktoken:cl100k_base"
    )


def test_session_etag_and_deleted() -> None:
    s = Session(session_id="s", revision=7)
    assert s.etag == '"7"'
    assert not s.deleted
    assert Session(session_id="s", delete_time_us=1).deleted


# -- heuristic tokenizer ------------------------------------------------------------------


def test_heuristic_tokenizer_identity() -> None:
    assert TOK.spec == "heuristic"
    assert TOK.exact is False


@pytest.mark.parametrize(
    ("text", "tokens"),
    [("", 0), ("a", 1), ("abcd", 1), ("abcde", 2), ("x" * 8, 2), ("x" * 9, 3), ("😀😀😀😀😀", 3)],
)
def test_heuristic_count(text: str, tokens: int) -> None:
    assert TOK.count(text) == tokens
    assert count_text(text, TOK) == tokens


# -- count_message ---------------------------------------------------------------------------


def test_count_message_sums_text_thinking_tool_name_and_arguments() -> None:
    m = Message(
        Role.ASSISTANT,
        (
            ContentBlock.of_text("abc"),  # 3
            ContentBlock(ContentKind.THINKING, text="defg", signature="S" * 100),  # 4
            ContentBlock.of_tool_call("call-id-not-counted", "grep", '{"q":1}'),  # 4 + 7
        ),
    )
    assert message_text(m) == 'abcdefggrep{"q":1}'
    assert count_message(m, TOK) == math.ceil(18 / 4) == 5


def test_count_is_over_the_concatenation_not_per_block() -> None:
    # three blocks of one character each cost ceil(3/4) = 1, not 3
    m = Message(Role.USER, tuple(ContentBlock.of_text(c) for c in "abc"))
    assert count_message(m, TOK) == 1


def test_images_cost_a_flat_1200_each() -> None:
    img = ContentBlock(ContentKind.IMAGE, mime_type="image/png", data=b"\x00" * 100_000)
    assert count_message(Message(Role.USER, (img,)), TOK) == 1200
    m = Message(Role.USER, (ContentBlock.of_text("x" * 5), img, img))
    assert count_message(m, TOK) == 2 + 2400
    assert message_text(m) == "x" * 5


def test_message_level_fields_are_not_charged() -> None:
    m = Message(
        Role.TOOL_RESULT,
        (ContentBlock.of_text("abcd"),),
        tool_call_id="long-call-id",
        tool_name="long_tool_name",
        error_message="some error",
        metadata={"k": "v" * 100},
    )
    assert count_message(m, TOK) == 1


def test_empty_message_costs_nothing() -> None:
    assert count_message(Message(Role.ASSISTANT), TOK) == 0


_BLOCK = st.one_of(
    st.builds(ContentBlock.of_text, st.text(max_size=40)),
    st.builds(
        lambda t, s: ContentBlock(ContentKind.THINKING, text=t, signature=s),
        st.text(max_size=40),
        st.text(max_size=10),
    ),
    st.builds(
        ContentBlock.of_tool_call,
        st.text(max_size=10),
        st.text(max_size=20),
        st.text(max_size=40),
    ),
    st.builds(
        lambda d: ContentBlock(ContentKind.IMAGE, mime_type="image/png", data=d),
        st.binary(max_size=20),
    ),
)


@settings(max_examples=200, deadline=None)
@given(blocks=st.lists(_BLOCK, max_size=8))
def test_count_message_matches_formula(blocks: list[ContentBlock]) -> None:
    chars = 0
    images = 0
    for b in blocks:
        if b.kind in (ContentKind.TEXT, ContentKind.THINKING):
            chars += utf16_length(b.text)
        elif b.kind is ContentKind.TOOL_CALL:
            chars += utf16_length(b.tool_name) + utf16_length(b.arguments_json)
        else:
            images += 1
    m = Message(Role.ASSISTANT, tuple(blocks))
    assert count_message(m, TOK) == math.ceil(chars / 4) + 1200 * images
