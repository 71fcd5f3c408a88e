"""The usage ledger end to end (GetUsage): what providers reported, per session
and per tenant, summariser calls attributed to compactions, a retried request
counted once, priced by the server's price table, kept across a restart."""

from __future__ import annotations

import io
import json
import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from ctxwarden.cli.parser import build_parser
from ctxwarden.commands import admin
from ctxwarden.v1 import context_service_pb2 as pb
from ctxwarden.v1 import context_service_pb2_grpc as pb_grpc
from ctxwarden.v1 import message_pb2 as m
from ctxwarden.v1 import session_pb2 as ses
from tests.e2e.test_compaction import turns
from tests.summarizers.fake_providers import FakeProvider
from tests.support.builders import assistant, user
from tests.support.errors import expect_error
from tests.support.server import ServerProcess

Stub = pb_grpc.ContextServiceStub
KEY_ENV = "CTXWARDEN_TEST_SUMMARIZER_KEY"
PRICES = {
    "currency": "EUR",
    "models": {
        "m-big": {"input": 2, "cache_read": 0.5, "cache_write": 2.5, "output": 10},
        "summ-*": {"input": 1, "output": 4},
    },
}


@pytest.fixture(scope="module")
def served(
    backend_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[ServerProcess, FakeProvider]]:
    """A server with a fake OpenAI summariser and a price table, of this module only."""
    work = Path(tmp_path_factory.mktemp("usage"))
    (work / "prices.json").write_text(json.dumps(PRICES))
    os.environ[KEY_ENV] = "sk-test"
    with FakeProvider("openai") as fake:
        fake.reply_text = "## Goal\nShip it."
        server = ServerProcess(
            backend_url,
            log_dir=work,
            extra_args=[
                *("--summarizer", "openai", "--summarizer-base-url", fake.base_url),
                *("--summarizer-model", "summ-mini", "--summarizer-api-key-env", KEY_ENV),
                *("--price-table", str(work / "prices.json")),
            ],
        )
        server.start()
        try:
            yield server, fake
        finally:
            server.stop()


@pytest.fixture
def stub(served: tuple[ServerProcess, FakeProvider]) -> Iterator[Stub]:
    with grpc.insecure_channel(served[0].target) as channel:
        yield pb_grpc.ContextServiceStub(channel)


def create(stub: Stub, **fields: Any) -> str:
    sid = f"use-{uuid.uuid4().hex[:10]}"
    fields.setdefault("policy", ses.ContextPolicy(keep_recent_tokens=60, tokenizer="heuristic"))
    stub.CreateSession(pb.CreateSessionRequest(session_id=sid, session=ses.Session(**fields)))
    return sid


def answer(text: str, model: str, message_id: str = "", **usage: int) -> m.Message:
    out = assistant(text, message_id=message_id)
    out.model = model
    out.usage.CopyFrom(m.Usage(**usage))
    return out


def usage(stub: Stub, sid: str = "") -> pb.UsageReport:
    return stub.GetUsage(pb.GetUsageRequest(session_id=sid), timeout=10)


def counts(t: pb.UsageTotals) -> tuple[int, ...]:
    return (
        t.calls,
        t.input_tokens,
        t.cache_read_tokens,
        t.cache_write_tokens,
        t.output_tokens,
        t.reasoning_tokens,
    )


def test_totals_count_each_reported_call_once(stub: Stub) -> None:
    tenant_before = usage(stub)
    sid = create(stub, model="m-big")
    first = pb.AppendMessagesRequest(
        session_id=sid,
        request_id="req-1",
        messages=[
            user("hi"),
            answer("a", "m-big", "a1", input_tokens=100, cache_read_tokens=900, output_tokens=50),
            answer("b", "", "a2", input_tokens=10, cache_write_tokens=20, output_tokens=5),
        ],
    )
    stub.AppendMessages(first, timeout=10)
    stub.AppendMessages(first, timeout=10)  # a retry: answered from its record
    again = pb.AppendMessagesRequest(session_id=sid, messages=[first.messages[1]])
    stub.AppendMessages(again, timeout=10)  # a re-sent message_id: the stored one
    other = answer("c", "m-other", input_tokens=7, output_tokens=3, reasoning_tokens=2)
    stub.AppendMessages(pb.AppendMessagesRequest(session_id=sid, messages=[other]), timeout=10)
    stub.RollbackTurn(pb.RollbackTurnRequest(session_id=sid, to_seq=1), timeout=10)

    report = usage(stub, sid)
    assert report.session_id == sid and report.session_count == 1 and report.priced
    assert counts(report.total) == (3, 117, 900, 20, 58, 2)  # a rollback refunds nothing
    by_model = {(u.model, u.source): u for u in report.models}
    big = by_model["m-big", pb.USAGE_SOURCE_AGENT]  # a message without a model: the session's
    assert counts(big.totals) == (2, 110, 900, 20, 55, 0) and big.priced
    assert big.totals.cost == pytest.approx((110 * 2 + 900 * 0.5 + 20 * 2.5 + 55 * 10) / 1e6)
    unpriced = by_model["m-other", pb.USAGE_SOURCE_AGENT]
    assert not unpriced.priced and unpriced.totals.cost == 0
    assert report.currency == "EUR" and report.total.cost == pytest.approx(big.totals.cost)
    tenant = usage(stub)
    assert tenant.session_id == "" and tenant.session_count == tenant_before.session_count + 1
    delta = [a - b for a, b in zip(counts(tenant.total), counts(tenant_before.total), strict=True)]
    assert delta == list(counts(report.total))


