"""Unit tests of ``plan_compaction``: the cut, the prompts, the file lists, the digest."""

from __future__ import annotations

import itertools
from dataclasses import replace

import pytest

from ctxwarden.core.compaction.fileops import collect_file_ops, render_file_lists
from ctxwarden.core.compaction.planner import (
    MIN_SUMMARY_TOKENS,
    Plan,
    covered_digest,
    plan_compaction,
    summary_budget,
)
from ctxwarden.core.compaction.prompts import (
    FILES_NOTE,
    NEW_SUMMARY,
    PINNED_NOTE,
    SYSTEM,
    TURN_PREFIX,
    UPDATE_SUMMARY,
)
from ctxwarden.core.compaction.serialize import TOOL_RESULT_CAP, serialize_messages
from ctxwarden.core.compaction.types import FileLists, FileToolNames
from ctxwarden.core.context import SessionContext
from ctxwarden.core.errors import FailedPrecondition
from ctxwarden.core.messages import ContentBlock, ContentKind, Message, Role, StopReason
from ctxwarden.core.session import Checkpoint, ContextPolicy, Session
from ctxwarden.core.tokens import HeuristicTokenizer

TOK = HeuristicTokenizer()
IDS = itertools.count()

SECTION_HEADERS = (
    "## Goal",
    "## Constraints & Preferences",
    "## Progress",
    "### Done",
    "### In Progress",
    "### Blocked",
    "## Key Decisions",
    "## Next Steps",
    "## Critical Context",
)


# -- builders ----------------------------------------------------------------------------------


def new_ctx(
    *, pinned_state: str = "", reserve_tokens: int = 1000, context_window: int = 100_000
) -> SessionContext:
    session = Session(
        session_id="s",
        system_prompt="You are an agent.",
        pinned_state=pinned_state,
        policy=ContextPolicy(context_window=context_window, reserve_tokens=reserve_tokens),
    )
    return SessionContext(session, None, (), TOK)


def append(ctx: SessionContext, *messages: Message, now: int = 1) -> list[Message]:
    ids = (f"gen-{i}" for i in IDS)
    plan = ctx.plan_append(messages, now_us=now, new_message_id=ids)
    ctx.apply_append(plan)
    return list(plan.new)


def user(t: str = "hi") -> Message:
    return Message(Role.USER, (ContentBlock.of_text(t),))


def call(text: str, *calls: tuple[str, str, str]) -> Message:
    """An assistant message; ``calls`` are (call_id, tool_name, arguments_json)."""
    blocks = tuple(ContentBlock.of_tool_call(c, n, args) for c, n, args in calls)
    return Message(
        Role.ASSISTANT,
        (ContentBlock.of_text(text), *blocks) if text else blocks,
        stop_reason=StopReason.TOOL_USE if calls else StopReason.STOP,
    )


def answer(t: str = "done") -> Message:
    return Message(Role.ASSISTANT, (ContentBlock.of_text(t),), stop_reason=StopReason.STOP)


def failure(*calls: tuple[str, str, str], error: str = "overloaded") -> Message:
    blocks = tuple(ContentBlock.of_tool_call(c, n, args) for c, n, args in calls)
    return Message(Role.ASSISTANT, blocks, stop_reason=StopReason.ERROR, error_message=error)


def result(call_id: str, t: str = "out", name: str = "t", is_error: bool = False) -> Message:
    return Message(
        Role.TOOL_RESULT,
        (ContentBlock.of_text(t),),
        tool_call_id=call_id,
        tool_name=name,
        is_error=is_error,
    )


def plan_for(
    ctx: SessionContext,
    keep: int,
    *,
    instructions: str = "",
    summarizer_limit: int = 0,
    file_tools: FileToolNames | None = None,
) -> Plan:
    return plan_compaction(
        session_id=ctx.session.session_id,
        active=ctx.active_messages,
        checkpoint=ctx.checkpoint,
        at_seq=ctx.session.last_seq,
        tokens_before=ctx.view_tokens(),
        keep_recent_tokens=keep,
        reserve_tokens=ctx.policy.reserve_tokens,
        summarizer_limit=summarizer_limit,
        pinned_state=ctx.session.pinned_state,
        instructions=instructions,
        file_tools=file_tools or FileToolNames(),
    )


