"""Valid protobuf with hostile values, for every RPC of ContextService.

Each RPC gets requests built from its descriptor alone (so a new RPC is fuzzed
too) and, where ``strategies.TARGETED`` has one, requests aimed at a pool of
real sessions: odd Unicode and NUL, oversized strings, unknown enum numbers,
huge and negative numbers, bad JSON in tool arguments, tool results without
calls, garbage images, forged page tokens, reused idempotency keys, seqs out
of range, stale expected_last_seq. Besides the status check of every call, a
failed append must leave the session's last_seq unchanged.

CI runs a fixed, derandomized budget; set ``CTXWARDEN_FUZZ_EXAMPLES=N`` for N
random examples per RPC (see tests/fuzz/README.md).
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from google.protobuf.message import Message as PbMessage
from hypothesis import given

from ctxwarden.v1 import context_service_pb2 as pb
from ctxwarden.v1 import session_pb2 as ses
from tests.fuzz.harness import (
    RPC_BY_NAME,
    RPCS,
    FuzzTarget,
    Rpc,
    call_raw,
    fuzz_settings,
    judge,
)
from tests.fuzz.strategies import FRESH_PLAN, TARGETED, WithPrelude, requests_for

STRUCTURED_EXAMPLES = 45  # per RPC and backend in CI; CTXWARDEN_FUZZ_EXAMPLES for more
HEALTH_EVERY = 20
APPEND_RPCS = ("AppendMessages", "StreamMessages")


def _last_seq(fuzz: FuzzTarget, sid: str) -> int:
    rpc = RPC_BY_NAME["GetSession"]
    outcome = call_raw(fuzz.channel, rpc, pb.GetSessionRequest(session_id=sid).SerializeToString())
    assert outcome.ok, f"pool session {sid!r} became unreadable: {outcome.code} {outcome.details}"
    return ses.Session.FromString(outcome.responses[0]).last_seq


def _fresh_plan(fuzz: FuzzTarget, request: pb.CommitCompactionRequest) -> None:
    """Replace the placeholder plan_id by a real plan of the request's session."""
    prepare = RPC_BY_NAME["PrepareCompaction"]
    ask = pb.PrepareCompactionRequest(session_id=request.session_id, keep_recent_tokens=10)
    payload = ask.SerializeToString()
    outcome = call_raw(fuzz.channel, prepare, payload)
    judge(prepare, payload, outcome, fuzz.verdicts, [ask], fuzzer="structured")
    plan = pb.CompactionPlan.FromString(outcome.responses[0]) if outcome.ok else None
    request.plan_id = plan.plan_id if plan is not None else "01J00000000000000000000000"


def _prelude(fuzz: FuzzTarget, prelude: pb.AppendMessagesRequest) -> None:
    """Append well-formed turns; they must be accepted."""
    append = RPC_BY_NAME["AppendMessages"]
    payload = prelude.SerializeToString()
    outcome = call_raw(fuzz.channel, append, payload)
    judge(append, payload, outcome, fuzz.verdicts, [prelude], fuzzer="structured")
    assert outcome.ok, f"valid turns were refused: {outcome.code.name} {outcome.details}"


def invoke(
    fuzz: FuzzTarget, rpc: Rpc, request: PbMessage | WithPrelude | Sequence[PbMessage]
) -> None:
    if isinstance(request, WithPrelude):
        _prelude(fuzz, request.prelude)
        request = request.request
    requests = list(request) if isinstance(request, Sequence) else [request]
    for r in requests:
        if isinstance(r, pb.CommitCompactionRequest) and r.plan_id == FRESH_PLAN:
            _fresh_plan(fuzz, r)
    watched: dict[str, int] = {}
    if rpc.name in APPEND_RPCS:
        for r in requests:
            sid = getattr(r, "session_id", "")
            if sid in fuzz.pool.sessions and sid not in watched:
                watched[sid] = _last_seq(fuzz, sid)
    frames = [r.SerializeToString() for r in requests]
    payload: bytes | list[bytes] = frames if rpc.streaming else frames[0]
    outcome = call_raw(fuzz.channel, rpc, payload)
    judge(rpc, payload, outcome, fuzz.verdicts, requests, fuzzer="structured")
    for r, raw in zip(requests, outcome.responses, strict=False):
        sid = getattr(r, "session_id", "")
        if sid in watched:
            stored = pb.AppendMessagesResponse.FromString(raw).last_seq
            watched[sid] = max(watched[sid], stored)
    for sid, expected in watched.items():
        actual = _last_seq(fuzz, sid)
        assert actual == expected, (
            f"{rpc.name} answered {outcome.code.name} but session {sid!r} has last_seq "
            f"{actual}, expected {expected}: a failed append must write nothing"
        )


@pytest.mark.parametrize("rpc", RPCS, ids=lambda r: r.name)
def test_structured(fuzz: FuzzTarget, rpc: Rpc) -> None:
    pool = fuzz.pool.for_rpc(rpc.name)
    strategy = requests_for(rpc.name, rpc.request_descriptor, rpc.streaming, pool)
    calls = 0

    @fuzz_settings(STRUCTURED_EXAMPLES)
    @given(request=strategy)
    def run(request: PbMessage | WithPrelude | list[PbMessage]) -> None:
        nonlocal calls
        invoke(fuzz, rpc, request)
        calls += 1
        if calls % HEALTH_EVERY == 0:
            fuzz.assert_healthy()

    run()
    fuzz.assert_consistent()


def test_every_rpc_has_targeted_requests() -> None:
    """Descriptor-only requests rarely reach real state: a new RPC needs its own strategy."""
    missing = sorted(r.name for r in RPCS if r.name not in TARGETED)
    assert not missing, f"add request strategies for {missing} to tests/fuzz/strategies.TARGETED"
