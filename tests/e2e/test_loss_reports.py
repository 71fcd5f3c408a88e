"""Loss reports end to end: every checkpoint (Compact, CommitCompaction, a clearing)
returns and stores what its span held and where it survives; PrepareCompaction
lists the anchors; min_anchor_survival refuses a summary that loses too much;
preserve_lost_anchors puts lost constraints and open tasks back, once."""

from __future__ import annotations

import json
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
from tests.e2e.test_messages import append
from tests.support.builders import assistant, result, user
from tests.support.errors import error_info, expect_error
from tests.support.server import ServerProcess

Stub = pb_grpc.ContextServiceStub
CONSTRAINT = ses.ANCHOR_CATEGORY_CONSTRAINT
OPEN_TASK = ses.ANCHOR_CATEGORY_OPEN_TASK
FILE_PATH = ses.ANCHOR_CATEGORY_FILE_PATH
IDENTIFIER = ses.ANCHOR_CATEGORY_IDENTIFIER


@pytest.fixture(scope="module")
def stub(backend_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stub]:
    """A server with the extractive summariser, of this module only."""
    server = ServerProcess(
        backend_url,
        log_dir=Path(tmp_path_factory.mktemp("loss")),
        extra_args=["--summarizer", "extractive", "--background-compactions", "1"],
    )
    server.start()
    try:
        with grpc.insecure_channel(server.target) as channel:
            yield pb_grpc.ContextServiceStub(channel)
    finally:
        server.stop()


def create(stub: Stub, **policy: Any) -> str:
    sid = f"loss-{uuid.uuid4().hex[:10]}"
    values: dict[str, Any] = {"keep_recent_tokens": 80, "tokenizer": "heuristic"}
    values.update(policy)
    stub.CreateSession(
        pb.CreateSessionRequest(
            session_id=sid,
            session=ses.Session(
                system_prompt="s", pinned_state="Task: uploader", policy=ses.ContextPolicy(**values)
            ),
        )
    )
    return sid


TURNS = [
    "You must never push to main. Fix UP-7 in src/uploader.py.",
    "Always keep the timeout at 30 s.",
    "TODO: add retries with backoff",
    "Which port does staging use?",
]


def fill(stub: Stub, sid: str, texts: list[str] = TURNS, pad: int = 6) -> None:
    for i, text in enumerate([*texts, *(f"filler step {j}" for j in range(pad))]):
        append(
            stub,
            sid,
            user(text),
            assistant(f"reading f{i}.py", [(f"c{i}", "read", {"path": f"src/f{i}.py"})]),
            result(f"c{i}", "x" * 400, name="read"),
            assistant("done " + "y" * 200),
        )


def failed(call_id: str, text: str) -> Any:
    """An error tool result (its text is scanned for anchors)."""
    out = result(call_id, text, name="bash")
    out.is_error = True
    return out


def commit(stub: Stub, plan: pb.CompactionPlan, summary: str, **kw: Any) -> pb.Compaction:
    return stub.CommitCompaction(
        pb.CommitCompactionRequest(
            session_id=plan.session_id,
            plan_id=plan.plan_id,
            summary=summary,
            turn_prefix_summary="the turn so far" if plan.split_turn else "",
            **kw,
        )
    )


def counts(report: pb.CompactionLossReport) -> dict[int, pb.AnchorCategoryCount]:
    return {c.category: c for c in report.categories}


def listed(stub: Stub, sid: str) -> list[pb.Compaction]:
    return list(stub.ListCompactions(pb.ListCompactionsRequest(session_id=sid)).compactions)


