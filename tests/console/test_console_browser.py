"""The console in a real browser (Debian's Chromium through Playwright): log in, open a
session with a compaction, a rollback, a failed turn and a big tool output, and check
every panel against the API. Screenshots are kept in the test's temporary directory."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from playwright.sync_api import Browser, BrowserContext, Page, expect

from ctxwarden.v1 import context_service_pb2 as pb
from ctxwarden.v1 import context_service_pb2_grpc as pb_grpc
from ctxwarden.v1 import message_pb2 as m
from tests.console.conftest import KEY_A, KEY_B, ConsoleEnv, bearer
from tests.console.seed import seed_lineage

VIEWPORT = {"width": 1400, "height": 1000}


@pytest.fixture
def context(browser: Browser) -> Iterator[BrowserContext]:
    ctx = browser.new_context(viewport=VIEWPORT)  # type: ignore[arg-type]
    try:
        yield ctx
    finally:
        ctx.close()


@pytest.fixture
def csp_violations(context: BrowserContext) -> list[str]:
    """Console messages of any page in ``context`` that report a blocked resource."""
    seen: list[str] = []
    context.on(
        "console",
        lambda msg: seen.append(msg.text) if "Content Security Policy" in msg.text else None,
    )
    return seen


def log_in(page: Page, url: str, key: str) -> None:
    """Open ``url``, get the login form (401), log in, land on ``url``."""
    response = page.goto(url)
    assert response is not None and response.status == 401
    page.fill("#api_key", key)
    with page.expect_navigation():
        page.click("form[action='/login'] button")
    assert page.url == url


def seqs(page: Page, selector: str) -> list[int]:
    return [
        int(s) for s in page.eval_on_selector_all(selector, "els => els.map(e => e.dataset.seq)")
    ]


def test_session_page_shows_what_the_api_says(
    console: ConsoleEnv,
    channel: grpc.Channel,
    context: BrowserContext,
    csp_violations: list[str],
    tmp_path: Path,
) -> None:
    stub = pb_grpc.ContextServiceStub(channel)
    seeded = console.seeded
    sid = seeded.session_id
    md = bearer(KEY_A)
    page = context.new_page()
    log_in(page, console.session_url(), KEY_A)
    page.screenshot(path=str(tmp_path / "session.png"))
    page.screenshot(path=str(tmp_path / "session-full.png"), full_page=True)
    cookie = next(c for c in context.cookies() if c["name"] == "ctxw_login")
    assert cookie["httpOnly"] and cookie["sameSite"] == "Strict" and not cookie["secure"]

    history = stub.ListMessages(
        pb.ListMessagesRequest(session_id=sid, include_rolled_back=True, page_size=1000),
        metadata=md,
    ).messages
    mi = stub.BuildModelInput(pb.BuildModelInputRequest(session_id=sid), metadata=md)
    compactions = stub.ListCompactions(
        pb.ListCompactionsRequest(session_id=sid), metadata=md
    ).compactions

    # The timeline: every stored message, rolled-back and failed ones marked.
    timeline = "[data-testid=timeline] [data-testid=timeline-message]"
    assert seqs(page, timeline) == [x.seq for x in history]
    rows = page.eval_on_selector_all(
        timeline,
        "els => els.map(e => [Number(e.dataset.seq), e.dataset.status,"
        " e.querySelector('[data-testid=tokens]').textContent])",
    )
    for x, (seq, status, tokens) in zip(history, rows, strict=True):
        assert seq == x.seq and tokens == f"{x.token_count:,} tok"
        if x.state == m.MESSAGE_STATE_ROLLED_BACK:
            assert status == "rolled back"
        elif x.stop_reason in (m.STOP_REASON_ERROR, m.STOP_REASON_ABORTED):
            assert status == "failed"
        elif x.visibility == m.MESSAGE_VISIBILITY_HISTORY_ONLY:
            assert status == "history only"
        elif x.seq < mi.first_kept_seq:
            assert status == "summarised"
        else:
            assert status == "in context"
    assert "history only" in [status for _, status, _ in rows]
    assert set(seeded.rolled_back) <= {
        x.seq for x in history if x.state == m.MESSAGE_STATE_ROLLED_BACK
    }
    # Tool calls paired with their results.
    big = page.locator(f"#m{seeded.big_seq}")
    expect(big.get_by_test_id("answers")).to_have_text(f"answers #{seeded.big_seq - 1}")
    call = page.locator(f"#m{seeded.big_seq - 1} [data-testid=result-link]")
    expect(call).to_have_text(f"result #{seeded.big_seq}")
    expect(big.get_by_test_id("collapsed")).to_be_visible()  # the big output is folded

    # The effective context: BuildModelInput's messages, summary, pinned state, notices.
    context_panel = page.get_by_test_id("context")
    kept = [x.seq for x in mi.messages if x.seq][-50:]
    shown = seqs(page, "[data-testid=context] [data-testid=context-message]")
    assert [s for s in shown if s] == kept
    expect(context_panel.get_by_test_id("first-kept-seq")).to_have_text(str(mi.first_kept_seq))
    expect(context_panel.get_by_test_id("summary")).to_contain_text(compactions[0].summary[:60])
    expect(context_panel.get_by_test_id("pinned")).to_contain_text("goal: fix test_flaky")
    codes = {n.code for n in mi.notices}
    assert {"TOOL_OUTPUT_TRUNCATED", "FAILED_MESSAGE_OMITTED"} <= codes
    for notice in mi.notices:
        if notice.seq:
            where = (
                context_panel
                if notice.code == "TOOL_OUTPUT_TRUNCATED"
                else page.get_by_test_id("timeline")
            )
            expect(
                where.locator(f"[data-seq='{notice.seq}'] [data-code='{notice.code}']").first
            ).to_be_visible()

    # The token bar against the API's breakdown.
    t = mi.tokens
    bar = page.get_by_test_id("token-bar")
    for name, value in (
        ("system", t.system_tokens),
        ("tools", t.tools_tokens),
        ("summary", t.summary_tokens),
        ("messages", t.message_tokens),
    ):
        expect(bar.get_by_test_id(f"bar-{name}")).to_have_text(f"{value:,}")
    expect(bar.get_by_test_id("total-tokens")).to_have_text(f"{t.total_tokens:,}")

    # Checkpoints and the chart's marks.
    cards = page.get_by_test_id("checkpoint")
    expect(cards).to_have_count(len(compactions))
    for c in compactions:
        card = page.locator(f"[data-testid=checkpoint][data-id='{c.compaction_id}']")
        expect(card.get_by_test_id("cp-first-kept")).to_have_text(str(c.first_kept_seq))
        expect(card.get_by_test_id("cp-tokens")).to_have_text(
            f"{c.tokens_before:,} → {c.tokens_after:,}"
        )
        expect(card.get_by_test_id("cp-summarizer")).to_have_text(c.summarizer)
        assert card.get_attribute("data-superseded") == ("true" if c.superseded else "false")
        card.locator("summary").click()
        expect(card.get_by_test_id("cp-summary")).to_contain_text(c.summary[:60])
    expect(page.get_by_test_id("chart-compaction")).to_have_count(len(compactions))
    assert page.get_by_test_id("chart-rollback").count() >= 1
    expect(page.get_by_test_id("lineage")).to_contain_text("No parent and no forks")
    expect(page.get_by_test_id("session-head").get_by_test_id("archived")).to_have_count(0)

    # The byte-range viewer of the big output, against GetToolOutput.
    with page.expect_navigation():
        big.get_by_test_id("view-output").click()
    first = stub.GetToolOutput(
        pb.GetToolOutputRequest(session_id=sid, seq=seeded.big_seq, offset=0, limit=16384),
        metadata=md,
    )
    assert page.get_by_test_id("tool-output").inner_text() == first.content
    page.screenshot(path=str(tmp_path / "tool-output.png"))
    with page.expect_navigation():
        page.get_by_test_id("next-range").click()
    second = stub.GetToolOutput(
        pb.GetToolOutputRequest(
            session_id=sid, seq=seeded.big_seq, offset=first.next_offset, limit=16384
        ),
        metadata=md,
    )
    assert page.get_by_test_id("tool-output").inner_text() == second.content
    assert not csp_violations, csp_violations


def test_replay_picker_and_rendered_json(
    console: ConsoleEnv, channel: grpc.Channel, context: BrowserContext, tmp_path: Path
) -> None:
    stub = pb_grpc.ContextServiceStub(channel)
    sid = console.seeded.session_id
    page = context.new_page()
    log_in(page, console.session_url(), KEY_A)
    as_of = console.seeded.big_seq + 1
    page.fill("[data-testid=picker] input[name=as_of]", str(as_of))
    page.select_option("[data-testid=picker] select[name=format]", "anthropic")
    with page.expect_navigation():
        page.click("[data-testid=picker] button")
    page.screenshot(path=str(tmp_path / "replay.png"), full_page=True)
    expect(page.get_by_test_id("as-of")).to_have_text(str(as_of))
    api = stub.BuildModelInput(
        pb.BuildModelInputRequest(
            session_id=sid, as_of_seq=as_of, format=pb.MODEL_INPUT_FORMAT_ANTHROPIC_MESSAGES
        ),
        metadata=bearer(KEY_A),
    )
    shown = json.loads(page.get_by_test_id("rendered-json").inner_text())
    assert shown == json.loads(api.rendered_json)
    native = stub.BuildModelInput(
        pb.BuildModelInputRequest(session_id=sid, as_of_seq=as_of), metadata=bearer(KEY_A)
    )
    context_seqs = seqs(page, "[data-testid=context] [data-testid=context-message]")
    assert [s for s in context_seqs if s] == [x.seq for x in native.messages if x.seq][-50:]
    assert max(context_seqs) < as_of
    expect(page.get_by_test_id("total-tokens")).to_have_text(f"{api.tokens.total_tokens:,}")


def test_other_tenant_and_no_credentials(
    console: ConsoleEnv, browser: Browser, tmp_path: Path
) -> None:
    stranger = browser.new_context(viewport=VIEWPORT)  # type: ignore[arg-type]
    try:
        page = stranger.new_page()
        response = page.goto(console.session_url())
        assert response is not None and response.status == 401  # no credentials: refused
        assert "default-src 'none'" in response.headers["content-security-policy"]
        expect(page.locator("#api_key")).to_be_visible()
        page.screenshot(path=str(tmp_path / "login.png"))
        page.fill("#api_key", KEY_B)
        with page.expect_navigation():
            page.click("form[action='/login'] button")
        response = page.goto(console.session_url())
        assert response is not None and response.status == 404  # tenant B: no such session
        expect(page.get_by_test_id("error")).to_contain_text("Not found")
        assert page.get_by_test_id("tenant").inner_text() == "tenant console-b"
        listing = page.goto(f"{console.url}/sessions")
        assert listing is not None and listing.status == 200
        expect(page.locator(f"a[href='/sessions/{console.seeded.session_id}']")).to_have_count(0)
    finally:
        stranger.close()


def test_fork_page_shows_inherited_rows_lineage_and_archived(
    console: ConsoleEnv,
    channel: grpc.Channel,
    context: BrowserContext,
    csp_violations: list[str],
    tmp_path: Path,
) -> None:
    stub = pb_grpc.ContextServiceStub(channel)
    lineage = seed_lineage(channel, bearer(KEY_A), uuid.uuid4().hex[:8])
    page = context.new_page()
    log_in(page, console.session_url(lineage.fork), KEY_A)
    page.screenshot(path=str(tmp_path / "fork.png"), full_page=True)

    # The timeline: the parent's seqs 1-4 as the fork sees them (the parent rolled 3-8
    # back later), marked inherited and linked to the parent; then the fork's own.
    timeline = "[data-testid=timeline] [data-testid=timeline-message]"
    history = stub.ListMessages(
        pb.ListMessagesRequest(session_id=lineage.fork, include_rolled_back=True),
        metadata=bearer(KEY_A),
    ).messages
    assert seqs(page, timeline) == [x.seq for x in history] == [1, 2, 3, 4, 5, 6]
    marks = page.eval_on_selector_all(
        timeline, "els => els.map(e => [e.dataset.inherited, e.dataset.status])"
    )
    assert marks == [["true", "in context"]] * 4 + [["false", "in context"]] * 2
    expect(page.locator("#m5 [data-testid=inherited]")).to_have_count(0)
    badge = page.locator("#m3 [data-testid=inherited]")
    expect(badge).to_have_text(f"inherited from {lineage.parent}")

    # The chart ends where the token bar is.
    bar_total = page.get_by_test_id("total-tokens").inner_text()
    last_point = page.locator("[data-testid=chart] rect.hit title").last.text_content() or ""
    assert last_point.endswith(f": {bar_total.replace(',', '')} tokens")

    # The lineage panel: the (archived) parent and the fork seq, the fork of this fork.
    panel = page.get_by_test_id("lineage")
    expect(panel.get_by_test_id("fork-seq")).to_have_text("5")
    expect(panel.get_by_test_id("parent")).to_have_text(lineage.parent)
    expect(panel.get_by_test_id("parent-archived")).to_be_visible()
    expect(panel.get_by_test_id("child")).to_have_text(lineage.grandchild)
    expect(panel.get_by_test_id("child-fork-seq")).to_have_text("7")
    expect(page.get_by_test_id("session-head").get_by_test_id("archived")).to_have_count(0)

    # The inherited row's link: the parent's timeline there, where it is rolled back,
    # and the parent is marked archived, with its fork listed.
    with page.expect_navigation():
        badge.click()
    assert page.url.endswith(f"/sessions/{lineage.parent}?at=3#m3")
    expect(page.locator("#m3")).to_have_attribute("data-status", "rolled back")
    expect(page.get_by_test_id("session-head").get_by_test_id("archived")).to_be_visible()
    expect(page.get_by_test_id("lineage").get_by_test_id("child")).to_have_text(lineage.fork)
    page.screenshot(path=str(tmp_path / "archived-parent.png"), full_page=True)

    # The fork of the fork: its whole ancestry, linked.
    page.goto(console.session_url(lineage.grandchild))
    ancestry = page.get_by_test_id("ancestry").get_by_test_id("ancestor")
    expect(ancestry).to_have_text([lineage.parent, lineage.fork])
    inherited = page.eval_on_selector_all(timeline, "els => els.map(e => e.dataset.inherited)")
    assert inherited == ["true"] * 6 + ["false"]

    # The session list: archived sessions marked, and filtered.
    page.goto(f"{console.url}/sessions?project={lineage.project}")
    rows = page.get_by_test_id("session-row")
    expect(rows).to_have_count(3)
    expect(page.locator("[data-testid=session-row][data-archived=true]")).to_have_count(1)
    expect(page.get_by_test_id("sessions").get_by_test_id("archived")).to_have_count(1)
    for choice, shown in (
        ("archived", [lineage.parent]),
        ("live", [lineage.fork, lineage.grandchild]),
        ("all", [lineage.parent, lineage.fork, lineage.grandchild]),
    ):
        page.select_option("[data-testid=archived-filter]", choice)
        with page.expect_navigation():
            page.click("[data-testid=search] button")
        listed = page.eval_on_selector_all(
            "[data-testid=session-row] td:first-child a",
            "els => els.map(e => e.textContent)",
        )
        assert sorted(listed) == sorted(shown), choice
        marked = page.locator("[data-testid=session-row][data-archived=true]")
        expect(marked).to_have_count(1 if lineage.parent in shown else 0)
    page.screenshot(path=str(tmp_path / "sessions-archived.png"), full_page=True)
    assert not csp_violations, csp_violations
