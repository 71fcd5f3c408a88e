"""Unit tests of SessionContext beyond the view properties."""

from __future__ import annotations

import itertools
from dataclasses import replace

import pytest

from ctxwarden.core.context import SessionContext
from ctxwarden.core.errors import FailedPrecondition, InvalidArgument
from ctxwarden.core.messages import ContentBlock, Message, Role, StopReason
from ctxwarden.core.model_input import prefix_hash
from ctxwarden.core.session import Checkpoint, ContextPolicy, Session, ToolDefinition
from ctxwarden.core.summary import SUMMARY_METADATA_KEY, SUMMARY_PREAMBLE
from ctxwarden.core.tokens import HeuristicTokenizer, count_message, count_text
from ctxwarden.core.view import TOOL_OUTPUT_TRUNCATED

TOK = HeuristicTokenizer()


def new_ctx(session: Session | None = None, checkpoint: Checkpoint | None = None) -> SessionContext:
    return SessionContext(session or Session(session_id="s"), checkpoint, (), TOK)


IDS = itertools.count()


def append(ctx: SessionContext, *messages: Message, now: int = 1) -> None:
    ids = (f"gen-{i}" for i in IDS)
    ctx.apply_append(ctx.plan_append(messages, now_us=now, new_message_id=ids))


def user(t: str = "hi", message_id: str = "") -> Message:
    return Message(Role.USER, (ContentBlock.of_text(t),), message_id=message_id)


def call(*ids: str) -> Message:
    return Message(
        Role.ASSISTANT,
        tuple(ContentBlock.of_tool_call(c, "t") for c in ids),
        stop_reason=StopReason.TOOL_USE,
    )


def answer(t: str = "done") -> Message:
    return Message(Role.ASSISTANT, (ContentBlock.of_text(t),), stop_reason=StopReason.STOP)


def failure(error: str = "overloaded") -> Message:
    return Message(Role.ASSISTANT, (), stop_reason=StopReason.ERROR, error_message=error)


def tool_result(call_id: str, t: str = "out") -> Message:
    return Message(Role.TOOL_RESULT, (ContentBlock.of_text(t),), tool_call_id=call_id)


# -- append -------------------------------------------------------------------------------


def test_append_assigns_seqs_ids_and_counts() -> None:
    ctx = new_ctx()
    plan = ctx.plan_append(
        [user("hello"), user("again", message_id="mine")],
        now_us=5,
        new_message_id=iter(["a", "b", "c"]),
    )
    assert [m.seq for m in plan.new] == [1, 2]
    assert [m.message_id for m in plan.new] == ["a", "mine"]
    assert [m.create_time_us for m in plan.new] == [5, 5]
    assert [m.token_count for m in plan.new] == [2, 2]
    assert plan.last_seq == 2
    assert plan.context_tokens == 4
    ctx.apply_append(plan)
    assert ctx.session.last_seq == 2
    assert ctx.session.context_tokens == 4
    assert ctx.session.update_time_us == 5


def test_append_with_known_message_id_returns_the_stored_message() -> None:
    ctx = new_ctx()
    append(ctx, user("first", message_id="k1"))
    stored = ctx.active_messages[0]
    plan = ctx.plan_append(
        [user("different text", message_id="k1"), user("new", message_id="k2")],
        now_us=9,
        new_message_id=iter(()),
    )
    assert plan.messages[0] == stored
    assert [m.message_id for m in plan.new] == ["k2"]
    assert plan.new[0].seq == 2
    assert plan.last_seq == 2


def test_append_with_stored_duplicate_from_storage() -> None:
    ctx = new_ctx()
    old = replace(user("old", message_id="k0"), seq=1)
    plan = ctx.plan_append(
        [user("retry", message_id="k0")],
        now_us=1,
        new_message_id=iter(()),
        stored_duplicates={"k0": old},
    )
    assert plan.messages == (old,)
    assert plan.new == ()
    assert plan.last_seq == 0


def test_tool_result_in_same_request_as_its_call() -> None:
    ctx = new_ctx()
    append(ctx, user(), call("c1"), tool_result("c1"))
    with pytest.raises(FailedPrecondition) as err:
        ctx.plan_append([tool_result("c1")], now_us=1, new_message_id=iter("x"))
    assert err.value.reason == "TOOL_CALL_ALREADY_ANSWERED"
    assert err.value.field == "messages[0].tool_call_id"


def test_two_results_for_one_call_in_one_request() -> None:
    ctx = new_ctx()
    append(ctx, call("c1"))
    with pytest.raises(FailedPrecondition) as err:
        ctx.plan_append(
            [user(), tool_result("c1"), tool_result("c1")], now_us=1, new_message_id=iter("xyz")
        )
    assert err.value.reason == "TOOL_CALL_ALREADY_ANSWERED"
    assert err.value.field == "messages[2].tool_call_id"


