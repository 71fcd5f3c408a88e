"""Layered compaction end to end: clear old tool results first, summarise only if
that is not enough (policy.clear_tool_results_at_least)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from bench.layered import run_all

from ctxwarden.v1 import context_service_pb2 as pb
from ctxwarden.v1 import context_service_pb2_grpc as pb_grpc
from ctxwarden.v1 import message_pb2 as msg
from ctxwarden.v1 import session_pb2 as ses
from tests.e2e.conftest import NewSession, Stub
from tests.e2e.test_messages import append
from tests.support.builders import assistant, result, user
from tests.support.errors import expect_error
from tests.support.server import ServerProcess

CLEARING = "tool-result-clearing"


class Layered:
    """A server with the extractive summariser, of this module only (it restarts it)."""

    def __init__(self, server: ServerProcess) -> None:
        self.server = server
        self.channel = grpc.insecure_channel(server.target)
        self.stub = pb_grpc.ContextServiceStub(self.channel)

    def restart(self) -> None:
        self.channel.close()
        self.server.restart()
        self.channel = grpc.insecure_channel(self.server.target)
        self.stub = pb_grpc.ContextServiceStub(self.channel)


@pytest.fixture(scope="module")
def layered(backend_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Layered]:
    server = ServerProcess(
        backend_url,
        log_dir=Path(tmp_path_factory.mktemp("layered")),
        extra_args=["--summarizer", "extractive"],
    )
    server.start()
    env = Layered(server)
    try:
        yield env
    finally:
        env.channel.close()
        server.stop()


def layered_policy(**kw: Any) -> ses.ContextPolicy:
    """Threshold 7,000 tokens (heuristic: ~4 characters a token)."""
    values: dict[str, Any] = {
        "context_window": 8000,
        "reserve_tokens": 1000,
        "keep_recent_tokens": 1500,
        "tokenizer": "heuristic",
        "clear_tool_results_at_least": 2000,
        "clear_tool_results_keep": 2,
    }
    values.update(kw)
    return ses.ContextPolicy(**values)


def create(stub: Stub, policy: ses.ContextPolicy) -> str:
    sid = f"lay-{uuid.uuid4().hex[:10]}"
    stub.CreateSession(
        pb.CreateSessionRequest(
            session_id=sid, session=ses.Session(policy=policy, system_prompt="s")
        )
    )
    return sid


def turn(stub: Stub, sid: str, i: int, output_chars: int = 4000, ask_chars: int = 40) -> None:
    """A coding turn: the user asks, the assistant reads a file, gets it, answers."""
    append(
        stub,
        sid,
        user(f"step {i}: " + "u" * ask_chars),
        assistant(f"reading f{i}.py", [(f"c{i}", "read", {"path": f"f{i}.py"})]),
        result(f"c{i}", f"# f{i}.py\n" + f"line {i}\n" * (output_chars // 7), name="read"),
        assistant(f"f{i}.py looks fine"),
    )


def build(stub: Stub, sid: str, **kw: Any) -> pb.ModelInput:
    return stub.BuildModelInput(pb.BuildModelInputRequest(session_id=sid, **kw))


def compactions(stub: Stub, sid: str) -> list[pb.Compaction]:
    return list(stub.ListCompactions(pb.ListCompactionsRequest(session_id=sid)).compactions)


def fill_to_threshold(stub: Stub, sid: str, start: int = 0, **kw: Any) -> int:
    """Append turns until the input crosses the threshold; the next turn's index."""
    i = start
    while not build(stub, sid).compaction_recommended:
        turn(stub, sid, i, **kw)
        i += 1
    return i


def result_seqs(mi: pb.ModelInput) -> list[int]:
    return [m.seq for m in mi.messages if m.role == msg.ROLE_TOOL_RESULT]


def test_clearing_frees_enough_in_one_step_and_stubs_read_back(layered: Layered) -> None:
    stub = layered.stub
    sid = create(stub, layered_policy())
    fill_to_threshold(stub, sid)
    before = build(stub, sid)
    mi = build(stub, sid, auto_compact=True)
    assert not mi.compaction_recommended
    (cleared,) = compactions(stub, sid)
    assert cleared.clearing_only and cleared.summarizer == CLEARING
    assert cleared.summary == "" and cleared.first_kept_seq == 1
    # One step frees at least clear_tool_results_at_least, and the input shrank by it.
    assert cleared.tool_result_tokens_cleared >= 2000
    assert before.tokens.total_tokens - mi.tokens.total_tokens == (
        cleared.tool_result_tokens_cleared
    )
    assert cleared.tokens_before == before.tokens.total_tokens
    assert cleared.tokens_after == mi.tokens.total_tokens
    # Every result but the newest two is a stub that says how to read it back.
    seqs = result_seqs(before)
    assert cleared.tool_results_cleared == len(seqs) - 2
    assert cleared.tool_results_cleared_through_seq == seqs[-3]
    stubbed = [n.seq for n in mi.notices if n.code == "TOOL_OUTPUT_STUBBED"]
    assert stubbed == seqs[:-2]
    by_seq = {m.seq: m for m in mi.messages}
    full = {m.seq: m for m in before.messages}
    for seq in seqs[:-2]:
        text = by_seq[seq].content[0].text.text
        assert f"GetToolOutput(seq={seq})" in text and len(text) < 200
        back = stub.GetToolOutput(pb.GetToolOutputRequest(session_id=sid, seq=seq))
        assert back.content == full[seq].content[0].text.text
    for seq in seqs[-2:]:
        assert by_seq[seq] == full[seq]
    # No summary message: nothing was summarised.
    assert "ctxwarden.summary" not in mi.messages[0].metadata


