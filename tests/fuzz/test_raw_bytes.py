"""Raw request bytes for every RPC of ContextService.

Each RPC of the generated descriptor (a new one is picked up automatically)
gets arbitrary bytes, wire-level messages built from its request type (wrong
wire types, huge varints, lengths past the end, deep group nesting) and
mutations of valid requests (bit flips, truncation, splices, inserted invalid
UTF-8). Streaming RPCs get several raw frames per call. Every call has a
deadline; the answer must be OK or a documented client error carrying an
ErrorInfo, never INTERNAL, UNKNOWN or a timeout. After each RPC's batch the
server must still be alive and SERVING and the database consistent.

CI runs a fixed, derandomized budget; set ``CTXWARDEN_FUZZ_EXAMPLES=N`` for N
random examples per RPC (see tests/fuzz/README.md).
"""

from __future__ import annotations

from typing import Any

import grpc
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.fuzz.harness import RPCS, FuzzTarget, Rpc, call_raw, fuzz_settings, judge
from tests.fuzz.strategies import raw_payloads, seed_requests

RAW_EXAMPLES = 100
HEALTH_EVERY = 20


@pytest.mark.parametrize("rpc", RPCS, ids=lambda r: r.name)
def test_raw_bytes(fuzz: FuzzTarget, rpc: Rpc) -> None:
    seeds = seed_requests(rpc.name, rpc.request_descriptor, fuzz.pool.for_rpc(rpc.name))
    payloads: st.SearchStrategy[Any] = raw_payloads(rpc.request_descriptor, seeds)
    if rpc.streaming:
        payloads = st.lists(payloads, min_size=1, max_size=4)
    calls = 0

    @fuzz_settings(RAW_EXAMPLES)
    @given(payload=payloads)
    def run(payload: bytes | list[bytes]) -> None:
        nonlocal calls
        judge(rpc, payload, call_raw(fuzz.channel, rpc, payload), fuzz.verdicts)
        calls += 1
        if calls % HEALTH_EVERY == 0:
            fuzz.assert_healthy()

    run()
    fuzz.assert_consistent()


@pytest.mark.parametrize(
    "path",
    [
        "/ctxwarden.v1.ContextService/NoSuchMethod",
        "/ctxwarden.v1.NoSuchService/GetSession",
        "/ctxwarden.v1.ContextService/getsession",
        "/ctxwarden.v1.ContextService/GetSession/x",
    ],
)
def test_unknown_methods_are_unimplemented(fuzz: FuzzTarget, path: str) -> None:
    unary: grpc.UnaryUnaryMultiCallable[bytes, bytes] = fuzz.channel.unary_unary(
        path, request_serializer=None, response_deserializer=None
    )
    with pytest.raises(grpc.RpcError) as caught:
        unary(b"\x0a\x01a", timeout=10)
    assert caught.value.code() == grpc.StatusCode.UNIMPLEMENTED
    fuzz.assert_healthy()