COUNTER = itertools.count(1)


def commit(ctx: SessionContext, plan: Plan, summary: str = "SUMMARY") -> Checkpoint:
    """What the service does once the summariser answered."""
    n = next(COUNTER)
    checkpoint = Checkpoint(
        compaction_id=f"c{n}",
        session_id=ctx.session.session_id,
        summary=summary
        if plan.history_prompt
        else (plan.previous_summary or "(no earlier history)"),
        first_kept_seq=plan.first_kept_seq,
        tokens_before=plan.tokens_before,
        create_time_us=n,
        turn_prefix_summary="PREFIX" if plan.split_turn else "",
        split_turn=plan.split_turn,
        read_files=plan.files.read,
        modified_files=plan.files.modified,
        at_seq=ctx.session.last_seq,
    )
    ctx.apply_checkpoint(checkpoint)
    return checkpoint


def tokens(ctx: SessionContext, seqs: set[int]) -> int:
    return sum(m.token_count for m in ctx.active_messages if m.seq in seqs)


def seqs(messages: tuple[Message, ...] | list[Message]) -> list[int]:
    return [m.seq for m in messages]


def long_turns(ctx: SessionContext) -> list[Message]:
    """u1 a1 | u2 a2(c1) r1 a3(c2) r2 a4: seqs 1..8, every message 10 tokens."""
    return append(
        ctx,
        user("u1".ljust(40, ".")),
        answer("a1".ljust(40, ".")),
        user("u2".ljust(40, ".")),
        call("a2".ljust(39, "."), ("c1", "", "")),
        result("c1", "r1".ljust(40, ".")),
        call("a3".ljust(39, "."), ("c2", "", "")),
        result("c2", "r2".ljust(40, ".")),
        answer("a4".ljust(40, ".")),
    )


# -- nothing to compact ------------------------------------------------------------------------


def test_every_message_has_the_token_count_long_turns_assumes() -> None:
    ctx = new_ctx()
    msgs = long_turns(ctx)
    assert [m.token_count for m in msgs] == [10] * 8


@pytest.mark.parametrize("keep", [80, 81, 10**6])
def test_nothing_to_compact_when_everything_fits(keep: int) -> None:
    ctx = new_ctx()
    long_turns(ctx)
    before = ctx.model_input()
    with pytest.raises(FailedPrecondition) as err:
        plan_for(ctx, keep)
    assert err.value.reason == "NOTHING_TO_COMPACT"
    assert str(keep) in err.value.message
    assert ctx.model_input() == before


def test_nothing_to_compact_in_an_empty_session() -> None:
    with pytest.raises(FailedPrecondition) as err:
        plan_for(new_ctx(), 0)
    assert err.value.reason == "NOTHING_TO_COMPACT"


def test_nothing_to_compact_when_only_a_pending_call_is_left() -> None:
    ctx = new_ctx()
    append(ctx, user(), answer())
    plan = plan_for(ctx, 0)
    commit(ctx, plan)
    append(ctx, call("", ("c1", "read", '{"path": "a"}')))
    plan = plan_for(ctx, 0)
    commit(ctx, plan)
    assert seqs(ctx.active_messages) == [3]
    with pytest.raises(FailedPrecondition) as err:
        plan_for(ctx, 0)
    assert err.value.reason == "NOTHING_TO_COMPACT"


# -- history and turn prefix -------------------------------------------------------------------


def test_cut_at_a_user_message_has_no_turn_prefix() -> None:
    ctx = new_ctx()
    long_turns(ctx)
    plan = plan_for(ctx, 60)  # reached at u2 (seq 3)
    assert plan.first_kept_seq == 3
    assert not plan.split_turn
    assert seqs(plan.history) == [1, 2]
    assert plan.turn_prefix == ()
    assert plan.history_prompt is not None
    assert plan.turn_prefix_prompt is None
    assert (plan.summarized_from_seq, plan.summarized_to_seq) == (1, 2)


