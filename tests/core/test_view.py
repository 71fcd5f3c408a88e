"""Unit tests of the model-input view: make_entry and build_view."""

from __future__ import annotations

import re
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxwarden.core.messages import ContentBlock, ContentKind, Message, Role, StopReason
from ctxwarden.core.session import ContextPolicy, EffectivePolicy, effective_policy
from ctxwarden.core.tokens import HeuristicTokenizer, count_message, count_text
from ctxwarden.core.view import (
    FAILED_MESSAGE_OMITTED,
    ORPHANED_TOOL_RESULT_OMITTED,
    SYNTHETIC_METADATA_KEY,
    SYNTHETIC_RESULT_TEXT,
    SYNTHETIC_TOOL_RESULT,
    TOOL_OUTPUT_TRUNCATED,
    Notice,
    View,
    ViewEntry,
    build_view,
    make_entry,
)

TOK = HeuristicTokenizer()
POLICY = effective_policy(ContextPolicy(), "")
SYN = count_text(SYNTHETIC_RESULT_TEXT, TOK)
MARKER = "\n\n[ctxwarden: output truncated:"


# -- builders ---------------------------------------------------------------


def _counted(m: Message) -> Message:
    return replace(m, token_count=count_message(m, TOK))


def user(seq: int, text: str = "hello") -> Message:
    return _counted(
        Message(Role.USER, (ContentBlock.of_text(text),), seq=seq, message_id=f"m{seq}")
    )


def assistant(
    seq: int,
    *call_ids: str,
    stop: StopReason = StopReason.STOP,
    error: str = "",
    text: str = "answer",
) -> Message:
    blocks = [ContentBlock.of_text(text)] if text else []
    blocks += [ContentBlock.of_tool_call(c, f"tool_{c}", '{"x": 1}') for c in call_ids]
    if call_ids and stop is StopReason.STOP:
        stop = StopReason.TOOL_USE
    return _counted(
        Message(
            Role.ASSISTANT,
            tuple(blocks),
            seq=seq,
            message_id=f"m{seq}",
            stop_reason=stop,
            error_message=error,
        )
    )


def failed(seq: int, *call_ids: str, error: str = "boom") -> Message:
    return assistant(seq, *call_ids, stop=StopReason.ERROR, error=error, text="")


def result(seq: int, call_id: str, text: str = "ok") -> Message:
    return _counted(
        Message(
            Role.TOOL_RESULT,
            (ContentBlock.of_text(text),),
            seq=seq,
            message_id=f"m{seq}",
            tool_call_id=call_id,
            tool_name=f"tool_{call_id}",
        )
    )


def policy(max_bytes: int = 51200, max_lines: int = 2000) -> EffectivePolicy:
    return effective_policy(
        ContextPolicy(tool_output_max_bytes=max_bytes, tool_output_max_lines=max_lines), ""
    )


def entries(*msgs: Message, pol: EffectivePolicy = POLICY) -> list[ViewEntry]:
    return [make_entry(m, pol, TOK) for m in msgs]


def view(*msgs: Message, pol: EffectivePolicy = POLICY) -> View:
    return build_view(entries(*msgs, pol=pol), SYN)


def is_synthetic(m: Message) -> bool:
    return m.metadata.get(SYNTHETIC_METADATA_KEY) == "true"


def codes(v: View) -> list[str]:
    return [n.code for n in v.notices]


def shape(v: View) -> list[str]:
    """A compact picture of the view: 'u1', 'a2', 'r3:c1', 's:c2' (synthetic)."""
    out = []
    for m in v.messages:
        if is_synthetic(m):
            out.append(f"s:{m.tool_call_id}")
        elif m.role is Role.TOOL_RESULT:
            out.append(f"r{m.seq}:{m.tool_call_id}")
        elif m.role is Role.USER:
            out.append(f"u{m.seq}")
        else:
            out.append(f"a{m.seq}")
    return out


# -- basics -----------------------------------------------------------------


def test_empty_view() -> None:
    assert build_view([], SYN) == View((), (), 0)


def test_clean_conversation_passes_through_unchanged() -> None:
    msgs = (user(1), assistant(2, "c1"), result(3, "c1"), assistant(4), user(5))
    v = view(*msgs)
    assert v.messages == msgs
    assert v.notices == ()
    assert v.message_tokens == sum(m.token_count for m in msgs)


def test_message_tokens_come_from_entries_not_messages() -> None:
    m = user(1)
    v = build_view([ViewEntry(m, 777)], SYN)
    assert v.message_tokens == 777


