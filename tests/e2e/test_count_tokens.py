"""CountTokens: counting without a session."""

from __future__ import annotations

import grpc

from ctxwarden.v1 import context_service_pb2 as pb
from ctxwarden.v1 import session_pb2 as ses
from tests.e2e.conftest import Stub
from tests.support.builders import assistant, user
from tests.support.errors import expect_error


def test_count_tokens_with_model_and_spec(stub: Stub) -> None:
    req = pb.CountTokensRequest(
        model="gpt-4o",
        messages=[user("hello world"), assistant("hi", [("c", "read", {"path": "a"})])],
        tools=[ses.ToolDefinition(name="read", description="Read a file")],
        text="hello world",
    )
    r = stub.CountTokens(req)
    assert r.tokenizer == "tiktoken:o200k_base" and r.exact
    assert r.text_tokens == 2 and r.message_tokens[0] >= 2
    # + 3 tokens that prime the reply, billed once per request
    assert r.total_tokens == sum(r.message_tokens) + r.tools_tokens + r.text_tokens + 3
    h = stub.CountTokens(pb.CountTokensRequest(model="some-unknown-model", text="x" * 40))
    assert (h.tokenizer, h.exact, h.total_tokens) == ("heuristic", False, 10)
    c = stub.CountTokens(
        pb.CountTokensRequest(tokenizer="tiktoken:cl100k_base", text="hello world")
    )
    assert (c.tokenizer, c.total_tokens) == ("tiktoken:cl100k_base", 2)
    expect_error(
        grpc.StatusCode.INVALID_ARGUMENT,
        "UNKNOWN_TOKENIZER",
        stub.CountTokens,
        pb.CountTokensRequest(tokenizer="nope", text="x"),
    )
