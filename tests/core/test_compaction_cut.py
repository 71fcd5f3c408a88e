"""Unit tests of ``find_cut_point``: where a compaction cuts the kept history."""

from __future__ import annotations

from dataclasses import replace

import pytest

from ctxwarden.core.compaction.cut import CutPoint, find_cut_point
from ctxwarden.core.messages import ContentBlock, Message, Role, StopReason

# Messages carry explicit token counts: find_cut_point only sums stored counts.


def u(tokens: int = 10) -> Message:
    return Message(Role.USER, (ContentBlock.of_text("u"),), token_count=tokens)


def a(tokens: int = 10, *calls: str, stop: StopReason = StopReason.STOP) -> Message:
    content = (ContentBlock.of_text("a"), *(ContentBlock.of_tool_call(c, "t") for c in calls))
    if calls and stop is StopReason.STOP:
        stop = StopReason.TOOL_USE
    return Message(Role.ASSISTANT, content, stop_reason=stop, token_count=tokens)


def failed(tokens: int = 10, *calls: str) -> Message:
    return a(tokens, *calls, stop=StopReason.ERROR)


def r(call_id: str, tokens: int = 10) -> Message:
    return Message(
        Role.TOOL_RESULT, (ContentBlock.of_text("out"),), tool_call_id=call_id, token_count=tokens
    )


def seqd(*messages: Message) -> list[Message]:
    return [replace(m, seq=i + 1, message_id=f"m{i + 1}") for i, m in enumerate(messages)]


# -- nothing to cut ----------------------------------------------------------------------------


def test_empty_history() -> None:
    assert find_cut_point([], 100) == CutPoint(0, -1, False)


def test_only_tool_results_have_no_cut_point() -> None:
    assert find_cut_point(seqd(r("x"), r("y")), 0) == CutPoint(0, -1, False)


@pytest.mark.parametrize("first", [u(), a()])
def test_budget_larger_than_everything_keeps_from_the_first_message(first: Message) -> None:
    msgs = seqd(first, a(5, "c1"), r("c1", 5), u(), a())
    total = sum(m.token_count for m in msgs)
    for budget in (total + 1, total * 10, 10**9):
        cut = find_cut_point(msgs, budget)
        assert cut.first_kept_index == 0
        assert not cut.split_turn


def test_budget_larger_than_everything_skips_leading_tool_results() -> None:
    # A kept history that starts with results (their call was summarised before):
    # the first valid cut point is the first user/assistant message.
    msgs = seqd(r("old1"), r("old2"), u(), a())
    cut = find_cut_point(msgs, 10**6)
    assert cut.first_kept_index == 2
    assert cut == CutPoint(2, -1, False)


def test_budget_exactly_the_total_keeps_everything() -> None:
    msgs = seqd(u(10), a(10), u(10), a(10))
    assert find_cut_point(msgs, 40).first_kept_index == 0
    assert find_cut_point(msgs, 41).first_kept_index == 0


# -- basic cuts --------------------------------------------------------------------------------


def test_cut_on_a_user_message_is_not_split() -> None:
    msgs = seqd(u(), a(), u(), a())
    # the last two messages give 20 tokens
    assert find_cut_point(msgs, 20) == CutPoint(2, -1, False)
    assert find_cut_point(msgs, 11) == CutPoint(2, -1, False)


def test_budget_reached_exactly_on_a_message_cuts_there() -> None:
    msgs = seqd(u(10), a(10), u(10), a(10))
    # 10 tokens: the last message alone reaches the budget
    cut = find_cut_point(msgs, 10)
    assert cut.first_kept_index == 3
    # 11 tokens: the last two
    assert find_cut_point(msgs, 11).first_kept_index == 2


def test_zero_budget_keeps_the_last_message() -> None:
    msgs = seqd(u(), a(), u(), a())
    assert find_cut_point(msgs, 0).first_kept_index == 3


# -- tool results are never a cut point --------------------------------------------------------


def test_cut_on_a_tool_result_moves_to_the_next_user_message() -> None:
    msgs = seqd(u(), a(10, "c1"), r("c1", 50), u(10), a(10))
    # the walk reaches 20 tokens at index 3 (u), 70 at index 2 (result)
    cut = find_cut_point(msgs, 60)
    assert cut.first_kept_index == 3
    assert cut == CutPoint(3, -1, False)


