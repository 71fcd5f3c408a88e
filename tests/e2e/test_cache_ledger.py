"""The cache ledger end to end: each live BuildModelInput shares a prefix with the
previous input of its session and format (ModelInput.cache_prefix), says why it
shrank, and GetUsage sums it, with predicted and observed cache reads side by side."""

from __future__ import annotations

import uuid
from typing import Any

from google.protobuf import field_mask_pb2

from ctxwarden.v1 import context_service_pb2 as pb
from ctxwarden.v1 import message_pb2 as m
from ctxwarden.v1 import session_pb2 as ses
from tests.e2e.conftest import Stub
from tests.support.builders import assistant, user

ANTHROPIC = pb.MODEL_INPUT_FORMAT_ANTHROPIC_MESSAGES
R = pb.CacheBreakReason


def create(stub: Stub) -> str:
    sid = f"cache-{uuid.uuid4().hex[:10]}"
    policy = ses.ContextPolicy(keep_recent_tokens=40, tokenizer="heuristic")
    tools = [ses.ToolDefinition(name="read", description="Reads", parameters_json="{}")]
    session = ses.Session(system_prompt="You help.", model="m-1", tools=tools, policy=policy)
    stub.CreateSession(pb.CreateSessionRequest(session_id=sid, session=session))
    return sid


def build(stub: Stub, sid: str, **kw: Any) -> pb.ModelInput:
    request = pb.BuildModelInputRequest(session_id=sid, report_cache_prefix=True, **kw)
    return stub.BuildModelInput(request, timeout=10)


def turn(stub: Stub, sid: str, i: int, **usage: int) -> None:
    answer = assistant(f"answer {i} " + "a" * 40)
    if usage:
        answer.usage.CopyFrom(m.Usage(**usage))
    msgs = [answer, user(f"question {i + 1} " + "q" * 40)]
    stub.AppendMessages(pb.AppendMessagesRequest(session_id=sid, messages=msgs), timeout=10)


def update(stub: Stub, sid: str, path: str, **fields: Any) -> None:
    current = stub.GetSession(pb.GetSessionRequest(session_id=sid))
    stub.UpdateSession(
        pb.UpdateSessionRequest(
            session=ses.Session(session_id=sid, **fields),
            update_mask=field_mask_pb2.FieldMask(paths=[path]),
            etag=current.etag,
        )
    )


def test_growing_inputs_share_all_of_the_previous_one(stub: Stub) -> None:
    sid = create(stub)
    stub.AppendMessages(pb.AppendMessagesRequest(session_id=sid, messages=[user("hi " * 20)]))
    first = build(stub, sid).cache_prefix
    assert first.break_reason == R.CACHE_BREAK_REASON_FIRST_INPUT and first.shared_tokens == 0
    assert build(stub, sid).cache_prefix.shared_tokens == first.input_tokens  # unchanged
    for i in range(3):
        turn(stub, sid, i)
        now = build(stub, sid).cache_prefix
        assert now.break_reason == R.CACHE_BREAK_REASON_UNSPECIFIED
        assert now.shared_tokens == now.previous_input_tokens < now.input_tokens
        assert now.shared_bytes > 0
    plain = stub.BuildModelInput(pb.BuildModelInputRequest(session_id=sid))
    assert not plain.HasField("cache_prefix")  # only when asked for


def test_rendered_prefix_bytes_are_a_common_prefix(stub: Stub) -> None:
    sid = create(stub)
    stub.AppendMessages(pb.AppendMessagesRequest(session_id=sid, messages=[user("start")]))
    previous = build(stub, sid, format=ANTHROPIC)
    for i in range(3):
        turn(stub, sid, i)
        now = build(stub, sid, format=ANTHROPIC)
        shared = now.cache_prefix.shared_bytes
        old, new = previous.rendered_json.encode(), now.rendered_json.encode()
        assert 0 < shared < len(new) and old[:shared] == new[:shared]
        previous = now