# -- failed assistant messages ------------------------------------------------


@pytest.mark.parametrize("stop", [StopReason.ERROR, StopReason.ABORTED])
def test_failed_assistant_message_is_omitted_with_notice(stop: StopReason) -> None:
    bad = assistant(2, stop=stop, error="provider exploded")
    v = view(user(1), bad, user(3))
    assert shape(v) == ["u1", "u3"]
    assert v.notices == (
        Notice(FAILED_MESSAGE_OMITTED, 2, "failed assistant message: provider exploded"),
    )
    assert v.message_tokens == user(1).token_count + user(3).token_count


@pytest.mark.parametrize(
    ("stop", "word"), [(StopReason.ERROR, "error"), (StopReason.ABORTED, "aborted")]
)
def test_failed_notice_without_error_message_names_stop_reason(stop: StopReason, word: str) -> None:
    v = view(user(1), assistant(2, stop=stop, text=""))
    assert v.notices == (Notice(FAILED_MESSAGE_OMITTED, 2, f"failed assistant message: {word}"),)


@pytest.mark.parametrize(
    "stop", [StopReason.UNSPECIFIED, StopReason.STOP, StopReason.LENGTH, StopReason.TOOL_USE]
)
def test_non_failed_stop_reasons_are_kept(stop: StopReason) -> None:
    m = assistant(2, stop=stop)
    assert view(user(1), m).messages == (user(1), m)


def test_results_of_failed_message_are_omitted_as_orphans() -> None:
    v = view(user(1), failed(2, "c1", "c2"), result(3, "c1"), result(4, "c2"), user(5))
    assert shape(v) == ["u1", "u5"]
    assert codes(v) == [
        FAILED_MESSAGE_OMITTED,
        ORPHANED_TOOL_RESULT_OMITTED,
        ORPHANED_TOOL_RESULT_OMITTED,
    ]
    assert [n.seq for n in v.notices] == [2, 3, 4]
    assert "'c1'" in v.notices[1].detail
    # no synthetic results are made up for calls of a failed message
    assert not any(is_synthetic(m) for m in v.messages)


def test_failed_message_with_unanswered_calls_gets_no_synthetic_results() -> None:
    v = view(user(1), failed(2, "c1"))
    assert shape(v) == ["u1"]
    assert codes(v) == [FAILED_MESSAGE_OMITTED]


def test_failed_message_does_not_close_open_calls() -> None:
    v = view(user(1), assistant(2, "c1"), failed(3), result(4, "c1"))
    assert shape(v) == ["u1", "a2", "r4:c1"]
    assert codes(v) == [FAILED_MESSAGE_OMITTED]


def test_failed_message_between_call_and_user_still_gets_synthetic_after_assistant() -> None:
    v = view(user(1), assistant(2, "c1"), failed(3), user(4))
    assert shape(v) == ["u1", "a2", "s:c1", "u4"]
    assert codes(v) == [FAILED_MESSAGE_OMITTED, SYNTHETIC_TOOL_RESULT]


def test_retry_after_failure_keeps_only_successful_answer() -> None:
    v = view(user(1), failed(2, error="429"), failed(3, error="429"), assistant(4))
    assert shape(v) == ["u1", "a4"]
    assert [n.seq for n in v.notices] == [2, 3]


# -- orphaned results -----------------------------------------------------------


def test_result_for_unknown_call_is_omitted() -> None:
    v = view(user(1), result(2, "nope"))
    assert shape(v) == ["u1"]
    assert v.notices == (
        Notice(
            ORPHANED_TOOL_RESULT_OMITTED,
            2,
            "tool result for call 'nope' has no matching call in the view",
        ),
    )
    assert v.message_tokens == user(1).token_count


def test_second_result_for_same_call_is_omitted() -> None:
    v = view(user(1), assistant(2, "c1"), result(3, "c1"), result(4, "c1"))
    assert shape(v) == ["u1", "a2", "r3:c1"]
    assert codes(v) == [ORPHANED_TOOL_RESULT_OMITTED]
    assert v.notices[0].seq == 4


def test_late_result_after_user_message_is_omitted() -> None:
    v = view(user(1), assistant(2, "c1"), user(3), result(4, "c1"))
    assert shape(v) == ["u1", "a2", "s:c1", "u3"]
    assert codes(v) == [SYNTHETIC_TOOL_RESULT, ORPHANED_TOOL_RESULT_OMITTED]
    assert [n.seq for n in v.notices] == [2, 4]