def test_between_clearings_the_input_only_grows_at_the_end(layered: Layered) -> None:
    stub = layered.stub
    sid = create(stub, layered_policy())
    i = fill_to_threshold(stub, sid)
    previous = build(stub, sid, auto_compact=True)
    clearings = 1
    for _ in range(12):
        turn(stub, sid, i)
        i += 1
        mi = build(stub, sid, auto_compact=True)
        if mi.compaction_id != previous.compaction_id:
            clearings += 1
            newest = compactions(stub, sid)[0]
            assert newest.clearing_only and newest.compaction_id == mi.compaction_id
        else:
            held = len(previous.messages)
            assert list(mi.messages[:held]) == list(previous.messages)
            assert len(mi.messages) == held + 4
        previous = mi
    listed = compactions(stub, sid)
    assert len(listed) == clearings >= 2  # cleared again, never summarised
    assert all(c.clearing_only for c in listed)


def test_restart_gives_byte_identical_input(layered: Layered) -> None:
    sid = create(layered.stub, layered_policy())
    i = fill_to_threshold(layered.stub, sid)
    build(layered.stub, sid, auto_compact=True)
    turn(layered.stub, sid, i)
    before = build(layered.stub, sid).SerializeToString(deterministic=True)
    rendered = build(layered.stub, sid, format=pb.MODEL_INPUT_FORMAT_OPENAI_CHAT).rendered_json
    layered.restart()
    policy = layered.stub.GetSession(pb.GetSessionRequest(session_id=sid)).policy
    assert (policy.clear_tool_results_at_least, policy.clear_tool_results_keep) == (2000, 2)
    assert build(layered.stub, sid).SerializeToString(deterministic=True) == before
    assert (
        build(layered.stub, sid, format=pb.MODEL_INPUT_FORMAT_OPENAI_CHAT).rendered_json == rendered
    )


def test_summarises_only_when_clearing_is_not_enough(layered: Layered) -> None:
    stub = layered.stub
    # Long user messages and short tool outputs: clearing cannot reach the threshold.
    sid = create(stub, layered_policy(clear_tool_results_at_least=500))
    i = fill_to_threshold(stub, sid, output_chars=700, ask_chars=2400)
    turn(stub, sid, i, output_chars=700, ask_chars=8000)
    mi = build(stub, sid, auto_compact=True)
    assert not mi.compaction_recommended
    (summarised,) = compactions(stub, sid)
    assert summarised.summarizer == "extractive" and not summarised.clearing_only
    assert summarised.tool_results_cleared_through_seq == 0
    # Clearing that would free less than at_least is not done either.
    sid = create(stub, layered_policy(clear_tool_results_at_least=100_000))
    fill_to_threshold(stub, sid)
    build(stub, sid, auto_compact=True)
    (summarised,) = compactions(stub, sid)
    assert summarised.summarizer == "extractive"


def test_compact_clears_first_and_a_later_summary_keeps_the_clearing(layered: Layered) -> None:
    stub = layered.stub
    sid = create(stub, layered_policy())
    i = fill_to_threshold(stub, sid)
    req = pb.CompactRequest(session_id=sid, request_id="r1")
    cleared = stub.Compact(req)
    assert cleared.clearing_only and stub.Compact(req) == cleared  # replayed
    # Now make clearing insufficient (long user turns): Compact summarises and
    # carries the clearing forward for the messages it keeps.
    for j in range(i, i + 3):
        turn(stub, sid, j, output_chars=100, ask_chars=9000)
    summarised = stub.Compact(pb.CompactRequest(session_id=sid))
    assert summarised.summarizer == "extractive" and not summarised.clearing_only
    through = cleared.tool_results_cleared_through_seq
    assert summarised.tool_results_cleared_through_seq == through
    assert summarised.tool_results_cleared == 0
    mi = build(stub, sid)
    assert mi.messages[0].metadata["ctxwarden.summary"] == summarised.compaction_id


def test_clearing_needs_no_summariser(stub: Stub, new_session: NewSession) -> None:
    sid = new_session(policy=layered_policy()).session_id
    fill_to_threshold(stub, sid)
    mi = build(stub, sid, auto_compact=True)
    assert not mi.compaction_recommended
    assert [c.clearing_only for c in compactions(stub, sid)] == [True]
    # Not enough to clear and no summariser: the input comes back as it is.
    sid = new_session(policy=layered_policy(clear_tool_results_at_least=100_000)).session_id
    fill_to_threshold(stub, sid)
    assert build(stub, sid, auto_compact=True).compaction_recommended
    assert compactions(stub, sid) == []
    bad = layered_policy(clear_tool_results_keep=-1)
    err = expect_error(grpc.StatusCode.INVALID_ARGUMENT, "INVALID_POLICY", new_session, policy=bad)
    assert "policy.clear_tool_results_keep" in err.details()


def test_simulated_session_layered_beats_static_and_no_layering(layered: Layered) -> None:
    """bench.layered's comparison, small: deterministic counts, no timing."""
    none, static, clearing = run_all(layered.stub, turns=10, window=20_000)
    assert clearing.clearings >= 1 and clearing.summariser_calls < none.summariser_calls
    assert clearing.cache_hit_ratio > static.cache_hit_ratio
    assert none.clearings == static.clearings == 0