def test_agent_side_plan_lists_anchors_and_commit_reports_them(stub: Stub) -> None:
    sid = create(stub)
    fill(stub, sid)
    plan = stub.PrepareCompaction(pb.PrepareCompactionRequest(session_id=sid))
    texts = {(a.category, a.text) for a in plan.anchors}
    assert {
        (CONSTRAINT, "You must never push to main."),
        (CONSTRAINT, "Always keep the timeout at 30 s."),
        (OPEN_TASK, "TODO: add retries with backoff"),
        (IDENTIFIER, "UP-7"),
        (FILE_PATH, "src/uploader.py"),
        (ses.ANCHOR_CATEGORY_QUANTITY, "30 s"),
        (ses.ANCHOR_CATEGORY_TOOL_CALL, "read path=src/f0.py"),
    } <= texts
    assert all(plan.summarized_from_seq <= a.seq <= plan.summarized_to_seq for a in plan.anchors)
    assert plan.anchors_omitted == 0

    done = commit(stub, plan, "Fixing UP-7 in src/uploader.py. You must never push to main.")
    r = done.loss_report
    assert (r.span_from_seq, r.span_to_seq) == (1, done.first_kept_seq - 1)
    by = counts(r)
    assert [c.category for c in r.categories] == list(range(1, 8))
    assert by[CONSTRAINT].total == 2 and by[CONSTRAINT].summary == 1
    assert by[CONSTRAINT].lost == 1 and by[CONSTRAINT].survival == 0.5
    assert by[IDENTIFIER].summary == 1 and by[FILE_PATH].file_lists >= 1
    assert by[OPEN_TASK].lost == 1  # the question was answered later in the span
    lost = {(a.category, a.text) for a in r.lost_anchors}
    assert (CONSTRAINT, "Always keep the timeout at 30 s.") in lost
    assert (OPEN_TASK, "TODO: add retries with backoff") in lost
    # Stored with the checkpoint: ListCompactions returns the same report.
    (first,) = listed(stub, sid)
    assert first.loss_report == r
    # A retried commit of the same plan answers the stored checkpoint, report included.
    again = commit(stub, plan, "other")
    assert again.loss_report == r


def test_min_anchor_survival_refuses_then_accepts_a_better_summary(stub: Stub) -> None:
    sid = create(stub)
    fill(stub, sid)
    plan = stub.PrepareCompaction(pb.PrepareCompactionRequest(session_id=sid))
    minimum = [
        pb.AnchorSurvival(category=CONSTRAINT, min_fraction=1.0),
        pb.AnchorSurvival(category=OPEN_TASK, min_fraction=0.5),
    ]

    err = expect_error(
        grpc.StatusCode.FAILED_PRECONDITION,
        "ANCHORS_LOST",
        commit,
        stub,
        plan,
        "Working on the uploader. You must never push to main.",
        min_anchor_survival=minimum,
    )
    meta = error_info(err).metadata
    assert meta["categories"] == "constraint,open_task"
    assert json.loads(meta["constraint_missing"]) == ["Always keep the timeout at 30 s."]
    assert meta["constraint_survival"] == "0.5000" and meta["constraint_required"] == "1.0000"
    assert "Always keep the timeout at 30 s." in err.details()
    assert listed(stub, sid) == []  # nothing was stored; the plan is still valid

    for bad in (1.5, -0.1, float("nan")):
        expect_error(
            grpc.StatusCode.INVALID_ARGUMENT,
            "INVALID_ANCHOR_SURVIVAL",
            commit,
            stub,
            plan,
            "x",
            min_anchor_survival=[pb.AnchorSurvival(category=CONSTRAINT, min_fraction=bad)],
        )
    expect_error(
        grpc.StatusCode.INVALID_ARGUMENT,
        "INVALID_ANCHOR_SURVIVAL",
        commit,
        stub,
        plan,
        "x",
        min_anchor_survival=[pb.AnchorSurvival(min_fraction=0.5)],
    )

    done = commit(
        stub,
        plan,
        "- You must never push to main.\n- Always keep the timeout at 30 s.\n"
        "- TODO: add retries with backoff",
        min_anchor_survival=minimum,
    )
    by = counts(done.loss_report)
    assert by[CONSTRAINT].survival == 1.0 and by[OPEN_TASK].survival == 1.0
    assert [c.compaction_id for c in listed(stub, sid)] == [done.compaction_id]