def test_late_result_after_later_assistant_message_is_omitted() -> None:
    v = view(user(1), assistant(2, "c1"), assistant(3, "c2"), result(4, "c1"), result(5, "c2"))
    assert shape(v) == ["u1", "a2", "s:c1", "a3", "r5:c2"]
    assert codes(v) == [SYNTHETIC_TOOL_RESULT, ORPHANED_TOOL_RESULT_OMITTED]


def test_orphan_between_results_does_not_break_the_run() -> None:
    v = view(user(1), assistant(2, "c1", "c2"), result(3, "c1"), result(4, "zz"), result(5, "c2"))
    assert shape(v) == ["u1", "a2", "r3:c1", "r5:c2"]
    assert codes(v) == [ORPHANED_TOOL_RESULT_OMITTED]


# -- synthetic results ----------------------------------------------------------


def test_missing_result_before_user_gets_synthetic_after_existing_results() -> None:
    a = assistant(2, "c1", "c2", "c3")
    v = view(user(1), a, result(3, "c2"), user(4))
    assert shape(v) == ["u1", "a2", "r3:c2", "s:c1", "s:c3", "u4"]
    synth = v.messages[3]
    assert synth == Message(
        role=Role.TOOL_RESULT,
        content=(ContentBlock.of_text(SYNTHETIC_RESULT_TEXT),),
        tool_call_id="c1",
        tool_name="tool_c1",
        is_error=True,
        token_count=SYN,
        metadata={SYNTHETIC_METADATA_KEY: "true"},
    )
    assert synth.seq == 0
    assert synth.text == "No result provided"
    assert codes(v) == [SYNTHETIC_TOOL_RESULT, SYNTHETIC_TOOL_RESULT]
    assert [n.seq for n in v.notices] == [2, 2]
    assert "'c1'" in v.notices[0].detail
    assert "tool_c1" in v.notices[0].detail
    assert "'c3'" in v.notices[1].detail


def test_missing_result_before_next_assistant_gets_synthetic() -> None:
    v = view(user(1), assistant(2, "c1"), assistant(3))
    assert shape(v) == ["u1", "a2", "s:c1", "a3"]
    assert codes(v) == [SYNTHETIC_TOOL_RESULT]


def test_trailing_pending_calls_get_synthetic_results() -> None:
    v = view(user(1), assistant(2, "c1", "c2"), result(3, "c1"))
    assert shape(v) == ["u1", "a2", "r3:c1", "s:c2"]
    v = view(user(1), assistant(2, "c1", "c2"))
    assert shape(v) == ["u1", "a2", "s:c1", "s:c2"]
    assert all(n.code == SYNTHETIC_TOOL_RESULT and n.seq == 2 for n in v.notices)


def test_synthetic_results_are_charged_synthetic_tokens() -> None:
    msgs = (user(1), assistant(2, "c1", "c2"))
    stored = sum(m.token_count for m in msgs)
    assert build_view(entries(*msgs), SYN).message_tokens == stored + 2 * SYN
    v = build_view(entries(*msgs), 11)
    assert v.message_tokens == stored + 22
    assert all(m.token_count == 11 for m in v.messages if is_synthetic(m))


def test_results_out_of_call_order_are_kept_in_arrival_order() -> None:
    v = view(user(1), assistant(2, "c1", "c2"), result(3, "c2"), result(4, "c1"))
    assert shape(v) == ["u1", "a2", "r3:c2", "r4:c1"]
    assert v.notices == ()


def test_every_call_gets_exactly_one_result_in_a_messy_history() -> None:
    msgs = (
        user(1),
        assistant(2, "a", "b"),
        result(3, "b"),
        failed(4, "c"),
        result(5, "c"),
        result(6, "a"),
        result(7, "a"),
        assistant(8, "d"),
        user(9),
        result(10, "d"),
        assistant(11, "e"),
    )
    v = view(*msgs)
    assert shape(v) == ["u1", "a2", "r3:b", "r6:a", "a8", "s:d", "u9", "a11", "s:e"]
    assert codes(v) == [
        FAILED_MESSAGE_OMITTED,
        ORPHANED_TOOL_RESULT_OMITTED,
        ORPHANED_TOOL_RESULT_OMITTED,
        SYNTHETIC_TOOL_RESULT,
        ORPHANED_TOOL_RESULT_OMITTED,
        SYNTHETIC_TOOL_RESULT,
    ]
    assert [n.seq for n in v.notices] == [4, 5, 7, 8, 10, 11]