def test_cut_on_a_tool_result_moves_to_the_next_assistant_message() -> None:
    msgs = seqd(u(), a(10, "c1"), r("c1", 50), a(10, "c2"), r("c2", 10), a(10))
    # budget reached at index 2 (result of c1): next cut point is the assistant at 3
    cut = find_cut_point(msgs, 60)
    assert cut.first_kept_index == 3
    assert cut.split_turn
    assert cut.turn_start_index == 0


def test_cut_on_parallel_results_moves_past_all_of_them() -> None:
    msgs = seqd(u(), a(10, "c1", "c2", "c3"), r("c1"), r("c2", 100), r("c3"), u(), a())
    cut = find_cut_point(msgs, 100)
    # reached at index 3 (second result): the next cut point is the user at 5
    assert cut.first_kept_index == 5
    kept = msgs[cut.first_kept_index :]
    assert kept[0].role is not Role.TOOL_RESULT


def test_results_always_stay_with_their_call() -> None:
    msgs = seqd(u(), a(10, "c1", "c2"), r("c1", 30), r("c2", 30), u(), a(10, "c3"), r("c3"), a())
    for budget in range(0, 200):
        cut = find_cut_point(msgs, budget)
        kept = msgs[cut.first_kept_index :]
        calls = {c.tool_call_id for m in kept for c in m.tool_calls}
        for m in kept:
            if m.role is Role.TOOL_RESULT:
                assert m.tool_call_id in calls, (budget, cut)


@pytest.mark.parametrize(
    "tail",
    [
        pytest.param((a(10, "c1"), r("c1", 5000)), id="one-result"),
        pytest.param((a(10, "c1", "c2"), r("c1", 60), r("c2", 60)), id="parallel-results"),
        pytest.param((a(10, "c1", "c2", "c3"), r("c1", 60), r("c3", 60)), id="partly-answered"),
    ],
)
def test_budget_reached_in_trailing_tool_results_still_compacts(
    tail: tuple[Message, ...],
) -> None:
    """The newest messages are tool results bigger than the whole budget.

    Nothing after them is a valid cut point, so the nearest one is the assistant
    message that made the calls; the older turns must still be summarised. This is
    exactly when an agent compacts (a big tool output just arrived, the next LLM
    call would overflow), so keeping everything here makes compaction impossible.
    """
    msgs = seqd(u(), a(), u(), *tail)
    cut = find_cut_point(msgs, 50)
    assert cut.first_kept_index == 3, (
        f"a tiny budget keeps the whole history: {cut}; expected the cut at the assistant "
        "message holding the trailing results"
    )
    assert cut.split_turn
    assert cut.turn_start_index == 2


# -- split turns -------------------------------------------------------------------------------


def test_cut_on_an_assistant_message_splits_the_turn() -> None:
    msgs = seqd(u(), a(), u(), a(10, "c1"), r("c1"), a(10, "c2"), r("c2"), a(10))
    # 10 tokens: the last assistant alone
    cut = find_cut_point(msgs, 10)
    assert cut == CutPoint(7, 2, True)
    # 30: reached at index 5 (assistant)
    assert find_cut_point(msgs, 30) == CutPoint(5, 2, True)
    # 50: reached at index 3 (assistant)
    assert find_cut_point(msgs, 50) == CutPoint(3, 2, True)
    # 60: reached at index 2 (user): not split
    assert find_cut_point(msgs, 60) == CutPoint(2, -1, False)


def test_turn_start_is_the_nearest_user_message_before_the_cut() -> None:
    msgs = seqd(u(), u(), a(), u(), a(10, "c1"), r("c1"), a())
    cut = find_cut_point(msgs, 30)
    assert cut == CutPoint(4, 3, True)


def test_split_turn_starting_at_index_zero() -> None:
    msgs = seqd(u(), a(10, "c1"), r("c1"), a())
    assert find_cut_point(msgs, 10) == CutPoint(3, 0, True)


def test_cut_on_assistant_with_no_user_before_is_not_split() -> None:
    # A kept history that starts mid-turn (the previous compaction split the turn).
    msgs = seqd(a(10, "c1"), r("c1"), a(10, "c2"), r("c2"), a(10))
    cut = find_cut_point(msgs, 10)
    assert cut == CutPoint(4, -1, False)
    cut = find_cut_point(msgs, 30)
    assert cut == CutPoint(2, -1, False)


