"""The console shows each checkpoint's loss report: on the session page next to
the checkpoint, and on the checkpoint's own page with its lost anchors."""

from __future__ import annotations

import html
import re
from collections.abc import Iterator

import grpc
import httpx
import pytest

from ctxwarden.v1 import context_service_pb2 as pb
from ctxwarden.v1 import context_service_pb2_grpc as pb_grpc
from ctxwarden.v1 import session_pb2 as ses
from tests.console.conftest import KEY_A, ConsoleEnv, bearer

AUTH = {"authorization": f"Bearer {KEY_A}"}


@pytest.fixture
def http(console: ConsoleEnv) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=console.url, timeout=30, follow_redirects=False) as client:
        yield client


def _rows(page: str) -> dict[str, list[str]]:
    """category -> the cells of its row in the loss table."""
    out = {}
    for m in re.finditer(r'data-testid="cp-loss-row" data-category="(\w+)"[^>]*>(.*?)</tr>', page):
        out[m.group(1)] = [html.unescape(c) for c in re.findall(r"<td[^>]*>(.*?)</td>", m.group(2))]
    return out


def test_loss_report_next_to_the_checkpoint(
    http: httpx.Client, console: ConsoleEnv, channel: grpc.Channel
) -> None:
    stub = pb_grpc.ContextServiceStub(channel)
    sid = console.seeded.session_id
    (c,) = stub.ListCompactions(
        pb.ListCompactionsRequest(session_id=sid), metadata=bearer(KEY_A)
    ).compactions
    report = {k.category: k for k in c.loss_report.categories if k.total}
    assert report, "the seeded compaction's span holds anchors"

    session_page = http.get(f"/sessions/{sid}", headers=AUTH).text
    checkpoints = session_page[session_page.index('data-testid="checkpoints"') :]
    assert 'data-testid="cp-loss"' in checkpoints
    rows = _rows(checkpoints)
    for category, counts in report.items():
        name = ses.AnchorCategory.Name(category).removeprefix("ANCHOR_CATEGORY_").lower()
        cells = rows[name]
        assert cells[0] == name.replace("_", " ")
        assert int(cells[1]) == counts.total and int(cells[-1]) == counts.lost
        assert (cells[2] or "0") == str(counts.summary)

    own = http.get(f"/sessions/{sid}/checkpoints/{c.compaction_id}", headers=AUTH).text
    assert _rows(own) == rows
    lost = [
        html.unescape(t) for t in re.findall(r'data-testid="cp-lost">.*?<code>(.*?)</code>', own)
    ]
    assert lost == [a.text for a in c.loss_report.lost_anchors]
