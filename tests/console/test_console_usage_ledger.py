"""The console shows the usage ledger: a session's on its page, the tenant's
above the session list, each as GetUsage reports it."""

from __future__ import annotations

import html
import re
import uuid
from collections.abc import Iterator

import grpc
import httpx
import pytest

from ctxwarden.v1 import context_service_pb2 as pb
from ctxwarden.v1 import context_service_pb2_grpc as pb_grpc
from ctxwarden.v1 import message_pb2 as m
from ctxwarden.v1 import session_pb2 as ses
from tests.console.conftest import KEY_A, ConsoleEnv, bearer
from tests.support.builders import assistant, user

AUTH = {"authorization": f"Bearer {KEY_A}"}


@pytest.fixture
def http(console: ConsoleEnv) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=console.url, timeout=30, follow_redirects=False) as client:
        yield client


def _cells(row: str) -> list[str]:
    return [html.unescape(c).replace(",", "") for c in re.findall(r"<td[^>]*>(.*?)</td>", row)]


def test_session_and_tenant_usage_panels(
    http: httpx.Client, console: ConsoleEnv, channel: grpc.Channel
) -> None:
    stub = pb_grpc.ContextServiceStub(channel)
    sid = f"usage-{uuid.uuid4().hex[:8]}"
    auth = bearer(KEY_A)
    stub.CreateSession(
        pb.CreateSessionRequest(session_id=sid, session=ses.Session(model="m-1")), metadata=auth
    )
    reply = assistant("ok")
    reply.usage.CopyFrom(m.Usage(input_tokens=1234, cache_read_tokens=5000, output_tokens=77))
    stub.AppendMessages(
        pb.AppendMessagesRequest(session_id=sid, messages=[user("q"), reply]), metadata=auth
    )

    for _ in range(2):  # the cache ledger counts the inputs agents build
        stub.BuildModelInput(pb.BuildModelInputRequest(session_id=sid), metadata=auth)
    cache = stub.GetUsage(pb.GetUsageRequest(session_id=sid), metadata=auth).cache
    assert cache.builds == 2 and cache.predicted_cached_tokens == cache.input_tokens // 2
    page = http.get(f"/sessions/{sid}", headers=AUTH).text
    builds = re.search(r'data-testid="cache-builds">(.*?)<', page)
    predicted = re.search(r'data-testid="cache-predicted">([\d,]+)', page)
    assert builds is not None and predicted is not None
    assert (builds.group(1), predicted.group(1).replace(",", "")) == (
        "2",
        str(cache.predicted_cached_tokens),
    )
    assert "prefix shrank: first input" in page
    panel = page[page.index('data-testid="usage-panel"') :]
    row = re.search(
        r'data-testid="usage-row" data-source="agent" data-model="m-1">(.*?)</tr>', panel
    )
    assert row is not None
    assert _cells(row.group(1)) == ["agent", "m-1", "1", "1234", "5000", "0", "77", "0"]

    tenant = stub.GetUsage(pb.GetUsageRequest(), metadata=auth)
    listing = http.get("/sessions", headers=AUTH).text
    assert f"Usage and cost of every session ({tenant.session_count:,})" in listing
    total = re.search(r'data-testid="usage-total">(.*?)</tr>', listing)
    assert total is not None
    cells = _cells(total.group(1))
    assert cells[1:] == [
        str(tenant.total.calls),
        str(tenant.total.input_tokens),
        str(tenant.total.cache_read_tokens),
        str(tenant.total.cache_write_tokens),
        str(tenant.total.output_tokens),
        str(tenant.total.reasoning_tokens),
    ]
    assert tenant.total.input_tokens >= 1234
