"""Server-side Compact against a misbehaving summariser (OpenAI and Anthropic formats).

tests/e2e/test_summarizers.py covers an OpenAI endpoint answering 500s until the
retries run out and a 400. Here: a provider that never answers in time, a
body that is not JSON, JSON cut off, a well-formed reply without a summary,
an empty summary, a dropped connection, 500s (Anthropic), a rejected key;
and transient 500s the server's own retries absorb. Each failure must be a
clear status (UNAVAILABLE when a retry may help, FAILED_PRECONDITION when it
will not; reason SUMMARIZER_FAILED, the cause in the message) and change
nothing: the session already has a checkpoint, and its model input (byte for
byte), checkpoints and settings stay as they were. Once the provider behaves,
the same Compact (same request_id) succeeds.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import grpc
import pytest

from ctxwarden.v1 import context_service_pb2 as pb
from ctxwarden.v1 import context_service_pb2_grpc as pb_grpc
from ctxwarden.v1 import session_pb2 as ses
from tests.e2e.test_compaction import policy, turns
from tests.reliability.fake_llm import HTML_PAGE, TRUNCATED_JSON, RawReply, ScriptedProvider
from tests.summarizers.fake_providers import Kind
from tests.support.errors import expect_error
from tests.support.server import ServerProcess

KEY_ENV = "CTXWARDEN_TEST_SUMMARIZER_KEY"
TIMEOUT = 1.0
"""--summarizer-timeout: seconds per summariser request."""
MODELS = {"openai": "summ-mini", "anthropic": "claude-haiku-4-5"}
UNAVAILABLE = grpc.StatusCode.UNAVAILABLE
PRECONDITION = grpc.StatusCode.FAILED_PRECONDITION


@dataclass(frozen=True)
class Fault:
    name: str
    script: Callable[[ScriptedProvider], None]
    code: grpc.StatusCode
    says: str
    """A substring of the error message naming the cause."""
    kinds: tuple[str, ...] = ("openai", "anthropic")


def _wrong_shape(fake: ScriptedProvider) -> None:
    if fake.kind == "openai":
        fake.reply_json = {"id": "chatcmpl-x", "object": "chat.completion", "choices": []}
    else:
        fake.reply_json = {"id": "msg_x", "type": "message", "role": "assistant", "content": None}


def _empty(fake: ScriptedProvider) -> None:
    fake.reply_text = "  \n "


# Timeouts and dropped connections take the same HTTP path for both formats and
# cost seconds of retries and backoff: OpenAI only.
FAULTS = [
    Fault(
        "timeout",
        lambda f: f.slow_next(20, TIMEOUT + 1.5),
        UNAVAILABLE,
        "no response within",
        ("openai",),
    ),
    Fault("not_json", lambda f: f.raw_next(20, RawReply(HTML_PAGE)), UNAVAILABLE, "not a JSON"),
    Fault(
        "truncated_json",
        lambda f: f.raw_next(20, RawReply(TRUNCATED_JSON, content_type="application/json")),
        UNAVAILABLE,
        "not a JSON",
    ),
    Fault("no_summary_in_reply", _wrong_shape, UNAVAILABLE, "response has no"),
    Fault("empty_summary", _empty, UNAVAILABLE, "empty summary"),
    Fault(
        "connection_dropped",
        lambda f: f.raw_next(20, RawReply(close=True)),
        UNAVAILABLE,
        "connection error",
        ("anthropic",),
    ),
    # OpenAI 500s until the retries run out: tests/e2e/test_summarizers.py.
    Fault("http_500", lambda f: f.fail_next(20, 500), UNAVAILABLE, "HTTP 500", ("anthropic",)),
    Fault("bad_key", lambda f: f.fail_next(2, 401), PRECONDITION, "HTTP 401"),
]


@dataclass
class Summarising:
    """A server whose summariser is ``fake``, and a stub to call it."""

    fake: ScriptedProvider
    stub: pb_grpc.ContextServiceStub


def _summarising(
    backend_url: str, kind: Kind, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Summarising]:
    os.environ[KEY_ENV] = "sk-test-123"
    with ScriptedProvider(kind) as fake:
        fake.reset()
        args = ["--summarizer", kind, "--summarizer-base-url", fake.base_url]
        args += ["--summarizer-model", MODELS[kind], "--summarizer-api-key-env", KEY_ENV]
        args += ["--summarizer-timeout", str(TIMEOUT)]
        server = ServerProcess(backend_url, tmp_path_factory.mktemp("logs"), extra_args=args)
        server.start()
        try:
            with grpc.insecure_channel(server.target) as ch:
                yield Summarising(fake, pb_grpc.ContextServiceStub(ch))
        finally:
            server.stop()


@pytest.fixture(scope="module")
def openai(backend_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Summarising]:
    yield from _summarising(backend_url, "openai", tmp_path_factory)


@pytest.fixture(scope="module")
def anthropic(backend_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Summarising]:
    yield from _summarising(backend_url, "anthropic", tmp_path_factory)


def _compact(stub: pb_grpc.ContextServiceStub, sid: str, request_id: str) -> pb.Compaction:
    return stub.Compact(pb.CompactRequest(session_id=sid, request_id=request_id), timeout=60)


def _state(stub: pb_grpc.ContextServiceStub, sid: str) -> tuple[bytes, list[pb.Compaction], bytes]:
    mi = stub.BuildModelInput(pb.BuildModelInputRequest(session_id=sid), timeout=30)
    listed = stub.ListCompactions(pb.ListCompactionsRequest(session_id=sid), timeout=30)
    session = stub.GetSession(pb.GetSessionRequest(session_id=sid), timeout=30)
    return (
        mi.SerializeToString(deterministic=True),
        list(listed.compactions),
        session.SerializeToString(deterministic=True),
    )


def _compacted_session(stub: pb_grpc.ContextServiceStub, name: str) -> str:
    """A session with one checkpoint and new history after it."""
    sid = f"sf-{name}-{os.urandom(4).hex()}"
    stub.CreateSession(
        pb.CreateSessionRequest(session_id=sid, session=ses.Session(policy=policy())), timeout=30
    )
    turns(stub, sid, 5)
    _compact(stub, sid, "first")
    turns(stub, sid, 5, start=5)
    return sid


def _faults(kind: str) -> list[Any]:
    return [pytest.param(f, id=f.name) for f in FAULTS if kind in f.kinds]


def _failure_changes_nothing(s: Summarising, fault: Fault) -> None:
    fake, stub = s.fake, s.stub
    fake.reset()
    sid = _compacted_session(stub, fault.name)
    before = _state(stub, sid)
    assert len(before[1]) == 1
    fake.reset()
    fault.script(fake)
    err = expect_error(fault.code, "SUMMARIZER_FAILED", _compact, stub, sid, "second")
    details = err.details() or ""
    assert "nothing was changed" in details
    assert fault.says in details, details
    assert fake.requests, "the summariser was never called"
    assert _state(stub, sid) == before
    # The provider recovers: the very same request now compacts.
    fake.reset()
    done = _compact(stub, sid, "second")
    assert done.summary.startswith("## Goal\nKeep the service reliable.")
    mi, listed, _ = _state(stub, sid)
    assert [c.compaction_id for c in listed] == [done.compaction_id, before[1][0].compaction_id]
    assert pb.ModelInput.FromString(mi).compaction_id == done.compaction_id


@pytest.mark.parametrize("fault", _faults("openai"))
def test_openai_failure_changes_nothing_and_retry_succeeds(
    openai: Summarising, fault: Fault
) -> None:
    _failure_changes_nothing(openai, fault)


@pytest.mark.parametrize("fault", _faults("anthropic"))
def test_anthropic_failure_changes_nothing_and_retry_succeeds(
    anthropic: Summarising, fault: Fault
) -> None:
    _failure_changes_nothing(anthropic, fault)


def _transient_errors_absorbed(s: Summarising, status: int) -> None:
    fake, stub = s.fake, s.stub
    fake.reset()
    sid = _compacted_session(stub, f"transient{status}")
    fake.reset()
    fake.fail_next(2, status)
    done = _compact(stub, sid, "second")
    statuses = [r.status for r in fake.responses]
    assert statuses[:3] == [status, status, 200], statuses
    listed = stub.ListCompactions(pb.ListCompactionsRequest(session_id=sid), timeout=30)
    assert listed.compactions[0].compaction_id == done.compaction_id
    assert len(listed.compactions) == 2


def test_openai_transient_500s_are_retried_by_the_server(openai: Summarising) -> None:
    _transient_errors_absorbed(openai, 500)


def test_anthropic_transient_overload_is_retried_by_the_server(anthropic: Summarising) -> None:
    _transient_errors_absorbed(anthropic, 529)
