"""Compaction end to end: the agent-side path, checkpoints, rollback across them,
restart, tool-output budget. (Server-side summarisers: test_summarizers.py.)"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from ctxwarden.v1 import context_service_pb2 as pb
from ctxwarden.v1 import context_service_pb2_grpc as pb_grpc
from ctxwarden.v1 import session_pb2 as ses
from tests.e2e.conftest import NewSession, Stub
from tests.e2e.test_messages import append
from tests.support.builders import assistant, result, user
from tests.support.errors import expect_error
from tests.support.server import ServerProcess

ABORTED = grpc.StatusCode.ABORTED
PRECONDITION = grpc.StatusCode.FAILED_PRECONDITION


def policy(**kw: Any) -> ses.ContextPolicy:
    return ses.ContextPolicy(keep_recent_tokens=kw.pop("keep", 60), **kw)


def turns(stub: Stub, sid: str, n: int, start: int = 0) -> None:
    """n user turns; each: user, assistant read call, its result, assistant answer."""
    for i in range(start, start + n):
        append(
            stub,
            sid,
            user(f"turn {i}: please read file{i}.py " + "u" * 80),
            assistant(f"reading {i}", [(f"c{i}", "read", {"path": f"src/file{i}.py"})]),
            result(f"c{i}", f"contents of file{i} " + "r" * 120, name="read"),
            assistant(f"file{i} defines thing{i} " + "a" * 60),
        )


def prepare(stub: Stub, sid: str, **kw: Any) -> pb.CompactionPlan:
    return stub.PrepareCompaction(pb.PrepareCompactionRequest(session_id=sid, **kw))


def commit(
    stub: Stub, plan: pb.CompactionPlan, summary: str = "SUMMARY", prefix: str = ""
) -> pb.Compaction:
    return stub.CommitCompaction(
        pb.CommitCompactionRequest(
            session_id=plan.session_id,
            plan_id=plan.plan_id,
            summary=summary,
            turn_prefix_summary=prefix or ("PREFIX" if plan.split_turn else ""),
        )
    )


def build(stub: Stub, sid: str, **kw: Any) -> pb.ModelInput:
    return stub.BuildModelInput(pb.BuildModelInputRequest(session_id=sid, **kw))


def test_agent_side_compaction(stub: Stub, new_session: NewSession) -> None:
    sid = new_session(system_prompt="sys", policy=policy(), pinned_state="step 3 of 7").session_id
    turns(stub, sid, 6)
    before = build(stub, sid)
    plan = prepare(stub, sid, instructions="focus on file names")
    assert plan.plan_id and plan.session_id == sid
    assert plan.first_kept_seq > 1 and plan.tokens_before == before.tokens.total_tokens
    assert plan.summarized_from_seq == 1 and plan.summarized_to_seq == plan.first_kept_seq - 1
    assert plan.previous_summary == ""
    hp = plan.history_prompt
    for section in (
        "## Goal",
        "## Constraints & Preferences",
        "### Done",
        "### In Progress",
        "### Blocked",
        "## Key Decisions",
        "## Next Steps",
        "## Critical Context",
    ):
        assert section in hp.user
    assert "[User]: turn 0: please read file0.py" in hp.user
    assert 'read({"path": "src/file0.py"})' in hp.user
    assert "<pinned-state>\nstep 3 of 7\n</pinned-state>" in hp.user
    assert "Additional focus: focus on file names" in hp.user
    assert "<read-files>" in hp.user and "src/file0.py" in hp.user
    assert hp.max_tokens == int(0.8 * 16384) and hp.system
    assert plan.expire_time.seconds > time.time()

    done = commit(stub, plan, "## Goal\nread all files")
    assert done.session_id == sid and done.first_kept_seq == plan.first_kept_seq
    assert done.summary == "## Goal\nread all files" and done.summarizer == "agent"
    assert done.trigger == pb.COMPACTION_TRIGGER_MANUAL and not done.superseded
    assert done.tokens_before == plan.tokens_before and done.tokens_after < done.tokens_before
    assert "src/file0.py" in done.read_files and list(done.modified_files) == []

    after = build(stub, sid)
    head = after.messages[0]
    assert head.seq == 0 and head.metadata["ctxwarden.summary"] == done.compaction_id
    text = head.content[0].text.text
    assert text.startswith(
        "The conversation history before this point was compacted into the following summary:"
    )
    assert "<summary>\n## Goal\nread all files\n" in text
    assert "<read-files>" in text and "<pinned-state>\nstep 3 of 7\n</pinned-state>" in text
    assert after.messages[1].seq == done.first_kept_seq
    assert after.compaction_id == done.compaction_id and after.first_kept_seq == done.first_kept_seq
    assert after.tokens.total_tokens == done.tokens_after
    assert after.tokens.summary_tokens > 0 and after.prefix_hash != before.prefix_hash
    # History is never deleted.
    history = stub.ListMessages(pb.ListMessagesRequest(session_id=sid, page_size=1000)).messages
    assert [m.seq for m in history] == list(range(1, 25))
    # Commit is idempotent per plan.
    assert commit(stub, plan, "something else") == done
    listed = stub.ListCompactions(pb.ListCompactionsRequest(session_id=sid)).compactions
    assert [c.compaction_id for c in listed] == [done.compaction_id]


def test_second_compaction_updates_the_first_and_keeps_its_tail(
    stub: Stub, new_session: NewSession
) -> None:
    sid = new_session(policy=policy()).session_id
    turns(stub, sid, 5)
    first = commit(stub, prepare(stub, sid), "FIRST SUMMARY")
    kept_first = [m for m in build(stub, sid).messages[1:]]
    turns(stub, sid, 5, start=5)
    plan = prepare(stub, sid)
    # The previous summary (with its turn-prefix part, if the cut split a turn).
    assert plan.previous_summary.startswith("FIRST SUMMARY")
    assert f"<previous-summary>\n{plan.previous_summary}\n</previous-summary>" in (
        plan.history_prompt.user
    )
    assert "keep everything in the previous summary that is still true" in plan.history_prompt.user
    # The walk starts at the previous first_kept_seq: what the first compaction
    # kept is summarised now (pi-mono loses these messages).
    assert plan.summarized_from_seq == first.first_kept_seq
    first_kept_text = kept_first[0].content[0].text.text
    assert first_kept_text[:40] in plan.history_prompt.user
    second = commit(stub, plan, "SECOND SUMMARY")
    assert second.first_kept_seq > first.first_kept_seq
    listed = stub.ListCompactions(pb.ListCompactionsRequest(session_id=sid, page_size=1))
    assert [c.compaction_id for c in listed.compactions] == [second.compaction_id]
    rest = stub.ListCompactions(
        pb.ListCompactionsRequest(session_id=sid, page_size=1, page_token=listed.next_page_token)
    )
    assert [c.compaction_id for c in rest.compactions] == [first.compaction_id]
    assert rest.next_page_token == ""


def test_nothing_to_compact_and_no_summarizer(stub: Stub, new_session: NewSession) -> None:
    sid = new_session().session_id  # default keep_recent_tokens 20000
    turns(stub, sid, 2)
    expect_error(PRECONDITION, "NOTHING_TO_COMPACT", prepare, stub, sid)
    err = expect_error(
        PRECONDITION, "NO_SUMMARIZER", stub.Compact, pb.CompactRequest(session_id=sid)
    )
    assert "PrepareCompaction" in err.details() and "--summarizer" in err.details()


def test_appends_after_the_plan_are_fine(stub: Stub, new_session: NewSession) -> None:
    sid = new_session(policy=policy()).session_id
    turns(stub, sid, 5)
    plan = prepare(stub, sid)
    turns(stub, sid, 1, start=5)
    done = commit(stub, plan)
    seqs = [m.seq for m in build(stub, sid).messages[1:]]
    assert seqs[0] == done.first_kept_seq and seqs[-1] == 24


def test_rollback_makes_plan_stale(stub: Stub, new_session: NewSession) -> None:
    sid = new_session(policy=policy()).session_id
    turns(stub, sid, 5)
    plan = prepare(stub, sid)
    stub.RollbackTurn(pb.RollbackTurnRequest(session_id=sid, to_seq=18))
    expect_error(ABORTED, "PLAN_STALE", commit, stub, plan)


def test_concurrent_plans_one_wins(stub: Stub, new_session: NewSession) -> None:
    sid = new_session(policy=policy()).session_id
    turns(stub, sid, 5)
    a, b = prepare(stub, sid), prepare(stub, sid)
    commit(stub, a)
    expect_error(ABORTED, "PLAN_STALE", commit, stub, b)
    expect_error(
        grpc.StatusCode.NOT_FOUND,
        "PLAN_NOT_FOUND",
        stub.CommitCompaction,
        pb.CommitCompactionRequest(session_id=sid, plan_id="nope", summary="x"),
    )


def test_split_turn_needs_turn_prefix_summary(stub: Stub, new_session: NewSession) -> None:
    sid = new_session(policy=policy(keep=100)).session_id
    append(stub, sid, user("start " + "u" * 400))
    for i in range(8):  # one long turn of tool calls
        append(
            stub,
            sid,
            assistant(f"step {i}", [(f"k{i}", "bash", {"cmd": f"make {i}"})]),
            result(f"k{i}", "o" * 200),
        )
    plan = prepare(stub, sid)
    assert plan.split_turn and plan.turn_prefix_prompt.user
    assert "## Original Request" in plan.turn_prefix_prompt.user
    assert plan.turn_prefix_prompt.max_tokens == plan.history_prompt.max_tokens // 2 or (
        not plan.HasField("history_prompt")
    )
    expect_error(
        grpc.StatusCode.INVALID_ARGUMENT,
        "MISSING_FIELD",
        stub.CommitCompaction,
        pb.CommitCompactionRequest(session_id=sid, plan_id=plan.plan_id, summary="S"),
    )
    done = commit(stub, plan, "S", "the user asked to build")
    assert done.split_turn and done.turn_prefix_summary == "the user asked to build"
    text = build(stub, sid).messages[0].content[0].text.text
    assert "Turn context (split turn):\n\nthe user asked to build" in text
    kept = build(stub, sid).messages[1]
    assert kept.role == 2  # the kept tail starts with an assistant message, never a result


def test_rollback_across_checkpoint_supersedes_it(stub: Stub, new_session: NewSession) -> None:
    sid = new_session(policy=policy()).session_id
    turns(stub, sid, 5)
    first = commit(stub, prepare(stub, sid), "ONE")
    turns(stub, sid, 5, start=5)
    second = commit(stub, prepare(stub, sid), "TWO")
    # Rewind to between the two checkpoints' cuts: the second is superseded.
    to_seq = first.first_kept_seq + 1
    assert to_seq < second.first_kept_seq - 1
    r = stub.RollbackTurn(pb.RollbackTurnRequest(session_id=sid, to_seq=to_seq))
    assert list(r.rolled_back_seqs) == list(range(to_seq + 1, 41))
    mi = build(stub, sid)
    assert mi.compaction_id == first.compaction_id
    assert [m.seq for m in mi.messages[1:]] == list(range(first.first_kept_seq, to_seq + 1))
    listed = {
        c.compaction_id: c
        for c in stub.ListCompactions(pb.ListCompactionsRequest(session_id=sid)).compactions
    }
    assert listed[second.compaction_id].superseded and not listed[first.compaction_id].superseded
    # Rewind past the first one too: no checkpoint left, full history from seq 1.
    stub.RollbackTurn(pb.RollbackTurnRequest(session_id=sid, to_seq=3))
    mi = build(stub, sid)
    assert mi.compaction_id == "" and [m.seq for m in mi.messages] == [1, 2, 3]
    assert stub.GetSession(pb.GetSessionRequest(session_id=sid)).last_seq == 40
    append(stub, sid, assistant("back on track"))
    assert [m.seq for m in build(stub, sid).messages] == [1, 2, 3, 41]


def test_file_lists_are_kept_by_program(stub: Stub, new_session: NewSession) -> None:
    sid = new_session(policy=policy(keep=30)).session_id
    append(
        stub,
        sid,
        user("edit things " + "u" * 100),
        assistant("", [("r1", "read", {"path": "a.py"}), ("r2", "read", {"path": "b.py"})]),
        result("r1", "A" * 100),
        result("r2", "B" * 100),
        assistant("", [("w1", "edit", {"path": "b.py", "old": "x", "new": "y"})]),
        result("w1", "ok"),
        assistant("", [("w2", "write", {"path": "c.py", "content": "z"})]),
        result("w2", "ok"),
        user("thanks " + "t" * 200),
        assistant("done " + "d" * 200),
    )
    done = commit(stub, prepare(stub, sid))
    assert list(done.read_files) == ["a.py"]
    assert list(done.modified_files) == ["b.py", "c.py"]
    text = build(stub, sid).messages[0].content[0].text.text
    assert "<read-files>\na.py\n</read-files>" in text
    assert "<modified-files>\nb.py\nc.py\n</modified-files>" in text


def test_get_tool_output_and_keep_tool_results(stub: Stub, new_session: NewSession) -> None:
    sid = new_session(policy=policy(keep_tool_results=1, tool_output_max_bytes=100)).session_id
    big = "".join(f"línea {i}\n" for i in range(400))
    append(
        stub,
        sid,
        user("go"),
        assistant("", [("a", "cat", {})]),
        result("a", big, name="cat"),
        assistant("", [("b", "cat", {})]),
        result("b", "short", name="cat"),
    )
    mi = build(stub, sid)
    codes = [(n.code, n.seq) for n in mi.notices]
    assert ("TOOL_OUTPUT_STUBBED", 3) in codes
    stub_text = mi.messages[2].content[0].text.text
    assert "GetToolOutput(seq=3)" in stub_text and str(len(big.encode())) in stub_text
    assert mi.messages[4].content[0].text.text == "short"
    # Read the full output back in chunks, never splitting a character.
    chunks, offset = [], 0
    while True:
        r = stub.GetToolOutput(
            pb.GetToolOutputRequest(session_id=sid, seq=3, offset=offset, limit=1001)
        )
        assert r.total_bytes == len(big.encode()) and r.total_lines == 400
        chunks.append(r.content)
        if not r.next_offset:
            break
        offset = r.next_offset
    assert "".join(chunks) == big and len(chunks) > 3
    expect_error(
        grpc.StatusCode.INVALID_ARGUMENT,
        "NOT_A_TOOL_RESULT",
        stub.GetToolOutput,
        pb.GetToolOutputRequest(session_id=sid, seq=1),
    )
    expect_error(
        grpc.StatusCode.NOT_FOUND,
        "MESSAGE_NOT_FOUND",
        stub.GetToolOutput,
        pb.GetToolOutputRequest(session_id=sid, seq=99),
    )


@pytest.fixture
def ttl_server(backend_url: str, tmp_path: Path) -> Iterator[ServerProcess]:
    proc = ServerProcess(backend_url, log_dir=tmp_path, extra_args=["--compaction-plan-ttl", "1"])
    proc.start()
    try:
        yield proc
    finally:
        proc.stop()


def test_plan_expires(ttl_server: ServerProcess) -> None:
    with grpc.insecure_channel(ttl_server.target) as ch:
        stub = pb_grpc.ContextServiceStub(ch)
        sid = f"ttl-{uuid.uuid4().hex[:8]}"
        stub.CreateSession(
            pb.CreateSessionRequest(session_id=sid, session=ses.Session(policy=policy()))
        )
        turns(stub, sid, 4)
        plan = prepare(stub, sid)
        time.sleep(1.2)
        expect_error(PRECONDITION, "PLAN_EXPIRED", commit, stub, plan)


def test_restart_after_compaction_is_byte_identical(backend_url: str, tmp_path: Path) -> None:
    server = ServerProcess(backend_url, log_dir=tmp_path)
    server.start()
    try:
        with grpc.insecure_channel(server.target) as ch:
            stub = pb_grpc.ContextServiceStub(ch)
            sid = f"rc-{uuid.uuid4().hex[:8]}"
            stub.CreateSession(
                pb.CreateSessionRequest(
                    session_id=sid, session=ses.Session(policy=policy(), pinned_state="pin")
                )
            )
            turns(stub, sid, 5)
            commit(stub, prepare(stub, sid), "S1")
            turns(stub, sid, 2, start=5)
            before = build(stub, sid).SerializeToString(deterministic=True)
        server.restart()
        with grpc.insecure_channel(server.target) as ch:
            stub = pb_grpc.ContextServiceStub(ch)
            assert build(stub, sid).SerializeToString(deterministic=True) == before
    finally:
        server.stop()
