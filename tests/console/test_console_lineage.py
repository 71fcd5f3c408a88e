"""Forks and archived sessions in the console, over plain HTTP: a fork's timeline has
the rows it inherited (marked, as the fork sees them), its chart agrees with its token
bar, the lineage panel links parent and forks, archived sessions are marked and the
session list filters them (the browser test opens the same pages)."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator

import grpc
import httpx
import pytest

from ctxwarden.v1 import context_service_pb2 as pb
from ctxwarden.v1 import context_service_pb2_grpc as pb_grpc
from tests.console.conftest import KEY_B, ConsoleEnv, bearer
from tests.console.seed import Lineage, seed_lineage

H = {"authorization": f"Bearer {KEY_B}"}


@pytest.fixture(scope="module")
def lineage(channel: grpc.Channel) -> Lineage:
    return seed_lineage(channel, bearer(KEY_B), uuid.uuid4().hex[:8])


@pytest.fixture
def http(console: ConsoleEnv) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=console.url, timeout=30, follow_redirects=False) as client:
        yield client


def page(http: httpx.Client, sid: str) -> str:
    r = http.get(f"/sessions/{sid}", headers=H)
    assert r.status_code == 200, r.text
    return r.text


def panel(text: str, testid: str) -> str:
    """The HTML of the <section> with that data-testid."""
    start = text.index(f'data-testid="{testid}"')
    return text[start : text.index("</section>", start)]


def timeline(text: str) -> list[tuple[int, str, str]]:
    """(seq, status, inherited) of every timeline row."""
    rows = re.findall(
        r'data-testid="timeline-message" data-seq="(\d+)" data-status="([^"]*)"'
        r' data-inherited="([^"]*)"',
        text,
    )
    return [(int(seq), status, inherited) for seq, status, inherited in rows]


def test_fork_timeline_has_the_inherited_rows(
    http: httpx.Client, channel: grpc.Channel, lineage: Lineage
) -> None:
    stub = pb_grpc.ContextServiceStub(channel)
    text = page(http, lineage.fork)
    rows = timeline(text)
    api = stub.ListMessages(
        pb.ListMessagesRequest(session_id=lineage.fork, include_rolled_back=True, page_size=100),
        metadata=bearer(KEY_B),
    ).messages
    assert [seq for seq, _, _ in rows] == [x.seq for x in api] == [1, 2, 3, 4, 5, 6]
    # 1-4 come from the parent, as the fork sees them: the parent's later rollback of
    # 3-8 is not the fork's.
    assert rows == [(s, "in context", "true" if s < 5 else "false") for s in range(1, 7)]
    assert "Seqs 1\N{EN DASH}6 of 6." in text
    timeline_html = panel(text, "timeline")
    for seq in range(1, 5):
        assert f'href="/sessions/{lineage.parent}?at={seq}#m{seq}"' in timeline_html
    # A fork of the fork inherits from both.
    deeper = timeline(page(http, lineage.grandchild))
    assert deeper == [(s, "in context", "true" if s < 7 else "false") for s in range(1, 8)]
    # The parent's own timeline: its rows, none inherited, the rollback shown.
    own = timeline(page(http, lineage.parent))
    assert [(s, st) for s, st, _ in own][2:] == [(s, "rolled back") for s in range(3, 9)]
    assert {inherited for _, _, inherited in own} == {"false"}
    # Pages by seq read across the fork point both ways.
    for params, shown in (({"before": "3"}, [1, 2]), ({"before": "6"}, [1, 2, 3, 4, 5])):
        older = http.get(f"/sessions/{lineage.fork}", params=params, headers=H).text
        assert [seq for seq, _, _ in timeline(older)] == shown
        assert 'data-testid="newer"' in older and 'data-testid="older"' not in older
    newer = http.get(f"/sessions/{lineage.fork}", params={"after": "3"}, headers=H).text
    assert [seq for seq, _, _ in timeline(newer)] == [4, 5, 6]
    assert 'data-testid="older"' in newer and 'data-testid="newer"' not in newer


def _chart_last_tokens(text: str) -> int:
    points = re.findall(r"<title>from seq \d+: (\d+) tokens</title>", panel(text, "chart"))
    assert points
    return int(points[-1])


def _bar_total(text: str) -> int:
    found = re.search(r'data-testid="total-tokens">([\d,]+)<', text)
    assert found
    return int(found.group(1).replace(",", ""))


def test_fork_chart_agrees_with_its_token_bar(http: httpx.Client, lineage: Lineage) -> None:
    for sid in (lineage.parent, lineage.fork, lineage.grandchild):
        text = page(http, sid)
        assert _chart_last_tokens(text) == _bar_total(text), sid
        # One point per seq from seq 1: the inherited seqs are charted too.
        points = re.search(r'<polyline class="series" points="([^"]+)"', text)
        last = re.search(r'data-testid="last-seq">(\d+)<', text)
        assert points and last and len(points.group(1).split()) == int(last.group(1))


def test_lineage_panel_links_parent_and_forks(http: httpx.Client, lineage: Lineage) -> None:
    fork = panel(page(http, lineage.fork), "lineage")
    assert "cannot fork yet" not in fork
    parent = re.search(r'data-testid="parent" href="/sessions/([^"]+)"', fork)
    assert parent and parent.group(1) == lineage.parent
    assert re.search(r'data-testid="fork-seq">5<', fork)
    assert 'data-testid="parent-archived"' in fork  # the parent is archived
    children = re.findall(r'data-testid="child" href="/sessions/([^"]+)"', fork)
    assert children == [lineage.grandchild]
    assert re.search(r'data-testid="child-fork-seq">7<', fork)
    top = panel(page(http, lineage.parent), "lineage")
    assert 'data-testid="parent"' not in top
    assert re.findall(r'data-testid="child" href="/sessions/([^"]+)"', top) == [lineage.fork]
    deep = panel(page(http, lineage.grandchild), "lineage")
    ancestors = re.findall(r'data-testid="ancestor" href="/sessions/([^"]+)"', deep)
    assert ancestors == [lineage.parent, lineage.fork]
    assert 'data-testid="child"' not in deep


def test_archived_sessions_are_marked_and_filtered(http: httpx.Client, lineage: Lineage) -> None:
    head = panel(page(http, lineage.parent), "session-head")
    assert 'data-testid="archived"' in head
    assert 'data-testid="archived"' not in panel(page(http, lineage.fork), "session-head")

    def listed(archived: str | None) -> dict[str, bool]:
        params = {"project": lineage.project, **({"archived": archived} if archived else {})}
        text = http.get("/sessions", params=params, headers=H).text
        row = r'<tr data-testid="session-row" data-archived="(true|false)">\s*<td>'
        rows = re.findall(row + r'<a href="/sessions/([^"]+)"', text)
        return {sid: flag == "true" for flag, sid in rows}

    everything = {lineage.parent: True, lineage.fork: False, lineage.grandchild: False}
    assert listed(None) == listed("all") == everything
    assert listed("archived") == {lineage.parent: True}
    assert listed("live") == {lineage.fork: False, lineage.grandchild: False}
    text = http.get("/sessions", params={"archived": "archived"}, headers=H).text
    assert re.search(r'<option value="archived" selected>', text)
    assert http.get("/sessions", params={"archived": "nope"}, headers=H).status_code == 404