def test_cut_on_a_failed_assistant_message_splits_the_turn() -> None:
    msgs = seqd(u(), a(), u(), a(10, "c1"), r("c1"), failed(10), a(10))
    assert find_cut_point(msgs, 20) == CutPoint(5, 2, True)


# -- pending tool calls ------------------------------------------------------------------------


@pytest.mark.parametrize("budget", [0, 1, 5, 10])
def test_pending_call_and_everything_after_is_kept(budget: int) -> None:
    msgs = seqd(u(), a(), u(50), a(10, "c1"))
    cut = find_cut_point(msgs, budget)
    assert cut.first_kept_index == 3
    assert cut == CutPoint(3, 2, True)


@pytest.mark.parametrize("budget", [0, 1, 10, 30, 60])
def test_partly_answered_calls_are_pending(budget: int) -> None:
    msgs = seqd(u(), a(), u(), a(10, "c1", "c2", "c3"), r("c1", 30), r("c3", 30))
    cut = find_cut_point(msgs, budget)
    # the assistant with the open call c2 and its answered siblings stay
    assert cut.first_kept_index <= 3
    kept = msgs[cut.first_kept_index :]
    assert [m.seq for m in kept[-3:]] == [4, 5, 6]


def test_pending_call_does_not_move_an_earlier_cut() -> None:
    msgs = seqd(u(), a(), u(), a(10, "c1"), r("c1"), a(10, "c2"))
    # 40 tokens: reached at index 2 (user), earlier than the pending call
    assert find_cut_point(msgs, 40) == CutPoint(2, -1, False)
    assert find_cut_point(msgs, 10**6) == CutPoint(0, -1, False)


def test_fully_answered_calls_are_not_pending() -> None:
    msgs = seqd(u(), a(), u(), a(10, "c1", "c2"), r("c1"), r("c2"))
    # nothing pending: an ordinary cut at the assistant that made the calls
    cut = find_cut_point(msgs, 25)
    assert cut == CutPoint(3, 2, True)


def test_pending_call_at_index_zero_keeps_everything() -> None:
    msgs = seqd(a(10, "c1"))
    assert find_cut_point(msgs, 0) == CutPoint(0, -1, False)


def test_failed_message_calls_are_not_pending() -> None:
    msgs = seqd(u(), a(), u(), a(), failed(10, "c1"))
    cut = find_cut_point(msgs, 0)
    assert cut.first_kept_index == 4
    assert cut == CutPoint(4, 2, True)


def test_pending_call_before_a_trailing_failed_message_is_kept() -> None:
    """An assistant made a call, then a later provider call failed before the result
    arrived. The call is still open: the view answers it with a synthetic result and
    plan_append still accepts its real result, so it must stay in the kept history."""
    msgs = seqd(u(), a(), u(), a(10, "c1"), failed(10))
    cut = find_cut_point(msgs, 0)
    assert cut.first_kept_index <= 3, (
        f"cut {cut} summarises the assistant message whose call c1 has no result yet"
    )


def test_an_answered_call_before_the_last_message_is_not_pending() -> None:
    msgs = seqd(u(), a(10, "c1"), r("c1"), u(), a())
    assert find_cut_point(msgs, 0) == CutPoint(4, 3, True)


# -- failed messages count ---------------------------------------------------------------------


def test_failed_messages_count_tokens() -> None:
    msgs = seqd(u(), a(), u(10), a(10), failed(100), a(10))
    # without the failed message the walk would need index 2 to reach 110
    cut = find_cut_point(msgs, 110)
    assert cut.first_kept_index == 4
    assert cut == CutPoint(4, 2, True)


def test_failed_message_results_count_tokens() -> None:
    msgs = seqd(u(), a(), u(10), failed(10, "c1"), r("c1", 200), a(10))
    cut = find_cut_point(msgs, 100)
    # reached at index 4 (result of the failed call): next cut point is index 5
    assert cut.first_kept_index == 5


def test_cut_point_is_deterministic_and_pure() -> None:
    msgs = seqd(u(), a(10, "c1"), r("c1"), u(), a())
    before = list(msgs)
    assert find_cut_point(msgs, 15) == find_cut_point(msgs, 15)
    assert msgs == before