def test_build_view_is_deterministic() -> None:
    msgs = (
        user(1),
        assistant(2, "a", "b"),
        result(3, "b", "x" * 100),
        failed(4, "c"),
        result(5, "c"),
        user(6),
    )
    es = entries(*msgs, pol=policy(max_bytes=10))
    first = build_view(es, SYN)
    second = build_view(es, SYN)
    assert first == second
    # Deliberately outside the declared Sequence: one pass is enough without keep_tool_results.
    assert build_view(iter(es), SYN) == first  # type: ignore[arg-type]
    assert entries(*msgs, pol=policy(max_bytes=10)) == es


# -- truncation ---------------------------------------------------------------------


def split_marker(text: str) -> tuple[str, str]:
    idx = text.index(MARKER)
    return text[:idx], text[idx:]


def test_non_tool_results_are_never_truncated() -> None:
    pol = policy(max_bytes=5, max_lines=1)
    for m in (user(1, "x" * 100 + "\n" * 10), assistant(2, text="y" * 100)):
        entry = make_entry(m, pol, TOK)
        assert entry == ViewEntry(m, m.token_count)


def test_small_tool_result_is_untouched() -> None:
    m = result(7, "c1", "fine")
    entry = make_entry(m, POLICY, TOK)
    assert entry == ViewEntry(m, m.token_count, None)
    assert entry.message is m


def test_output_exactly_at_limits_is_not_truncated() -> None:
    m = result(7, "c1", "abcd\nefgh")
    assert make_entry(m, policy(max_bytes=9, max_lines=2), TOK).notice is None
    m = result(7, "c1", "ab\ncd\n")
    assert make_entry(m, policy(max_bytes=6, max_lines=2), TOK).notice is None


def test_output_over_byte_limit_is_cut_to_preview() -> None:
    text = "0123456789" * 10
    m = result(42, "c1", text)
    entry = make_entry(m, policy(max_bytes=25), TOK)
    cut = entry.message
    preview, marker = split_marker(cut.text)
    assert preview == text[:25]
    assert "100 bytes" in marker
    assert "seq 42" in marker
    assert marker == (
        "\n\n[ctxwarden: output truncated: showing 25 of 100 bytes, 1 of 1 lines. "
        "The full output is stored as message seq 42.]"
    )
    assert entry.notice == Notice(
        TOOL_OUTPUT_TRUNCATED, 42, "tool output of 100 bytes / 1 lines cut to 25 bytes / 1 lines"
    )
    assert entry.token_count == count_message(cut, TOK)
    # identity of the message is kept; only the content changes
    assert (cut.seq, cut.message_id, cut.tool_call_id, cut.tool_name, cut.role) == (
        42,
        "m42",
        "c1",
        "tool_c1",
        Role.TOOL_RESULT,
    )
    # the stored message is untouched
    assert m.text == text


def test_output_just_over_byte_limit_is_truncated() -> None:
    entry = make_entry(result(3, "c1", "abcdefghij"), policy(max_bytes=9), TOK)
    assert entry.notice is not None
    assert split_marker(entry.message.text)[0] == "abcdefghi"


def test_output_over_line_limit_is_cut_to_first_lines() -> None:
    text = "".join(f"line {i}\n" for i in range(10))
    entry = make_entry(result(5, "c1", text), policy(max_lines=3), TOK)
    preview, marker = split_marker(entry.message.text)
    assert preview == "line 0\nline 1\nline 2\n"
    total = len(text.encode())
    assert f"showing {len(preview)} of {total} bytes, 3 of 10 lines" in marker
    assert "seq 5" in marker
    assert entry.notice is not None
    assert entry.notice.code == TOOL_OUTPUT_TRUNCATED
    assert entry.notice.seq == 5


def test_line_and_byte_limits_combine() -> None:
    text = "aaaa\nbbbb\ncccc\ndddd\n"
    entry = make_entry(result(5, "c1", text), policy(max_bytes=7, max_lines=3), TOK)
    assert split_marker(entry.message.text)[0] == "aaaa\nbb"