def test_split_turn_separates_history_and_turn_prefix() -> None:
    ctx = new_ctx()
    long_turns(ctx)
    plan = plan_for(ctx, 30)  # reached at a3 (seq 6)
    assert plan.first_kept_seq == 6
    assert plan.split_turn
    # history: everything before the user message starting the turn
    assert seqs(plan.history) == [1, 2]
    # turn prefix: from the turn start up to the cut
    assert seqs(plan.turn_prefix) == [3, 4, 5]
    assert plan.history_prompt is not None
    assert plan.turn_prefix_prompt is not None
    hp, tp = plan.history_prompt.user, plan.turn_prefix_prompt.user
    assert "[User]: u1" in hp and "[Assistant]: a1" in hp
    assert "u2" not in hp and "a2" not in hp
    assert "[User]: u2" in tp and "[Assistant]: a2" in tp and "[Tool result t]: r1" in tp
    assert "u1" not in tp and "a3" not in tp
    assert (plan.summarized_from_seq, plan.summarized_to_seq) == (1, 5)


def test_split_turn_at_the_first_turn_has_no_history_prompt() -> None:
    ctx = new_ctx()
    append(
        ctx,
        user("go"),
        call("a" * 36, ("c1", "t", "")),
        result("c1", "r" * 40),
        answer("b" * 40),
    )
    plan = plan_for(ctx, 10)
    assert plan.split_turn
    assert plan.history == ()
    assert seqs(plan.turn_prefix) == [1, 2, 3]
    assert plan.history_prompt is None
    assert plan.turn_prefix_prompt is not None
    assert plan.summarized_from_seq == 1
    checkpoint = commit(ctx, plan)
    assert checkpoint.summary == "(no earlier history)"
    assert "(no earlier history)" in ctx.model_input().summary
    assert "PREFIX" in ctx.model_input().summary


def test_plan_changes_nothing() -> None:
    ctx = new_ctx()
    long_turns(ctx)
    before = (ctx.model_input(), ctx.active_messages, ctx.session, ctx.checkpoint)
    plan = plan_for(ctx, 30)
    assert (ctx.model_input(), ctx.active_messages, ctx.session, ctx.checkpoint) == before
    assert plan.tokens_before == ctx.view_tokens()
    assert plan.at_seq == 8
    assert plan.session_id == "s"
    assert plan.base_compaction_id == ""
    assert plan.previous_summary == ""


# -- prompts -----------------------------------------------------------------------------------


def test_first_history_prompt_asks_for_a_new_structured_summary() -> None:
    ctx = new_ctx()
    long_turns(ctx)
    plan = plan_for(ctx, 60)
    assert plan.history_prompt is not None
    prompt = plan.history_prompt
    assert prompt.system == SYSTEM
    assert prompt.user.startswith("<conversation>\n")
    assert "\n</conversation>" in prompt.user
    for header in SECTION_HEADERS:
        assert f"\n{header}\n" in prompt.user, header
    assert NEW_SUMMARY in prompt.user
    assert UPDATE_SUMMARY not in prompt.user
    assert "<previous-summary>" not in prompt.user
    assert "<pinned-state>" not in prompt.user
    assert "<read-files>" not in prompt.user and "<modified-files>" not in prompt.user
    assert "Additional focus" not in prompt.user
    # the headers appear in order
    positions = [prompt.user.index(f"\n{h}\n") for h in SECTION_HEADERS]
    assert positions == sorted(positions)


def test_turn_prefix_prompt() -> None:
    ctx = new_ctx()
    long_turns(ctx)
    plan = plan_for(ctx, 30)
    assert plan.turn_prefix_prompt is not None
    prompt = plan.turn_prefix_prompt
    assert prompt.system == SYSTEM
    assert prompt.user.startswith("<conversation>\n[User]: u2")
    assert prompt.user.endswith(TURN_PREFIX)
    for header in ("## Original Request", "## Early Progress", "## Context for the Kept Part"):
        assert header in prompt.user