def test_server_side_compact_reports_and_preserves_lost_anchors(stub: Stub) -> None:
    preserve = ses.AnchorPreservation(categories=[CONSTRAINT, OPEN_TASK], max_tokens=200)
    sid = create(stub, preserve_lost_anchors=preserve)
    got = stub.GetSession(pb.GetSessionRequest(session_id=sid)).policy.preserve_lost_anchors
    assert list(got.categories) == [CONSTRAINT, OPEN_TASK] and got.max_tokens == 200
    fill(stub, sid)
    done = stub.Compact(pb.CompactRequest(session_id=sid), timeout=60)
    assert done.summarizer == "extractive"
    by = counts(done.loss_report)
    # The extractive summary copies the user's requests and lists the calls: it
    # loses nothing here, so nothing is re-injected.
    assert by[CONSTRAINT].summary == 2 and by[OPEN_TASK].summary == 1
    assert by[ses.ANCHOR_CATEGORY_TOOL_CALL].summary > 0
    assert all(c.lost == 0 and c.reinjected == 0 for c in done.loss_report.categories)
    head = stub.BuildModelInput(pb.BuildModelInputRequest(session_id=sid)).messages[0]
    text = head.content[0].text.text
    assert "<pinned-state>\nTask: uploader\n</pinned-state>" in text
    (stored,) = listed(stub, sid)
    assert stored.loss_report == done.loss_report


def test_preserved_anchors_are_in_the_input_and_stay_put(stub: Stub) -> None:
    preserve = ses.AnchorPreservation(categories=[CONSTRAINT, OPEN_TASK])
    sid = create(stub, preserve_lost_anchors=preserve)
    fill(stub, sid)
    plan = stub.PrepareCompaction(pb.PrepareCompactionRequest(session_id=sid))
    done = commit(stub, plan, "Uploader work.")
    by = counts(done.loss_report)
    assert by[CONSTRAINT].reinjected == 2 and by[CONSTRAINT].lost == 0
    assert by[OPEN_TASK].reinjected == 1
    first = stub.BuildModelInput(pb.BuildModelInputRequest(session_id=sid))
    text = first.messages[0].content[0].text.text
    assert "- constraint: You must never push to main." in text
    assert "- open task: TODO: add retries with backoff" in text
    # Computed once: later appends leave the prefix (and its hash) as it was.
    append(stub, sid, user("Never mind the port, I found it."), assistant("ok"))
    later = stub.BuildModelInput(pb.BuildModelInputRequest(session_id=sid))
    assert later.prefix_hash == first.prefix_hash
    assert later.messages[0] == first.messages[0]


def test_a_clearing_checkpoint_has_a_report_too(stub: Stub) -> None:
    sid = create(
        stub,
        context_window=8000,
        reserve_tokens=1000,
        keep_recent_tokens=1500,
        clear_tool_results_at_least=2000,
        clear_tool_results_keep=1,
    )
    for i in range(8):
        append(
            stub,
            sid,
            user(f"step {i}"),
            assistant("", [(f"c{i}", "bash", {"command": f"make t{i}"})]),
            failed(f"c{i}", f"HTTP 50{i % 4} from https://ci{i}.example.com\n" + "z" * 3000),
            assistant(f"step {i} failed"),
        )
    done = stub.Compact(pb.CompactRequest(session_id=sid), timeout=60)
    assert done.clearing_only
    r = done.loss_report
    assert r.span_from_seq == 3 and r.span_to_seq <= done.tool_results_cleared_through_seq
    by = counts(r)
    assert by[ses.ANCHOR_CATEGORY_URL].total == done.tool_results_cleared
    assert by[ses.ANCHOR_CATEGORY_URL].lost == done.tool_results_cleared
    (stored,) = listed(stub, sid)
    assert stored.loss_report == r


def test_auto_compact_and_background_checkpoints_have_reports(stub: Stub) -> None:
    window = {"context_window": 2000, "reserve_tokens": 500, "keep_recent_tokens": 400}
    auto = create(stub, **window)
    fill(stub, auto)
    built = stub.BuildModelInput(pb.BuildModelInputRequest(session_id=auto, auto_compact=True))
    (checkpoint,) = listed(stub, auto)
    assert built.compaction_id == checkpoint.compaction_id
    assert checkpoint.trigger == pb.COMPACTION_TRIGGER_THRESHOLD
    assert counts(checkpoint.loss_report)[CONSTRAINT].total == 2

    background = create(stub, background_compaction_percent=40, **window)
    fill(stub, background)
    deadline = time.monotonic() + 30
    while not (done := listed(stub, background)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert done and done[-1].trigger == pb.COMPACTION_TRIGGER_BACKGROUND
    assert done[-1].loss_report.span_from_seq == 1
    assert sum(c.total for c in done[-1].loss_report.categories) > 0