def test_a_result_for_an_unknown_call_is_stored_and_left_out_of_the_view() -> None:
    ctx = new_ctx()
    ctx.apply_append(
        ctx.plan_append([user(), tool_result("nope")], now_us=1, new_message_id=iter("xy"))
    )
    assert [m.seq for m in ctx.active_messages] == [1, 2]
    view = ctx.model_input()
    assert [m.seq for m in view.messages] == [1]
    assert [(n.code, n.seq) for n in view.notices] == [("ORPHANED_TOOL_RESULT_OMITTED", 2)]


def test_successful_answer_resets_consecutive_failures() -> None:
    ctx = new_ctx(Session(session_id="s", consecutive_failures=2))
    append(ctx, failure())
    assert ctx.session.consecutive_failures == 2
    append(ctx, answer())
    assert ctx.session.consecutive_failures == 0


# -- rollback ------------------------------------------------------------------------------


def test_plan_rollback_rejects_bad_to_seq() -> None:
    ctx = new_ctx()
    append(ctx, user(), answer())
    with pytest.raises(InvalidArgument) as err:
        ctx.plan_rollback(-1)
    assert (err.value.field, err.value.reason) == ("to_seq", "INVALID_SEQ")
    with pytest.raises(InvalidArgument) as err:
        ctx.plan_rollback(3)
    assert (err.value.field, err.value.reason) == ("to_seq", "INVALID_SEQ")
    assert ctx.plan_rollback(2) == []
    assert ctx.plan_rollback(0) == [1, 2]


def test_rollback_reopens_calls_whose_results_were_removed() -> None:
    ctx = new_ctx()
    append(ctx, user(), call("c1", "c2"), tool_result("c1"), tool_result("c2"))
    ctx.apply_rollback(ctx.plan_rollback(3), 0, 2)
    assert [m.seq for m in ctx.active_messages] == [1, 2, 3]
    append(ctx, tool_result("c2", "again"))
    assert [m.seq for m in ctx.active_messages] == [1, 2, 3, 5]
    assert ctx.session.last_seq == 5


def test_rollback_updates_tokens_and_failures() -> None:
    ctx = new_ctx()
    append(ctx, user("x" * 40), failure())
    ctx.apply_rollback(ctx.plan_rollback(None), 3, 7)
    assert ctx.session.consecutive_failures == 3
    assert ctx.session.update_time_us == 7
    assert ctx.session.context_tokens == ctx.context_tokens == 10


# -- checkpoint -------------------------------------------------------------------------------


CHECKPOINT = Checkpoint(
    compaction_id="cmp-1",
    session_id="s",
    summary="we talked",
    first_kept_seq=3,
    tokens_before=1000,
    create_time_us=1,
)


def kept_ctx() -> SessionContext:
    kept = [
        replace(user("three"), seq=3, message_id="m3", token_count=2),
        replace(answer("four"), seq=4, message_id="m4", token_count=1),
    ]
    session = Session(session_id="s", system_prompt="sys", last_seq=4)
    return SessionContext(session, CHECKPOINT, kept, TOK)


def test_model_input_starts_with_summary() -> None:
    ctx = kept_ctx()
    mi = ctx.model_input()
    summary = mi.messages[0]
    assert summary.role is Role.USER
    assert summary.seq == 0
    assert summary.metadata == {SUMMARY_METADATA_KEY: "cmp-1"}
    assert summary.text.startswith(SUMMARY_PREAMBLE)
    assert "<summary>\nwe talked\n</summary>" in summary.text
    assert [m.seq for m in mi.messages[1:]] == [3, 4]
    assert mi.tokens.summary_tokens == count_message(summary, TOK)
    assert mi.tokens.message_tokens == 3
    assert mi.tokens.total_tokens == count_text("sys", TOK) + mi.tokens.summary_tokens + 3
    assert (mi.compaction_id, mi.summary, mi.first_kept_seq, mi.last_seq) == (
        "cmp-1",
        "we talked",
        3,
        4,
    )
    assert mi.prefix_hash == prefix_hash(ctx.session, summary.text)


def test_rollback_before_checkpoint_crosses_it() -> None:
    ctx = kept_ctx()
    assert ctx.plan_rollback(2) == [3, 4]
    assert not ctx.crosses_checkpoint(2)  # the checkpoint summarised seqs 1-2 only
    assert ctx.crosses_checkpoint(1)
    assert not ctx.crosses_checkpoint(None)