def test_second_round_updates_the_previous_summary_including_the_turn_prefix() -> None:
    ctx = new_ctx()
    long_turns(ctx)
    first = plan_for(ctx, 30)  # split turn: kept a3 r2 a4 (seqs 6-8)
    checkpoint = commit(ctx, first, summary="FIRST SUMMARY")
    assert checkpoint.carried_summary.startswith("FIRST SUMMARY")
    assert "PREFIX" in checkpoint.carried_summary
    append(ctx, user("u3".ljust(40, ".")), answer("a5".ljust(40, ".")))
    second = plan_for(ctx, 20)  # reached at u3 (seq 9)
    assert second.first_kept_seq == 9
    assert second.base_compaction_id == checkpoint.compaction_id
    assert second.previous_summary == checkpoint.carried_summary
    # the messages the first compaction kept are summarised now, none dropped
    assert seqs(second.history) == [6, 7, 8]
    assert second.history_prompt is not None
    user_prompt = second.history_prompt.user
    assert f"<previous-summary>\n{checkpoint.carried_summary}\n</previous-summary>" in user_prompt
    assert "Turn context (split turn):\n\nPREFIX" in user_prompt
    assert UPDATE_SUMMARY in user_prompt
    assert NEW_SUMMARY not in user_prompt
    for header in SECTION_HEADERS:
        assert f"\n{header}\n" in user_prompt, header
    assert "[Assistant]: a3" in user_prompt and "[Assistant]: a4" in user_prompt


def test_second_round_without_history_carries_the_previous_summary() -> None:
    ctx = new_ctx()
    long_turns(ctx)
    first = commit(ctx, plan_for(ctx, 60), summary="FIRST")  # kept u2.. (seqs 3-8)
    second = plan_for(ctx, 10)  # split turn at a4 (seq 8), turn starts at u2 (index 0)
    assert second.split_turn
    assert second.history == ()
    assert second.history_prompt is None
    assert seqs(second.turn_prefix) == [3, 4, 5, 6, 7]
    checkpoint = commit(ctx, second)
    assert checkpoint.summary == first.carried_summary == "FIRST"


def test_pinned_state_is_shown_and_not_to_be_copied() -> None:
    ctx = new_ctx(pinned_state="task: port the parser\nstatus: 3/5")
    long_turns(ctx)
    plan = plan_for(ctx, 60)
    assert plan.pinned_state == "task: port the parser\nstatus: 3/5"
    assert plan.history_prompt is not None
    assert (
        "<pinned-state>\ntask: port the parser\nstatus: 3/5\n</pinned-state>\n" + PINNED_NOTE
        in plan.history_prompt.user
    )
    # the turn prefix prompt does not carry it
    plan = plan_for(ctx, 30)
    assert plan.turn_prefix_prompt is not None
    assert "<pinned-state>" not in plan.turn_prefix_prompt.user


def test_instructions_are_an_additional_focus() -> None:
    ctx = new_ctx()
    long_turns(ctx)
    plan = plan_for(ctx, 60, instructions="keep the benchmark numbers")
    assert plan.instructions == "keep the benchmark numbers"
    assert plan.history_prompt is not None
    assert plan.history_prompt.user.endswith("Additional focus: keep the benchmark numbers")


# -- file lists --------------------------------------------------------------------------------


def file_session(ctx: SessionContext) -> None:
    append(
        ctx,
        user("edit things"),
        call(
            "",
            ("c1", "read", '{"path": "src/a.py"}'),
            ("c2", "read", '{"path": "src/b.py"}'),
            ("c3", "edit", '{"path": "src/b.py", "old": "x", "new": "y"}'),
        ),
        result("c1"),
        result("c2"),
        result("c3"),
        failure(("f1", "write", '{"path": "src/failed.py"}')),
        call("", ("c4", "write", '{"path": "src/c.py"}'), ("c5", "read", "not json")),
        result("c4"),
        result("c5"),
        user("next"),
        call("", ("c6", "read", '{"path": "src/tail.py"}')),
        result("c6"),
        answer("x" * 400),
    )


def test_file_lists_read_minus_modified() -> None:
    ctx = new_ctx()
    file_session(ctx)
    plan = plan_for(ctx, tokens(ctx, {10, 11, 12, 13}))  # kept from "next" (seq 10)
    assert plan.first_kept_seq == 10
    # failed message's write is ignored, bad JSON arguments are ignored, the kept
    # tail's read of src/tail.py is not summarised yet
    assert plan.files == FileLists(read=("src/a.py",), modified=("src/b.py", "src/c.py"))
    assert plan.history_prompt is not None
    text = plan.history_prompt.user
    assert "<read-files>\nsrc/a.py\n</read-files>" in text
    assert "<modified-files>\nsrc/b.py\nsrc/c.py\n</modified-files>" in text
    assert FILES_NOTE in text


