"""core.memory: the selection of a session's memory block (properties over
generated memories), the block in the model input, and durable facts in summaries."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from ctxwarden.core.compaction.prompts import history_prompt
from ctxwarden.core.compaction.types import FileLists
from ctxwarden.core.context import SessionContext
from ctxwarden.core.memory import (
    DURABLE_FACTS_HEADING,
    MEMORY_METADATA_KEY,
    Memory,
    MemoryBlock,
    MemoryRanker,
    MemoryState,
    block_message,
    block_text,
    line_tokens,
    select_block,
    split_durable_facts,
    visible_to,
    wrapper_tokens,
)
from ctxwarden.core.messages import ContentBlock, Message, Role
from ctxwarden.core.model_input import prefix_hash
from ctxwarden.core.render import Format, render_view
from ctxwarden.core.session import Checkpoint, Session
from ctxwarden.core.tokens import CountingProfile, HeuristicTokenizer

TOK = HeuristicTokenizer()
PROFILE = CountingProfile(TOK, 3, 3, "openai")


def count(text: str) -> int:
    return PROFILE.message(block_message(text))


def count_text(text: str) -> int:
    return TOK.count(text)


SCOPES = st.sampled_from(
    [("u1", ""), ("", "p1"), ("u1", "p1"), ("u2", ""), ("u1", "p2"), ("", "p2")]
)
memories = st.lists(
    st.builds(
        lambda i, text, scope, pinned, t, state: Memory(
            memory_id=f"m{i:04d}",
            tenant_id="",
            text=text,
            user_id=scope[0],
            project_id=scope[1],
            pinned=pinned,
            update_time_us=t,
            state=state,
        ),
        st.integers(0, 9999),
        st.text(min_size=0, max_size=120),
        SCOPES,
        st.booleans(),
        st.integers(0, 50),  # few distinct times: ties are common
        st.sampled_from(list(MemoryState)),
    ),
    max_size=25,
    unique_by=lambda m: m.memory_id,
)


def select(ms: list[Memory], budget: int) -> MemoryBlock:
    return select_block(ms, budget, count, count_text, user_id="u1", project_id="p1")


def rank_key(m: Memory) -> tuple[bool, int, str]:
    return (not m.pinned, -m.update_time_us, m.memory_id)


@settings(max_examples=100, deadline=None)
@given(memories, st.integers(0, 400))
def test_block_fits_the_budget_and_holds_only_visible_active_memories(
    ms: list[Memory], budget: int
) -> None:
    block = select(ms, budget)
    if block:
        assert count(block.text) <= budget
    by_id = {m.memory_id: m for m in ms}
    for mid in block.memory_ids:
        m = by_id[mid]
        assert m.state is MemoryState.ACTIVE and m.text.strip()
        assert visible_to(m, "u1", "p1")
        assert m.user_id in ("", "u1") and m.project_id in ("", "p1")
    assert (block.text == "") == (block.memory_ids == ())


@settings(max_examples=100, deadline=None)
@given(memories, st.integers(0, 400), st.randoms(use_true_random=False))
def test_selection_is_deterministic_and_ordered_pinned_then_newest(
    ms: list[Memory], budget: int, rnd: object
) -> None:
    block = select(ms, budget)
    shuffled = list(ms)
    rnd.shuffle(shuffled)  # type: ignore[attr-defined]
    assert select(shuffled, budget) == block  # the input order does not matter
    by_id = {m.memory_id: m for m in ms}
    chosen = [by_id[i] for i in block.memory_ids]
    assert chosen == sorted(chosen, key=rank_key)
    assert block.text == block_text(chosen)


@settings(max_examples=100, deadline=None)
@given(memories, st.integers(0, 400))
def test_every_memory_left_out_would_not_have_fit(ms: list[Memory], budget: int) -> None:
    """Greedy in rank order: a memory is left out only when its line, added to
    the wrapper and the lines taken before it, would exceed the budget (with the
    heuristic tokenizer the exact count of the block never exceeds that sum, so
    nothing is dropped afterwards)."""
    block = select(ms, budget)
    chosen = set(block.memory_ids)
    eligible = sorted(
        (
            m
            for m in ms
            if m.state is MemoryState.ACTIVE and m.text.strip() and visible_to(m, "u1", "p1")
        ),
        key=rank_key,
    )
    used = wrapper_tokens(count)
    for m in eligible:
        if m.memory_id in chosen:
            used += line_tokens(m, count_text)
        else:
            assert used + line_tokens(m, count_text) > budget


def test_budget_zero_and_no_memories_give_no_block() -> None:
    m = Memory("m1", "", "likes tea", user_id="u1")
    assert select([m], 0) == MemoryBlock()
    assert select([], 1000) == MemoryBlock()
    assert not visible_to(Memory("m2", "", "orphan"), "u1", "p1")


def test_ranker_is_pluggable() -> None:
    class Reverse:
        def rank(self, memories: Sequence[Memory], context: str) -> list[Memory]:
            return sorted(memories, key=lambda m: m.memory_id, reverse=True)

    ranker: MemoryRanker = Reverse()
    ms = [Memory(f"m{i}", "", f"fact {i}", user_id="u1", update_time_us=i) for i in range(3)]
    block = select_block(ms, 1000, count, count_text, user_id="u1", project_id="", ranker=ranker)
    assert block.memory_ids == ("m2", "m1", "m0")
    default = select_block(ms, 1000, count, count_text, user_id="u1", project_id="")
    assert default.memory_ids == ("m2", "m1", "m0")  # newest first
    pinned = [replace(ms[0], pinned=True), *ms[1:]]
    assert (
        select_block(pinned, 1000, count, count_text, user_id="u1", project_id="").memory_ids[0]
        == "m0"
    )


def test_block_text_format() -> None:
    ms = [
        Memory("a", "", "prefers tabs", user_id="u", key="indent"),
        Memory("b", "", "line one\nline two", project_id="p"),
    ]
    text = block_text(ms)
    assert text.endswith("<memory>\n- indent: prefers tabs\n- line one\n  line two\n</memory>")
    assert block_text([]) == ""


# -- the block in the model input ------------------------------------------------------


def session_with(block: MemoryBlock) -> Session:
    return Session(session_id="s", system_prompt="sys", model="gpt-4o", memory=block)


def user(text: str) -> Message:
    return Message(Role.USER, (ContentBlock.of_text(text),))


def test_block_is_the_first_message_counted_and_hashed() -> None:
    block = MemoryBlock(block_text([Memory("a", "", "likes tea", user_id="u")]), ("a",))
    plain = SessionContext(session_with(MemoryBlock()), None, [], TOK)
    ctx = SessionContext(session_with(block), None, [], TOK)
    view = ctx.model_input()
    head = view.messages[0]
    assert head.metadata[MEMORY_METADATA_KEY] and head.seq == 0
    assert head.content[0].text == block.text
    assert view.tokens.memory_tokens == ctx.memory_tokens > 0
    assert view.tokens.total_tokens == plain.model_input().tokens.total_tokens + ctx.memory_tokens
    assert view.summary_messages == 1 and view.stable_messages == 1
    assert view.prefix_hash != plain.model_input().prefix_hash
    # Without a block the hash is what it always was.
    assert plain.model_input().prefix_hash == prefix_hash(session_with(MemoryBlock()), "")


def test_block_goes_before_the_summary_and_stays_while_messages_are_appended() -> None:
    block = MemoryBlock(block_text([Memory("a", "", "likes tea", user_id="u")]), ("a",))
    cp = Checkpoint("c1", "s", "the summary", first_kept_seq=1, tokens_before=10, create_time_us=1)
    ctx = SessionContext(session_with(block), cp, [], TOK)
    plan = ctx.plan_append([user("one")], now_us=1, new_message_id=iter(["x1"]))
    ctx.apply_append(plan)
    first = ctx.model_input()
    assert [MEMORY_METADATA_KEY in m.metadata for m in first.messages] == [True, False, False]
    assert first.summary_messages == 2 and first.stable_messages >= 2
    ctx.apply_append(ctx.plan_append([user("two")], now_us=2, new_message_id=iter(["x2"])))
    second = ctx.model_input()
    assert second.messages[: len(first.messages)] == first.messages
    assert second.prefix_hash == first.prefix_hash
    assert second.digests[: len(first.digests)] == first.digests
    for fmt in (
        Format.OPENAI_CHAT,
        Format.OPENAI_RESPONSES,
        Format.ANTHROPIC_MESSAGES,
        Format.GEMINI,
    ):
        body = json.loads(render_view(fmt, second, model="gpt-4o").json)
        items = next(body[k] for k in ("messages", "input", "contents") if k in body)
        if fmt is Format.OPENAI_CHAT:
            items = items[1:]  # after the system message
        # The block is the first provider message, before the summary and the turns.
        text = json.dumps(items[0], ensure_ascii=False)
        assert "likes tea" in text and text.index("likes tea") < len(text)
        assert "the summary" not in text or text.index("likes tea") < text.index("the summary")


# -- durable facts --------------------------------------------------------------------------


def test_durable_facts_are_split_from_the_summary() -> None:
    summary = (
        "## Goal\nship it\n\n"
        f"{DURABLE_FACTS_HEADING}\n- [user] prefers short answers\n- [project] uses Python 3.11\n"
        "- plain fact\nnot an item\n\n## Next Steps\n1. test"
    )
    rest, facts = split_durable_facts(summary)
    assert rest == "## Goal\nship it\n\n## Next Steps\n1. test"
    assert [(f.text, f.project_scope) for f in facts] == [
        ("prefers short answers", False),
        ("uses Python 3.11", True),
        ("plain fact", False),
    ]
    assert split_durable_facts("## Goal\nx") == ("## Goal\nx", ())


@settings(max_examples=100, deadline=None)
@given(
    st.text(),
    st.lists(
        st.text(
            st.characters(blacklist_characters="\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"),
            min_size=1,
        ).filter(lambda t: t.strip() and not t.strip().lower().startswith(("[user]", "[project]"))),
        max_size=5,
    ),
)
def test_split_finds_every_fact_it_was_given(body: str, facts: list[str]) -> None:
    body = "\n".join(line for line in body.split("\n") if not line.lstrip().startswith("#"))
    summary = f"{body}\n{DURABLE_FACTS_HEADING}\n" + "\n".join(f"- {f}" for f in facts)
    rest, found = split_durable_facts(summary)
    assert [f.text for f in found] == [f.strip() for f in facts]
    assert DURABLE_FACTS_HEADING not in rest


def test_prompt_asks_for_durable_facts_only_when_memory_write_is_on() -> None:
    kw = dict(
        previous_summary="", pinned_state="", files=FileLists(), instructions="", max_tokens=9
    )
    off = history_prompt("conv", **kw)  # type: ignore[arg-type]
    on = history_prompt("conv", durable_facts=True, **kw)  # type: ignore[arg-type]
    assert DURABLE_FACTS_HEADING not in off.user
    assert on.user.startswith(off.user) and DURABLE_FACTS_HEADING in on.user
    assert on.system == off.system