def test_first_kept_seq_without_checkpoint() -> None:
    ctx = new_ctx()
    assert ctx.model_input().first_kept_seq == 0
    append(ctx, user(), user())
    ctx.apply_rollback([1], 0, 1)
    assert ctx.model_input().first_kept_seq == 2


# -- budget and prefix -------------------------------------------------------------------------


def test_compaction_recommended_threshold() -> None:
    policy = ContextPolicy(context_window=100, reserve_tokens=20)
    ctx = new_ctx(Session(session_id="s", policy=policy))
    append(ctx, user("x" * 320))  # 80 tokens
    mi = ctx.model_input()
    assert (mi.tokens.total_tokens, mi.tokens.compaction_threshold) == (80, 80)
    assert not mi.compaction_recommended
    assert ctx.model_input(max_output_tokens=21).compaction_recommended
    assert ctx.model_input(max_output_tokens=21).tokens.compaction_threshold == 79
    append(ctx, user("y"))
    assert ctx.model_input().compaction_recommended


def test_prefix_hash_depends_only_on_the_prefix() -> None:
    base = Session(session_id="s", system_prompt="sys", tools=(ToolDefinition("t", "d", "{}"),))
    h = prefix_hash(base, "")
    assert h == prefix_hash(replace(base, session_id="other", title="x", last_seq=9), "")
    assert h != prefix_hash(replace(base, system_prompt="sys2"), "")
    assert h != prefix_hash(replace(base, tools=()), "")
    assert h != prefix_hash(base, "summary")
    assert len(h) == 64
    ctx = new_ctx(base)
    before = ctx.model_input().prefix_hash
    append(ctx, user(), answer())
    assert ctx.model_input().prefix_hash == before == h


def test_fixed_costs() -> None:
    session = Session(
        session_id="s",
        system_prompt="x" * 10,
        tools=(ToolDefinition("ab", "cd", "ef"),),
    )
    ctx = new_ctx(session)
    assert (ctx.system_tokens, ctx.tools_tokens, ctx.summary_tokens) == (3, 2, 0)
    assert ctx.fixed_tokens == ctx.context_tokens == 5


# -- replace_session ----------------------------------------------------------------------------


def truncated_ctx() -> SessionContext:
    session = Session(session_id="s", policy=ContextPolicy(tool_output_max_bytes=10))
    ctx = new_ctx(session)
    append(ctx, user(), call("c1"), tool_result("c1", "x" * 100))
    assert [n.code for n in ctx.model_input().notices] == [TOOL_OUTPUT_TRUNCATED]
    return ctx


def fresh_copy(ctx: SessionContext) -> SessionContext:
    return SessionContext(ctx.session, ctx.checkpoint, ctx.active_messages, ctx.tokenizer)


def test_replace_session_keeps_stored_messages_whole() -> None:
    ctx = truncated_ctx()
    ctx.replace_session(replace(ctx.session, policy=ContextPolicy(tool_output_max_bytes=10)))
    assert ctx.active_messages[2].text == "x" * 100


def test_replace_session_raising_the_limit_shows_the_full_output() -> None:
    ctx = truncated_ctx()
    ctx.replace_session(replace(ctx.session, policy=ContextPolicy()))
    mi = ctx.model_input()
    assert mi.messages[2].text == "x" * 100
    assert mi.notices == ()
    assert mi == fresh_copy(ctx).model_input()


def test_replace_session_changing_the_limit_cuts_the_stored_output() -> None:
    ctx = truncated_ctx()
    ctx.replace_session(replace(ctx.session, policy=ContextPolicy(tool_output_max_bytes=20)))
    mi = ctx.model_input()
    assert mi.messages[2].text.startswith("x" * 20 + "\n\n[ctxwarden: output truncated: ")
    assert "showing 20 of 100 bytes, 1 of 1 lines" in mi.messages[2].text
    assert mi == fresh_copy(ctx).model_input()
    assert ctx.context_tokens == fresh_copy(ctx).context_tokens


def test_replace_session_same_policy_changes_nothing() -> None:
    ctx = truncated_ctx()
    before = ctx.model_input()
    ctx.replace_session(replace(ctx.session, title="renamed"))
    after = ctx.model_input()
    assert after.messages == before.messages
    assert after.tokens == before.tokens
    assert after.session.title == "renamed"


def test_replace_session_updates_fixed_costs() -> None:
    ctx = new_ctx()
    append(ctx, user())
    ctx.replace_session(replace(ctx.session, system_prompt="x" * 40))
    assert ctx.system_tokens == 10
    assert ctx.model_input().tokens.total_tokens == 11
    assert ctx.model_input().prefix_hash == prefix_hash(ctx.session, "")