def test_file_lists_are_cumulative_across_checkpoints() -> None:
    ctx = new_ctx()
    file_session(ctx)
    checkpoint = commit(ctx, plan_for(ctx, tokens(ctx, {10, 11, 12, 13})))
    assert checkpoint.first_kept_seq == 10
    assert checkpoint.read_files == ("src/a.py",)
    append(
        ctx,
        user("more"),
        call("", ("d1", "read", '{"path": "src/c.py"}'), ("d2", "edit", '{"path": "src/a.py"}')),
        result("d1"),
        result("d2"),
        user("last"),
        answer("y" * 400),
    )
    plan = plan_for(ctx, tokens(ctx, {18, 19}))
    assert plan.first_kept_seq == 18
    # src/a.py was read before and is modified now; src/c.py stays modified
    assert plan.files == FileLists(
        read=("src/tail.py",), modified=("src/a.py", "src/b.py", "src/c.py")
    )
    assert plan.history_prompt is not None
    assert render_file_lists(plan.files) in plan.history_prompt.user


def test_file_lists_include_the_turn_prefix() -> None:
    ctx = new_ctx()
    append(
        ctx,
        user("go"),
        call("", ("c1", "write", '{"path": "p.txt"}')),
        result("c1"),
        answer("z" * 400),
    )
    plan = plan_for(ctx, 10)
    assert plan.split_turn and plan.history == ()
    assert plan.files == FileLists((), ("p.txt",))


def test_custom_file_tool_names() -> None:
    tools = FileToolNames(read=("cat",), write=("save",), edit=("patch",), path_argument="file")
    msgs = [
        call(
            "",
            ("c1", "cat", '{"file": "r.txt"}'),
            ("c2", "save", '{"file": "w.txt"}'),
            ("c3", "patch", '{"file": "e.txt"}'),
            ("c4", "read", '{"path": "ignored.txt"}'),
            ("c5", "cat", '{"path": "no-file-arg.txt"}'),
            ("c6", "cat", '{"file": ""}'),
            ("c7", "cat", '["file"]'),
        )
    ]
    files = collect_file_ops(msgs, FileLists(("old.txt", "w.txt"), ()), tools)
    assert files == FileLists(("old.txt", "r.txt"), ("e.txt", "w.txt"))


# -- serialisation -----------------------------------------------------------------------------


def test_serialize_role_tags_and_tool_calls() -> None:
    msgs = [
        user("question"),
        Message(
            Role.ASSISTANT,
            (
                ContentBlock(ContentKind.THINKING, text="hmm"),
                ContentBlock(ContentKind.THINKING, text="secret", redacted=True),
                ContentBlock.of_text("let me look"),
                ContentBlock.of_tool_call("c1", "grep", '{"q":"x"}'),
                ContentBlock.of_tool_call("c2", "ls", ""),
            ),
            stop_reason=StopReason.TOOL_USE,
        ),
        result("c1", "found", name="grep"),
        result("c2", "boom", name="", is_error=True),
    ]
    assert serialize_messages(msgs) == (
        "[User]: question\n\n"
        "[Assistant thinking]: hmm\n\n"
        "[Assistant]: let me look\n\n"
        '[Assistant tool calls]: grep({"q":"x"}); ls({})\n\n'
        "[Tool result grep]: found\n\n"
        "[Tool result (error)]: boom"
    )


def test_serialize_named_error_result() -> None:
    assert serialize_messages([result("c", "bad", name="sh", is_error=True)]) == (
        "[Tool result sh (error)]: bad"
    )


@pytest.mark.parametrize("size", [0, 1, TOOL_RESULT_CAP - 1, TOOL_RESULT_CAP])
def test_serialize_short_tool_results_are_whole(size: int) -> None:
    assert (
        serialize_messages([result("c", "x" * size, name="t")]) == f"[Tool result t]: {'x' * size}"
    )


