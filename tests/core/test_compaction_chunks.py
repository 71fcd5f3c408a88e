"""The chunk planner: a history too long for the summariser's window is
compacted in steps whose prompts all fit, chained by the running summary."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxwarden.core.compaction.chunks import (
    TRUNCATED_MARKER,
    SummaryWindow,
    fit_file_lists,
    take_chunk,
    truncate_middle,
)
from ctxwarden.core.compaction.cut import find_cut_point, is_cut_point
from ctxwarden.core.compaction.fileops import render_file_lists
from ctxwarden.core.compaction.planner import Plan, plan_compaction
from ctxwarden.core.compaction.prompts import NEW_SUMMARY, UPDATE_SUMMARY
from ctxwarden.core.compaction.serialize import serialize_messages, serialized_parts
from ctxwarden.core.compaction.steps import after_step, step_plan
from ctxwarden.core.compaction.terms import PlanTerms
from ctxwarden.core.compaction.types import FileLists, FileToolNames
from ctxwarden.core.context import SessionContext
from ctxwarden.core.errors import FailedPrecondition
from ctxwarden.core.reasons import ErrorReason
from ctxwarden.core.session import Checkpoint, CompactionTrigger
from tests.core.test_compaction_planner import (
    TOK,
    answer,
    append,
    call,
    failure,
    new_ctx,
    result,
    user,
)

WINDOW_MARKER = TRUNCATED_MARKER.split("{count}")[1].strip()


def window_of(tokens: int) -> SummaryWindow:
    return SummaryWindow(tokens, TOK.count)


def plan_for(
    ctx: SessionContext, keep: int, window: SummaryWindow | None, pinned: str = ""
) -> Plan:
    return plan_compaction(
        session_id="s",
        active=ctx.active_messages,
        checkpoint=ctx.checkpoint,
        at_seq=ctx.session.last_seq,
        tokens_before=ctx.view_tokens(),
        keep_recent_tokens=keep,
        reserve_tokens=ctx.policy.reserve_tokens,
        summarizer_limit=0,
        pinned_state=pinned,
        instructions="",
        file_tools=FileToolNames(),
        window=window,
    )


def run_chunked(
    ctx: SessionContext, keep: int, window: SummaryWindow, pinned: str = ""
) -> list[Plan]:
    """Every step's plan of a chunked compaction (as the agent sees them),
    answered with summaries that name their step; the last one is committed."""
    first = plan_for(ctx, keep, window, pinned)
    if first.chunks is None:
        plans = [first]
    else:
        terms = PlanTerms.of(first, CompactionTrigger.MANUAL)
        plans = [step_plan("s", terms, ctx, window, pinned)]
        while not terms.final_step:
            terms = after_step(terms, f"SUMMARY-{terms.step}", window)
            plans.append(step_plan("s", terms, ctx, window, pinned))
    last = plans[-1]
    checkpoint = Checkpoint(
        compaction_id="c",
        session_id="s",
        summary=f"SUMMARY-{len(plans)}",
        first_kept_seq=last.first_kept_seq,
        tokens_before=last.tokens_before,
        create_time_us=1,
        turn_prefix_summary="PREFIX" if last.split_turn else "",
        split_turn=last.split_turn,
        read_files=last.files.read,
        modified_files=last.files.modified,
        at_seq=ctx.session.last_seq,
    )
    ctx.apply_checkpoint(checkpoint)
    return plans


# -- transcripts -------------------------------------------------------------------------------

SIZES = st.integers(min_value=1, max_value=3000)
TURN = st.tuples(
    SIZES,  # user text
    st.lists(st.tuples(SIZES, SIZES, st.booleans()), max_size=4),  # calls: args, result, failed
    SIZES,  # final answer
)


def build_transcript(
    ctx: SessionContext, turns: list[tuple[int, list[tuple[int, int, bool]], int]]
) -> None:
    n = 0
    for user_size, calls, answer_size in turns:
        append(ctx, user(f"u{n} " + "x" * user_size))
        for args_size, result_size, failed in calls:
            n += 1
            cid = f"c{n}"
            args = json.dumps({"path": f"f{n}", "pad": "y" * args_size})
            if failed:
                append(ctx, failure((cid, "read", args)))
                continue
            append(ctx, call("", (cid, "read", args)))
            append(ctx, result(cid, f"r{n} " + "z" * result_size, name="read"))
        append(ctx, answer(f"a{n} " + "w" * answer_size))
        n += 1


# -- properties --------------------------------------------------------------------------------


@settings(max_examples=40, deadline=None)
@given(
    turns=st.lists(TURN, min_size=2, max_size=40),
    window=st.integers(min_value=2500, max_value=12000),
    keep=st.integers(min_value=50, max_value=2000),
    pinned=st.sampled_from(["", "task: ship it"]),
)
def test_chunked_compaction_fits_every_prompt_and_covers_the_planned_cut(
    turns: list[tuple[int, list[tuple[int, int, bool]], int]], window: int, keep: int, pinned: str
) -> None:
    ctx = new_ctx(reserve_tokens=4000, context_window=10_000_000)
    build_transcript(ctx, turns)
    unlimited = new_ctx(reserve_tokens=4000, context_window=10_000_000)
    build_transcript(unlimited, turns)
    expected_cut = find_cut_point(unlimited.active_messages, keep)
    if expected_cut.first_kept_index == 0:
        return
    expected_first_kept = unlimited.active_messages[expected_cut.first_kept_index].seq
    w = window_of(window)
    start = ctx.active_messages[0].seq
    plans = run_chunked(ctx, keep, w, pinned)

    covered = start
    for i, plan in enumerate(plans):
        assert plan.first_kept_seq == expected_first_kept
        for prompt in (plan.history_prompt, plan.turn_prefix_prompt):
            if prompt is not None:
                assert w.prompt_tokens(prompt) <= window
        if plan.history:
            # Steps cover consecutive ranges, each starting where the last one stopped.
            assert plan.history[0].seq == covered
            covered = plan.summarized_to_seq + 1
        if i < len(plans) - 1:
            assert plan.turn_prefix_prompt is None
            kept = next(m for m in unlimited.active_messages if m.seq == plan.chunk_end_seq)
            assert is_cut_point(kept)
        # The running summary: each step updates the one before.
        if i > 0:
            assert plan.previous_summary == f"SUMMARY-{i}"
            assert plan.history_prompt is not None
            assert UPDATE_SUMMARY in plan.history_prompt.user
            assert f"<previous-summary>\nSUMMARY-{i}\n" in plan.history_prompt.user
    assert plans[-1].summarized_to_seq == expected_first_kept - 1
    assert ctx.first_kept_seq == expected_first_kept


@settings(max_examples=60, deadline=None)
@given(turns=st.lists(TURN, min_size=2, max_size=12), keep=st.integers(min_value=50, max_value=800))
def test_a_history_that_fits_one_prompt_is_planned_exactly_as_without_a_window(
    turns: list[tuple[int, list[tuple[int, int, bool]], int]], keep: int
) -> None:
    ctx = new_ctx(reserve_tokens=2000, context_window=10_000_000)
    build_transcript(ctx, turns)
    if find_cut_point(ctx.active_messages, keep).first_kept_index == 0:
        return
    plain = plan_for(ctx, keep, None)
    huge = plan_for(ctx, keep, window_of(10_000_000))
    assert huge.chunks is None
    assert replace(huge, context_window=0) == plain


@settings(max_examples=100, deadline=None)
@given(
    sizes=st.lists(st.integers(min_value=0, max_value=5000), min_size=1, max_size=30),
    room=st.integers(min_value=64, max_value=3000),
)
def test_take_chunk_fits_its_room_and_ends_before_a_cut_point(sizes: list[int], room: int) -> None:
    ctx = new_ctx()
    for i, size in enumerate(sizes):
        if i % 3 == 1:
            append(ctx, call("", (f"c{i}", "read", "{}")))
            append(ctx, result(f"c{i}", "r" * size, name="read"))
        else:
            append(ctx, user("u" * (size + 1)))
    history = ctx.active_messages
    chunk = take_chunk(history, room, TOK.count)
    assert 0 < chunk.end <= len(history)
    assert chunk.end == len(history) or is_cut_point(history[chunk.end])
    if chunk.truncated:
        assert WINDOW_MARKER in chunk.conversation
        assert TOK.count(chunk.conversation) <= room
    else:
        assert chunk.conversation == serialize_messages(history[: chunk.end])
        # Nothing was left out that would have fitted: the next cut point's prefix does not.
        later = [i for i in range(chunk.end + 1, len(history)) if is_cut_point(history[i])]
        if chunk.end < len(history):
            nxt = later[0] if later else len(history)
            parts = [p for p in serialized_parts(history[:nxt]) if p]
            assert sum(TOK.count(p) for p in parts) + len(parts) - 1 > room


@given(text=st.text(min_size=0, max_size=4000), room=st.integers(min_value=64, max_value=2000))
def test_truncate_middle_keeps_both_ends_within_the_room(text: str, room: int) -> None:
    cut, changed = truncate_middle(text, room, TOK.count)
    assert TOK.count(cut) <= room
    assert changed == (TOK.count(text) > room)
    if not changed:
        assert cut == text
    elif len(text) > 200 and room > 200:
        assert cut.startswith(text[:10]) and cut.endswith(text[-10:])


def test_serialized_parts_join_to_serialize_messages() -> None:
    ctx = new_ctx()
    build_transcript(ctx, [(5, [(3, 4, False), (2, 2, True), (1, 1, False)], 6), (2, [], 3)])
    parts = list(serialized_parts(ctx.active_messages))
    assert len(parts) == len(ctx.active_messages)
    assert "\n\n".join(p for p in parts if p) == serialize_messages(ctx.active_messages)
    assert "" in parts  # the failed call


# -- examples ------------------------------------------------------------------------------------


def test_one_message_larger_than_the_window_is_shown_truncated() -> None:
    ctx = new_ctx(reserve_tokens=2000, context_window=10_000_000)
    append(ctx, user("start"), answer("ok"))
    append(ctx, user("HEAD " + "q" * 200_000 + " TAIL"), answer("seen"))
    append(ctx, user("recent " * 50), answer("fine " * 50))
    w = window_of(8000)
    plans = run_chunked(ctx, 100, w)
    assert len(plans) >= 2
    texts = [p.history_prompt.user for p in plans if p.history_prompt]
    huge = next(t for t in texts if "HEAD" in t)
    assert WINDOW_MARKER in huge and "TAIL" in huge
    assert all(w.prompt_tokens(p.history_prompt) <= 8000 for p in plans if p.history_prompt)
    assert NEW_SUMMARY in texts[0] and all(UPDATE_SUMMARY in t for t in texts[1:])


def test_a_window_too_small_for_the_fixed_prompt_is_failed_precondition() -> None:
    ctx = new_ctx(reserve_tokens=2000, context_window=10_000_000)
    append(ctx, *(m for i in range(20) for m in (user(f"u{i} " * 40), answer(f"a{i} " * 40))))
    with pytest.raises(FailedPrecondition) as caught:
        plan_for(ctx, 50, window_of(600), pinned="p" * 4000)
    assert caught.value.reason is ErrorReason.SUMMARIZER_WINDOW_TOO_SMALL
    assert "600 tokens" in str(caught.value)


def test_the_step_count_is_exact() -> None:
    ctx = new_ctx(reserve_tokens=2000, context_window=10_000_000)
    append(ctx, *(m for i in range(300) for m in (user(f"u{i} " * 30), answer(f"a{i} " * 30))))
    first = plan_for(ctx, 200, window_of(6000))
    assert first.chunks is not None
    plans = run_chunked(ctx, 200, window_of(6000))
    assert len(plans) == len(first.chunks.starts) > 3


def test_a_long_answer_is_trimmed_so_the_next_prompt_still_fits() -> None:
    ctx = new_ctx(reserve_tokens=2000, context_window=10_000_000)
    append(ctx, *(m for i in range(300) for m in (user(f"u{i} " * 30), answer(f"a{i} " * 30))))
    w = window_of(6000)
    terms = PlanTerms.of(plan_for(ctx, 200, w), CompactionTrigger.MANUAL)
    terms = after_step(terms, "long " * 20_000, w)
    assert TOK.count(terms.running_summary) <= terms.chunk_max_tokens
    nxt = step_plan("s", terms, ctx, w, "")
    assert nxt.history_prompt is not None and w.prompt_tokens(nxt.history_prompt) <= 6000


def test_messages_keep_their_order_and_appear_exactly_once() -> None:
    ctx = new_ctx(reserve_tokens=2000, context_window=10_000_000)
    pad = "x" * 40
    append(ctx, *(m for i in range(200) for m in (user(f"<u{i}>{pad}"), answer(f"<a{i}>{pad}"))))
    plans = run_chunked(ctx, 10, window_of(3000))
    prompts = [q for p in plans for q in (p.history_prompt, p.turn_prefix_prompt) if q]
    seen = "".join(q.user for q in prompts)
    assert len(plans) > 3
    summarized = plans[-1].first_kept_seq // 2  # u<i> is seq 2i+1: the first one kept
    assert f"<u{summarized}>" not in seen
    for i in range(summarized - 1):
        assert seen.count(f"<u{i}>") == 1 and seen.count(f"<a{i}>") == 1
        assert seen.index(f"<u{i}>") < seen.index(f"<a{i}>") < seen.index(f"<u{i + 1}>")


def test_file_lists_in_a_chunked_prompt_take_at_most_an_eighth_of_the_window() -> None:
    files = FileLists(
        tuple(f"src/read_{i}.py" for i in range(5000)),
        tuple(f"src/edit_{i}.py" for i in range(3000)),
    )
    w = window_of(8000)
    shown = fit_file_lists(files, w)
    assert TOK.count(render_file_lists(shown)) <= 1000
    assert shown.read[-1].startswith("[ctxwarden: ") and "more files not listed" in shown.read[-1]
    listed = len(shown.read) + len(shown.modified) - 2
    assert shown.read[-1] == f"[ctxwarden: {8000 - listed} more files not listed]"
    assert set(shown.read[:-1]) <= set(files.read)
    small = FileLists(("a.py",), ("b.py",))
    assert fit_file_lists(small, w) == small