@pytest.mark.parametrize(
    ("text", "max_bytes", "expected"),
    [
        ("é" * 100, 51, "é" * 25),  # 2-byte chars, odd budget
        ("é" * 100, 50, "é" * 25),
        ("€" * 50, 8, "€" * 2),  # 3-byte chars
        ("€" * 50, 9, "€" * 3),
        ("😀" * 20, 7, "😀"),  # 4-byte chars
        ("😀" * 20, 3, ""),
        ("a😀b€c" * 20, 6, "a😀b"),
        ("a😀b€c" * 20, 8, "a😀b"),
        ("a😀b€c" * 20, 9, "a😀b€"),
    ],
)
def test_multibyte_utf8_is_never_split(text: str, max_bytes: int, expected: str) -> None:
    entry = make_entry(result(9, "c1", text), policy(max_bytes=max_bytes), TOK)
    preview, marker = split_marker(entry.message.text)
    assert preview == expected
    assert f"showing {len(expected.encode())} of {len(text.encode())} bytes" in marker
    entry.message.text.encode("utf-8")  # well-formed


def test_truncation_keeps_non_text_blocks_and_joins_text_blocks() -> None:
    image = ContentBlock(ContentKind.IMAGE, mime_type="image/png", data=b"\x89PNG")
    m = Message(
        Role.TOOL_RESULT,
        (ContentBlock.of_text("x" * 30), image, ContentBlock.of_text("y" * 30)),
        seq=4,
        message_id="m4",
        tool_call_id="c1",
        is_error=True,
    )
    entry = make_entry(m, policy(max_bytes=40), TOK)
    cut = entry.message
    assert cut.content[1:] == (image,)
    assert cut.content[0].kind is ContentKind.TEXT
    assert split_marker(cut.content[0].text)[0] == "x" * 30 + "y" * 10
    assert "of 60 bytes" in cut.content[0].text
    assert cut.is_error
    assert entry.token_count == count_message(cut, TOK)


def test_truncated_result_in_view_carries_notice_after_the_message() -> None:
    es = entries(user(1), assistant(2, "c1"), result(3, "c1", "z" * 500), pol=policy(max_bytes=10))
    v = build_view(es, SYN)
    assert shape(v) == ["u1", "a2", "r3:c1"]
    assert v.messages[2] == es[2].message
    assert codes(v) == [TOOL_OUTPUT_TRUNCATED]
    assert v.notices[0].seq == 3
    assert v.message_tokens == es[0].token_count + es[1].token_count + es[2].token_count
    assert es[2].token_count < count_message(result(3, "c1", "z" * 500), TOK)


def test_truncated_orphan_reports_only_the_omission() -> None:
    v = view(user(1), result(2, "nope", "z" * 500), pol=policy(max_bytes=10))
    assert codes(v) == [ORPHANED_TOOL_RESULT_OMITTED]


def test_make_entry_is_deterministic() -> None:
    m = result(3, "c1", "é" * 1000 + "\n" * 5000)
    pol = policy(max_bytes=333, max_lines=7)
    assert make_entry(m, pol, TOK) == make_entry(m, pol, TOK)


_ALPHABET = st.sampled_from(["a", "b", "é", "€", "😀", "\n", "\r", "\r\n", " ", "\u2028"])
_TEXT = st.lists(_ALPHABET, max_size=120).map("".join)


@settings(max_examples=200, deadline=None)
@given(text=_TEXT, max_bytes=st.integers(1, 80), max_lines=st.integers(1, 8))
def test_preview_is_longest_valid_prefix(text: str, max_bytes: int, max_lines: int) -> None:
    m = result(11, "c1", text)
    pol = policy(max_bytes=max_bytes, max_lines=max_lines)
    entry = make_entry(m, pol, TOK)
    total_bytes = len(text.encode())
    total_lines = len(text.splitlines())
    if total_bytes <= max_bytes and total_lines <= max_lines:
        assert entry == ViewEntry(m, m.token_count)
        return
    preview, marker = split_marker(entry.message.text)
    assert text.startswith(preview)
    shown = len(preview.encode())
    assert shown <= max_bytes
    assert len(preview.splitlines()) <= max_lines
    # maximal: the next character would break one of the limits
    nxt = preview + text[len(preview)]
    assert len(nxt.encode()) > max_bytes or len(nxt.splitlines()) > max_lines
    match = re.fullmatch(
        r"\n\n\[ctxwarden: output truncated: showing (\d+) of (\d+) bytes, (\d+) of (\d+) "
        r"lines\. The full output is stored as message seq 11\.\]",
        marker,
    )
    assert match is not None
    assert [int(g) for g in match.groups()] == [
        shown,
        total_bytes,
        len(preview.splitlines()),
        total_lines,
    ]
    assert entry.notice is not None
    assert entry.notice.code == TOOL_OUTPUT_TRUNCATED
    assert entry.token_count == count_message(entry.message, TOK)