@pytest.mark.parametrize("size", [TOOL_RESULT_CAP + 1, 5000, 100_000])
def test_serialize_caps_tool_results(size: int) -> None:
    text = "y" * size
    out = serialize_messages([result("c", text, name="t")])
    assert TOOL_RESULT_CAP == 2000
    assert out == (f"[Tool result t]: {'y' * 2000}\n[... {size - 2000} more characters not shown]")


def test_serialize_does_not_cap_user_or_assistant_text() -> None:
    out = serialize_messages([user("u" * 5000), answer("a" * 5000)])
    assert out == f"[User]: {'u' * 5000}\n\n[Assistant]: {'a' * 5000}"


def test_serialize_drops_images() -> None:
    image = ContentBlock(ContentKind.IMAGE, mime_type="image/png", data=b"\x89PNG")
    msgs = [
        Message(Role.USER, (ContentBlock.of_text("look at "), image, ContentBlock.of_text("this"))),
        Message(Role.USER, (image,)),
        Message(
            Role.TOOL_RESULT,
            (ContentBlock.of_text("screenshot"), image),
            tool_call_id="c",
            tool_name="shot",
        ),
    ]
    out = serialize_messages(msgs)
    assert out == "[User]: look at this\n\n[Tool result shot]: screenshot"
    assert "PNG" not in out and "image" not in out


def test_serialize_skips_failed_messages_and_their_results() -> None:
    msgs = [
        user("q"),
        failure(("f1", "read", '{"path": "x"}'), error="overloaded"),
        result("f1", "failed call output"),
        call("ok", ("c1", "read", '{"path": "y"}')),
        result("c1", "good output"),
        Message(Role.ASSISTANT, (ContentBlock.of_text("partial"),), stop_reason=StopReason.ABORTED),
    ]
    out = serialize_messages(msgs)
    assert out == (
        '[User]: q\n\n[Assistant]: ok\n\n[Assistant tool calls]: read({"path": "y"})\n\n'
        "[Tool result t]: good output"
    )


def test_history_prompt_uses_the_serialisation() -> None:
    ctx = new_ctx()
    append(
        ctx,
        user("q"),
        failure(("f1", "read", '{"path": "x"}')),
        result("f1", "failed call output"),
        call("ok", ("c1", "read", '{"path": "y"}')),
        result("c1", "z" * 3000, name="read"),
        user("next"),
        answer("w" * 400),
    )
    plan = plan_for(ctx, 100)
    assert seqs(plan.history) == [1, 2, 3, 4, 5]
    assert plan.history_prompt is not None
    assert plan.history_prompt.user.startswith(
        f"<conversation>\n{serialize_messages(plan.history)}\n</conversation>\n\n"
    )
    assert "failed call output" not in plan.history_prompt.user
    assert "[... 1000 more characters not shown]" in plan.history_prompt.user
    # the failed message's write/read calls do not count as file operations
    assert plan.files == FileLists(("y",), ())


# -- budgets -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("reserve", "limit", "expected"),
    [
        (1000, 0, 800),
        (1000, 500, 500),
        (1000, 800, 800),
        (1000, 2000, 800),
        (16384, 0, 13107),
        (16384, 4096, 4096),
        (10, 0, MIN_SUMMARY_TOKENS),
        (1000, 10, MIN_SUMMARY_TOKENS),
    ],
)
def test_summary_budget(reserve: int, limit: int, expected: int) -> None:
    assert summary_budget(reserve, limit) == expected


@pytest.mark.parametrize(
    ("reserve", "limit", "history_max", "prefix_max"),
    [(1000, 0, 800, 400), (1000, 301, 301, 150), (5000, 0, 4000, 2000), (10, 0, 64, 32)],
)
def test_prompt_max_tokens(reserve: int, limit: int, history_max: int, prefix_max: int) -> None:
    ctx = new_ctx(reserve_tokens=reserve)
    long_turns(ctx)
    plan = plan_for(ctx, 30, summarizer_limit=limit)
    assert plan.history_prompt is not None and plan.turn_prefix_prompt is not None
    assert plan.history_prompt.max_tokens == history_max
    assert plan.turn_prefix_prompt.max_tokens == prefix_max


# -- covered digest ----------------------------------------------------------------------------


