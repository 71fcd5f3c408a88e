"""Where anchors survive (core.anchor_report), the report, re-injection and the
min_anchor_survival check, then a whole checkpoint built from a SessionContext
(service.checkpoint.build_checkpoint, pure) and the model input it gives."""

from __future__ import annotations

import itertools
import json
from dataclasses import replace

import pytest

from ctxwarden.core.anchor_report import (
    MAX_LOST_LISTED_PER_CATEGORY,
    AnchorLocation,
    LossReport,
    Targets,
    build_report,
    place,
    preserve,
    report_dumps,
    report_loads,
)
from ctxwarden.core.anchors import Anchor, AnchorCategory, anchors_of_text, span_anchors
from ctxwarden.core.compaction.loss import category_mask, cleared_span, require_survival
from ctxwarden.core.compaction.planner import plan_compaction
from ctxwarden.core.compaction.terms import PlanTerms
from ctxwarden.core.compaction.types import FileToolNames
from ctxwarden.core.context import SessionContext
from ctxwarden.core.errors import FailedPrecondition
from ctxwarden.core.memory import MemoryBlock
from ctxwarden.core.messages import ContentBlock, Message, Role, StopReason
from ctxwarden.core.reasons import ErrorReason
from ctxwarden.core.session import Checkpoint, CompactionTrigger, ContextPolicy, Session
from ctxwarden.core.summary import PRESERVED_HEADING, summary_text
from ctxwarden.core.tokens import HeuristicTokenizer
from ctxwarden.service.checkpoint import build_checkpoint

C = AnchorCategory
L = AnchorLocation
TOK = HeuristicTokenizer()


def one(text: str, category: AnchorCategory) -> Anchor:
    (a,) = [a for a in anchors_of_text(text) if a.category is category]
    return a


# -- placement ------------------------------------------------------------------------


def test_each_anchor_at_the_first_place_that_holds_it() -> None:
    anchors = anchors_of_text(
        "Fix a.py, b.py, c.py, d.py, e.py and f.py. Also g.py.", Role.ASSISTANT
    )
    targets = Targets(
        summary="We fixed a.py.",
        pinned_state="working on b.py and a.py",
        file_lists=("src/c.py",),
        memory_block="the user likes d.py",
        kept_messages="now reading e.py",
        reinjected="- file path: f.py",
    )
    assert place(anchors, targets) == [
        L.SUMMARY,
        L.PINNED_STATE,
        L.FILE_LISTS,  # a relative path survives as the tail of a longer one
        L.MEMORY_BLOCK,
        L.KEPT_MESSAGES,
        L.REINJECTED,
        L.LOST,
    ]


@pytest.mark.parametrize(
    ("span", "category", "summary", "survives"),
    [
        ("timeout 30 s", C.QUANTITY, "a 30-second timeout (30 seconds)", True),
        ("timeout 30 s", C.QUANTITY, "a 300 s timeout", False),
        ("commit abc1234", C.IDENTIFIER, "merged abc1234def5678", True),
        ("commit abc1234", C.IDENTIFIER, "merged abc1235", False),
        ("see ./src/a.py", C.FILE_PATH, "src/a.py changed", True),
        ("see src/a.py", C.FILE_PATH, "lib/src/a.py changed", True),
        ("see src/a.py", C.FILE_PATH, "data.py and src/ab.py", False),
        ("https://x.io/docs/", C.URL, "docs at https://x.io/docs.", True),
        ("You must never push to main.", C.CONSTRAINT, "- NEVER push to main (must)", True),
        ("You must never push to main.", C.CONSTRAINT, "Pushing to main is fine.", False),
        ("You must never push to main.", C.CONSTRAINT, "You must always push to main.", False),
        ("Du musst immer testen.", C.CONSTRAINT, "Immer testen: du musst!", True),
        ("必须使用中文。", C.CONSTRAINT, "用户要求\uff1a必须使用中文", True),
        ("- [ ] write the docs", C.OPEN_TASK, "Next: write the docs.", True),
    ],
)
def test_matching_rules(span: str, category: AnchorCategory, summary: str, survives: bool) -> None:
    (where,) = place([one(span, category)], Targets(summary=summary))
    assert (where is L.SUMMARY) is survives


def test_tool_calls_survive_by_their_key_argument() -> None:
    call = Message(
        Role.ASSISTANT,
        (ContentBlock.of_tool_call("c", "bash", json.dumps({"command": "pytest -k slow"})),),
    )
    (anchor,) = [a for a in span_anchors([call]) if a.category is C.TOOL_CALL]
    assert place([anchor], Targets(summary="Ran `pytest -k slow` twice.")) == [L.SUMMARY]
    assert place([anchor], Targets(summary="Ran pytest -k slower.")) == [L.LOST]


# -- the report -------------------------------------------------------------------------