def test_model_output_reports_cache_and_reasoning(stub: Stub) -> None:
    sid = create(stub, model="m-big")
    stub.AppendMessages(pb.AppendMessagesRequest(session_id=sid, messages=[user("q")]))
    reply = {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "model": "m-big",
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}
        ],
        "usage": {
            "prompt_tokens": 1000,
            "completion_tokens": 300,
            "total_tokens": 1300,
            "prompt_tokens_details": {"cached_tokens": 800},
            "completion_tokens_details": {"reasoning_tokens": 250},
        },
    }
    request = pb.AppendModelOutputRequest(
        session_id=sid,
        format=pb.MODEL_INPUT_FORMAT_OPENAI_CHAT,
        response_json=json.dumps(reply),
        request_id="out-1",
    )
    stored = stub.AppendModelOutput(request, timeout=10).messages[0]
    assert stored.usage.reasoning_tokens == 250 and stored.usage.cache_read_tokens == 800
    stub.AppendModelOutput(request, timeout=10)
    assert counts(usage(stub, sid).total) == (1, 200, 800, 0, 300, 250)


def test_summarizer_calls_are_attributed_to_their_compaction(
    stub: Stub, served: tuple[ServerProcess, FakeProvider]
) -> None:
    fake = served[1]
    sid = create(stub)
    turns(stub, sid, 4)
    calls = len(fake.requests)
    compaction = stub.Compact(pb.CompactRequest(session_id=sid, request_id="c-1"), timeout=60)
    made = len(fake.requests) - calls
    assert made >= 1 and compaction.summarizer == "openai:summ-mini"
    spent = compaction.summarizer_usage
    assert spent.input_tokens > 0 and spent.output_tokens > 0
    retried = stub.Compact(pb.CompactRequest(session_id=sid, request_id="c-1"), timeout=60)
    assert retried.compaction_id == compaction.compaction_id
    assert len(fake.requests) - calls == made  # the retry made no call

    report = usage(stub, sid)
    summ = report.summarizer
    assert counts(summ) == (
        made,
        spent.input_tokens,
        spent.cache_read_tokens,
        spent.cache_write_tokens,
        spent.output_tokens,
        0,
    )
    assert counts(report.total) == counts(summ)  # turns() reports no usage of its own
    (line,) = report.models
    assert line.model == "summ-mini" and line.source == pb.USAGE_SOURCE_SUMMARIZER
    assert summ.cost == pytest.approx((spent.input_tokens * 1 + spent.output_tokens * 4) / 1e6)
    listed = stub.ListCompactions(pb.ListCompactionsRequest(session_id=sid)).compactions
    assert listed[0].summarizer_usage == spent


def test_ledger_survives_a_restart_and_stays_with_its_session_on_fork(
    stub: Stub, served: tuple[ServerProcess, FakeProvider]
) -> None:
    sid = create(stub, model="m-big")
    msgs = [user("q"), answer("a", "m-big", input_tokens=5, output_tokens=6)]
    stub.AppendMessages(pb.AppendMessagesRequest(session_id=sid, messages=msgs), timeout=10)
    served[0].restart()
    with grpc.insecure_channel(served[0].target) as channel:
        fresh = pb_grpc.ContextServiceStub(channel)
        assert counts(usage(fresh, sid).total) == (1, 5, 0, 0, 6, 0)
        fork = fresh.ForkSession(pb.ForkSessionRequest(session_id=sid), timeout=10)
        assert counts(usage(fresh, fork.session_id).total) == (0,) * 6
        more = [user("r"), answer("b", "m-big", input_tokens=1, output_tokens=1)]
        fresh.AppendMessages(pb.AppendMessagesRequest(session_id=sid, messages=more))
        assert counts(usage(fresh, sid).total) == (2, 6, 0, 0, 7, 0)
        assert counts(usage(fresh, fork.session_id).total) == (0,) * 6


def test_unknown_session_is_not_found(stub: Stub) -> None:
    expect_error(grpc.StatusCode.NOT_FOUND, "SESSION_NOT_FOUND", usage, stub, "no-such-session")


def cli(*argv: str) -> tuple[int, str]:
    """``ctxwarden ARGV`` as the command line runs it, with its output."""
    out = io.StringIO()
    code = admin.run(build_parser().parse_args(list(argv)), out=out)
    return code, out.getvalue()


def test_cli_prints_the_ledger(stub: Stub, served: tuple[ServerProcess, FakeProvider]) -> None:
    sid = create(stub, model="m-big")
    msgs = [user("q"), answer("a", "m-big", input_tokens=1000, output_tokens=100)]
    stub.AppendMessages(pb.AppendMessagesRequest(session_id=sid, messages=msgs), timeout=10)
    target = served[0].target
    code, printed = cli("usage", sid, "--target", target)
    lines = printed.splitlines()
    assert code == 0 and lines[0] == f"session {sid}: 1 session(s)"
    row = next(line.split() for line in lines if line.startswith("agent"))
    assert lines[-3].startswith("cache: 0 inputs built")
    assert row == ["agent", "m-big", "1", "1000", "0", "0", "100", "0", "0.003000", "EUR"]
    code, printed = cli("usage", sid, "--json", "--target", target)
    report = json.loads(printed)
    assert report["total"]["input_tokens"] == "1000"  # int64 as JSON strings
    assert report["total"]["cost"] == pytest.approx(0.003)
    assert cli("usage", "no-such", "--target", target)[0] == 1