def test_covered_digest_ignores_appends_and_notices_rollbacks() -> None:
    ctx = new_ctx()
    long_turns(ctx)
    append(ctx, failure())  # seq 9
    plan = plan_for(ctx, 30)
    assert plan.covered_digest == covered_digest(ctx.active_messages, plan.at_seq)
    # appends after the plan do not change it
    append(ctx, user("later"), answer("later too"))  # seqs 10, 11
    assert covered_digest(ctx.active_messages, plan.at_seq) == plan.covered_digest
    # rolling back messages appended after the plan does not change it
    ctx.apply_rollback(ctx.plan_rollback(9), 0, 2)
    assert covered_digest(ctx.active_messages, plan.at_seq) == plan.covered_digest
    # rolling back the covered failed message does
    assert ctx.plan_rollback(None) == [9]
    ctx.apply_rollback([9], 0, 3)
    assert covered_digest(ctx.active_messages, plan.at_seq) != plan.covered_digest


def test_covered_digest_changes_after_rewinding_a_covered_message() -> None:
    ctx = new_ctx()
    long_turns(ctx)
    plan = plan_for(ctx, 60)
    ctx.apply_rollback(ctx.plan_rollback(7), 0, 2)
    assert covered_digest(ctx.active_messages, plan.at_seq) != plan.covered_digest
    # re-appending gives new seqs: still different
    append(ctx, answer("a4".ljust(40, ".")))
    assert covered_digest(ctx.active_messages, plan.at_seq) != plan.covered_digest


def test_covered_digest_depends_on_the_covered_seqs_only() -> None:
    a = [replace(user(), seq=s) for s in (3, 4, 5)]
    b = [replace(answer("other"), seq=s) for s in (3, 4, 5, 6)]
    assert covered_digest(a, 5) == covered_digest(b, 5)
    assert covered_digest(a, 5) != covered_digest(a, 4)
    assert covered_digest(a[:2], 5) != covered_digest(a, 5)


# -- end to end --------------------------------------------------------------------------------


def test_pending_call_survives_compaction_and_accepts_its_result() -> None:
    ctx = new_ctx()
    long_turns(ctx)
    append(ctx, user("more"), call("x" * 400, ("p1", "read", '{"path": "q"}')))
    plan = plan_for(ctx, 0)
    assert plan.first_kept_seq == 10
    commit(ctx, plan)
    append(ctx, result("p1", "answer"))
    assert seqs(ctx.active_messages) == [10, 11]


def test_large_trailing_tool_output_can_be_compacted() -> None:
    """An agent just got a tool output larger than keep_recent_tokens; the context is
    over the threshold and the next LLM call would fail. Compaction must summarise
    the earlier turns (keeping the assistant message with the call and its result),
    not refuse with NOTHING_TO_COMPACT."""
    ctx = new_ctx(context_window=2000, reserve_tokens=200)
    long_turns(ctx)
    append(ctx, user("read it"), call("", ("c9", "read", '{"path": "big"}')))
    append(ctx, result("c9", "b" * 8000, name="read"))  # 2000 tokens
    assert ctx.model_input().compaction_recommended
    try:
        plan = plan_for(ctx, 1000)
    except FailedPrecondition as exc:
        pytest.fail(f"compaction refused with {exc.reason}: {exc.message}")
    assert plan.first_kept_seq == 10  # the assistant message holding the call
    assert seqs(plan.history) == list(range(1, 9))
    assert seqs(plan.turn_prefix) == [9]


def test_pending_call_before_a_failed_message_survives_compaction() -> None:
    """The last successful assistant message has an open call; a later provider call
    failed. The call is still open (plan_append accepts its result), so compacting
    must keep it; otherwise its result is rejected as UNKNOWN_TOOL_CALL."""
    ctx = new_ctx()
    long_turns(ctx)
    append(ctx, user("more"), call("", ("p1", "read", '{"path": "q"}')), failure())
    # before compacting, the result is accepted
    ctx.plan_append([result("p1")], now_us=1, new_message_id=iter(["probe"]))
    commit(ctx, plan_for(ctx, 0))
    try:
        append(ctx, result("p1", "late but valid"))
    except FailedPrecondition as exc:
        pytest.fail(
            f"the open call p1 was summarised away (first_kept_seq "
            f"{ctx.checkpoint.first_kept_seq if ctx.checkpoint else 0}): {exc.reason}"
        )