def test_report_counts_lists_lost_anchors_bounded_and_round_trips() -> None:
    n = MAX_LOST_LISTED_PER_CATEGORY + 3
    anchors = [Anchor(C.FILE_PATH, f"f{i}.py", f"f{i}.py", i) for i in range(n)]
    anchors.append(Anchor(C.CONSTRAINT, "Never do x.", "never do x", 99))
    where = [L.LOST] * n + [L.SUMMARY]
    report = build_report(anchors, where, (1, 99))
    paths = report.counts(C.FILE_PATH)
    assert (paths.total, paths.lost, paths.survival) == (n, n, 0.0)
    assert report.survival(C.CONSTRAINT) == 1.0 and report.survival(C.URL) == 1.0
    assert len(report.lost) == MAX_LOST_LISTED_PER_CATEGORY and report.lost_omitted == 3
    assert (report.span_from_seq, report.span_to_seq) == (1, 99)
    assert report_loads(report_dumps(report)) == report
    assert report_loads(None) is None and report_loads("not json") is None
    assert report_loads(report_dumps(LossReport())) == LossReport()


def test_require_survival_names_the_missing_anchors() -> None:
    anchors = anchors_of_text("You must use tabs. Never push. Always lint. Read a.py.")
    report = build_report(anchors, place(anchors, Targets(summary="Always lint.")))
    require_survival(report, {C.CONSTRAINT: 0.3})  # 1 of 3 survives
    require_survival(report, None)
    with pytest.raises(FailedPrecondition) as e:
        require_survival(report, {C.CONSTRAINT: 0.5, C.FILE_PATH: 1.0, C.URL: 1.0})
    err = e.value
    assert err.reason == ErrorReason.ANCHORS_LOST
    assert err.metadata["categories"] == "file_path,constraint"
    assert json.loads(err.metadata["constraint_missing"]) == ["You must use tabs.", "Never push."]
    assert err.metadata["constraint_survival"] == "0.3333"
    assert "'You must use tabs.'" in str(err) and "1 of 3 survive" in str(err)


# -- re-injection ---------------------------------------------------------------------------


def test_preserve_takes_the_categories_asked_for_within_the_budget() -> None:
    lost = list(anchors_of_text("You must use tabs. TODO: fix the build. Read a.py."))
    assert preserve(lost, [C.CONSTRAINT, C.OPEN_TASK], 100, TOK.count) == (
        "- constraint: You must use tabs.\n- open task: TODO: fix the build."
    )
    first = "- constraint: You must use tabs."
    assert preserve(lost, [C.CONSTRAINT, C.OPEN_TASK], TOK.count(first + "\n"), TOK.count) == first
    assert preserve(lost, [], 100, TOK.count) == ""


def test_preserve_carries_earlier_lines_the_new_summary_lacks() -> None:
    from ctxwarden.core.anchor_report import TargetIndex

    previous = "- constraint: You must use tabs.\n- open task: TODO: fix the build."
    new = list(anchors_of_text("Never push to main."))
    summary = TargetIndex.of("The build is fixed (TODO: fix the build - done).")
    got = preserve(new, [C.CONSTRAINT], 100, TOK.count, previous=previous, summary=summary)
    assert got == "- constraint: Never push to main.\n- constraint: You must use tabs."


# -- a checkpoint built from a session ---------------------------------------------------


def _session(preserve: int = 0) -> SessionContext:
    session = Session(
        session_id="s",
        pinned_state="Task: port the uploader",
        policy=ContextPolicy(
            context_window=20_000, reserve_tokens=2000, preserve_lost_anchors=preserve
        ),
        memory=MemoryBlock("The user's team uses JIRA ticket UP-7."),
    )
    return SessionContext(session, None, [], TOK)


def _turns(ctx: SessionContext, texts: list[str]) -> None:
    ids = (f"m{i}" for i in itertools.count(len(ctx.active_messages)))
    for i, text in enumerate(texts):
        call = ContentBlock.of_tool_call(
            f"c{i}{text[:3]}", "read", json.dumps({"path": f"f{i}.py"})
        )
        msgs = [
            Message(Role.USER, (ContentBlock.of_text(text),)),
            Message(Role.ASSISTANT, (call,), stop_reason=StopReason.TOOL_USE),
            Message(
                Role.TOOL_RESULT,
                (ContentBlock.of_text("x" * 400),),
                tool_call_id=call.tool_call_id,
                tool_name="read",
            ),
            Message(
                Role.ASSISTANT, (ContentBlock.of_text("ok " * 50),), stop_reason=StopReason.STOP
            ),
        ]
        ctx.apply_append(ctx.plan_append(msgs, now_us=1 + i, new_message_id=ids))