def test_each_break_names_its_reason(stub: Stub) -> None:
    sid = create(stub)
    stub.AppendMessages(pb.AppendMessagesRequest(session_id=sid, messages=[user("go " * 30)]))
    for i in range(6):
        turn(stub, sid, i)
    build(stub, sid)
    stub.RollbackTurn(pb.RollbackTurnRequest(session_id=sid, to_seq=9))
    assert build(stub, sid).cache_prefix.break_reason == R.CACHE_BREAK_REASON_ROLLBACK
    plan = stub.PrepareCompaction(pb.PrepareCompactionRequest(session_id=sid))
    stub.CommitCompaction(
        pb.CommitCompactionRequest(
            session_id=sid,
            plan_id=plan.plan_id,
            summary="Done so far.",
            turn_prefix_summary="Asked." if plan.split_turn else "",
        )
    )
    after = build(stub, sid).cache_prefix
    assert after.break_reason == R.CACHE_BREAK_REASON_COMPACTION
    assert after.shared_tokens < after.previous_input_tokens
    update(stub, sid, "system_prompt", system_prompt="You help more.")
    changed = build(stub, sid).cache_prefix
    assert changed.break_reason == R.CACHE_BREAK_REASON_SYSTEM_PROMPT
    assert changed.shared_tokens == 0
    update(stub, sid, "tools", tools=[ses.ToolDefinition(name="write", parameters_json="{}")])
    assert build(stub, sid).cache_prefix.break_reason == R.CACHE_BREAK_REASON_TOOLS
    update(stub, sid, "model", model="m-2")
    assert build(stub, sid).cache_prefix.break_reason == R.CACHE_BREAK_REASON_MODEL

    cache = stub.GetUsage(pb.GetUsageRequest(session_id=sid)).cache
    reasons = {b.reason: b.count for b in cache.breaks}
    for reason in ("ROLLBACK", "COMPACTION", "SYSTEM_PROMPT", "TOOLS", "MODEL", "FIRST_INPUT"):
        assert reasons[getattr(R, f"CACHE_BREAK_REASON_{reason}")] == 1
    assert cache.builds == 6


def test_a_new_counting_of_the_same_messages_is_no_first_input(stub: Stub) -> None:
    """A new tokenizer, or a model counted another way, makes UpdateSession recount every
    kept message. A provider gets the same bytes: after a new tokenizer everything is
    shared (the shared part of the previous input in the new counts too), after a new
    model the break is MODEL, never FIRST_INPUT (the session's comparison state is kept
    through the recount)."""
    sid = create(stub)
    stub.AppendMessages(pb.AppendMessagesRequest(session_id=sid, messages=[user("go " * 30)]))
    turn(stub, sid, 0)
    counted = build(stub, sid).tokens
    build(stub, sid, format=ANTHROPIC)
    before = build(stub, sid, format=ANTHROPIC)  # what an unchanged input shares
    policy = ses.ContextPolicy(keep_recent_tokens=40, tokenizer="tiktoken:o200k_base")
    update(stub, sid, "policy", policy=policy)
    native = build(stub, sid).cache_prefix
    assert native.break_reason == R.CACHE_BREAK_REASON_UNSPECIFIED
    # All shared; the previous input in the new counts too (what it shares of it).
    assert native.shared_tokens == native.input_tokens == native.previous_input_tokens
    assert native.input_tokens != sum(
        getattr(counted, f"{part}_tokens") for part in ("system", "tools", "message")
    )
    rendered = build(stub, sid, format=ANTHROPIC)
    assert rendered.rendered_json == before.rendered_json
    assert rendered.cache_prefix.break_reason == R.CACHE_BREAK_REASON_UNSPECIFIED
    assert rendered.cache_prefix.shared_bytes == before.cache_prefix.shared_bytes > 0
    update(stub, sid, "model", model="claude-sonnet-4-5")  # counted with other framing
    switched = build(stub, sid).cache_prefix
    assert switched.break_reason == R.CACHE_BREAK_REASON_MODEL
    assert switched.shared_tokens == 0 and switched.previous_input_tokens == native.input_tokens
    reasons = {b.reason for b in stub.GetUsage(pb.GetUsageRequest(session_id=sid)).cache.breaks}
    assert reasons == {R.CACHE_BREAK_REASON_FIRST_INPUT, R.CACHE_BREAK_REASON_MODEL}


def test_ledger_sums_predictions_and_pairs_them_with_reported_cache_reads(stub: Stub) -> None:
    sid = create(stub)
    stub.AppendMessages(pb.AppendMessagesRequest(session_id=sid, messages=[user("hello " * 10)]))
    prefixes = [build(stub, sid).cache_prefix]
    for i in range(3):
        # The provider answers the input just built; the next build follows the answer.
        turn(stub, sid, i, input_tokens=5, cache_read_tokens=100 + i, cache_write_tokens=7)
        prefixes.append(build(stub, sid, format=ANTHROPIC).cache_prefix)
        prefixes.append(build(stub, sid, format=ANTHROPIC).cache_prefix)  # a second, unpaired
    cache = stub.GetUsage(pb.GetUsageRequest(session_id=sid)).cache
    assert cache.builds == len(prefixes)
    assert cache.input_tokens == sum(p.input_tokens for p in prefixes)
    assert cache.predicted_cached_tokens == sum(p.shared_tokens for p in prefixes)
    assert cache.paired_calls == 3  # each answer pairs with the last build before it
    paired = [prefixes[0], prefixes[2], prefixes[4]]
    assert cache.paired_predicted_cached_tokens == sum(p.shared_tokens for p in paired)
    assert cache.paired_observed_cache_read_tokens == 100 + 101 + 102
    assert cache.paired_observed_prompt_tokens == 3 * (5 + 7) + 303