def _compact(ctx: SessionContext, summary: str) -> Checkpoint:
    plan = plan_compaction(
        session_id="s",
        active=ctx.active_messages,
        checkpoint=ctx.checkpoint,
        at_seq=ctx.session.last_seq,
        tokens_before=ctx.view_tokens(),
        keep_recent_tokens=300,
        reserve_tokens=2000,
        summarizer_limit=0,
        pinned_state=ctx.session.pinned_state,
        instructions="",
        file_tools=FileToolNames(),
    )
    terms = PlanTerms.of(plan, CompactionTrigger.MANUAL)
    prefix = "the turn so far" if terms.split_turn else ""
    checkpoint = build_checkpoint(ctx, terms, summary, prefix, "test", CompactionTrigger.MANUAL)
    ctx.apply_checkpoint(checkpoint)
    return checkpoint


TEXTS = [
    "You must never push to main. Fix UP-7 in uploader.py.",
    "Always keep the timeout at 30 s.",
    "TODO: add retries with backoff",
    "Is the port 8080 or 9090?",
    "Look at https://docs.example.com/upload please.",
    "Carry on.",
]


def test_checkpoint_report_places_every_anchor() -> None:
    ctx = _session()
    _turns(ctx, TEXTS)
    cp = _compact(ctx, "We are fixing UP-7 in uploader.py; never push to main (you must not).")
    r = cp.loss_report
    assert r is not None and r.span_from_seq == 1 and r.span_to_seq == cp.first_kept_seq - 1
    ids = r.counts(C.IDENTIFIER)
    assert ids.count(L.SUMMARY) == 1  # UP-7, in the summary before the memory block
    paths = r.counts(C.FILE_PATH)
    assert paths.count(L.SUMMARY) == 1 and paths.count(L.FILE_LISTS) >= 1
    lost = {a.text for a in r.lost}
    assert {"30 s", "TODO: add retries with backoff", "Always keep the timeout at 30 s."} <= lost
    assert "You must never push to main." not in lost  # most of its words are in one sentence
    assert cp.preserved_anchors == ""


def test_preserved_anchors_are_shown_in_the_pinned_state_and_carried() -> None:
    mask = category_mask([C.CONSTRAINT, C.OPEN_TASK])
    ctx = _session(mask)
    _turns(ctx, TEXTS)
    cp = _compact(ctx, "Working on the uploader.")
    assert "- constraint: Always keep the timeout at 30 s." in cp.preserved_anchors
    assert "- open task: TODO: add retries with backoff" in cp.preserved_anchors
    r = cp.loss_report
    assert r is not None and r.counts(C.CONSTRAINT).count(L.REINJECTED) == 2
    assert r.counts(C.CONSTRAINT).lost == 0
    text = summary_text(cp, ctx.session.pinned_state)
    assert f"<pinned-state>\nTask: port the uploader\n\n{PRESERVED_HEADING}\n" in text
    # What the model sees is computed once: the same after a restore.
    restored = SessionContext(ctx.session, cp, ctx.active_messages, TOK)
    assert restored.model_input().messages[0] == ctx.model_input().messages[0]
    # A later compaction carries them while its summary lacks them.
    _turns(ctx, ["More work.", "Even more work.", "And more."])
    later = _compact(ctx, "Still on the uploader; TODO: add retries with backoff.")
    assert "- constraint: Always keep the timeout at 30 s." in later.preserved_anchors
    assert "open task: TODO: add retries" not in later.preserved_anchors


def test_a_clearing_reports_the_error_results_it_stubs() -> None:
    ctx = _session()
    err = ContentBlock.of_tool_call("e1", "bash", json.dumps({"command": "make"}))
    ctx.apply_append(
        ctx.plan_append(
            [
                Message(Role.USER, (ContentBlock.of_text("build it"),)),
                Message(Role.ASSISTANT, (err,), stop_reason=StopReason.TOOL_USE),
                Message(
                    Role.TOOL_RESULT,
                    (ContentBlock.of_text("HTTP 503 from https://ci.example.com"),),
                    tool_call_id="e1",
                    tool_name="bash",
                    is_error=True,
                ),
            ],
            now_us=1,
            new_message_id=(f"x{i}" for i in itertools.count()),
        )
    )
    span = cleared_span(ctx, ctx.session.last_seq)
    assert [m.seq for m in span] == [3]
    assert {a.text for a in span_anchors(span)} == {"HTTP 503", "https://ci.example.com"}
    assert cleared_span(replace_cleared(ctx, 3), 3) == []


def replace_cleared(ctx: SessionContext, through: int) -> SessionContext:
    base = Checkpoint("k", "s", "", 1, 0, 0, tool_results_cleared_through=through)
    return SessionContext(ctx.session, base, ctx.active_messages, TOK)


def test_policy_mask_round_trips() -> None:
    policy = ContextPolicy(preserve_lost_anchors=category_mask([C.OPEN_TASK, C.URL]))
    from ctxwarden.core.compaction.loss import preserved_categories

    assert preserved_categories(policy) == (C.URL, C.OPEN_TASK)
    assert replace(policy, preserve_lost_anchors=0) == ContextPolicy()
