"""Compact with each server-side summariser, against fake providers speaking
the real wire formats: prompts, failures, concurrency, crashes, auto_compact."""

from __future__ import annotations

import os
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import grpc
import pytest

from ctxwarden.v1 import context_service_pb2 as pb
from ctxwarden.v1 import context_service_pb2_grpc as pb_grpc
from ctxwarden.v1 import session_pb2 as ses
from tests.e2e.test_compaction import build, policy, turns
from tests.summarizers.conftest import fake_anthropic, fake_openai  # noqa: F401
from tests.summarizers.fake_providers import FakeProvider, RecordedRequest
from tests.support.errors import expect_error
from tests.support.server import ServerProcess

KEY_ENV = "CTXWARDEN_TEST_SUMMARIZER_KEY"


@contextmanager
def serving(
    backend_url: str, log_dir: Path, *args: str
) -> Iterator[tuple[ServerProcess, pb_grpc.ContextServiceStub]]:
    os.environ[KEY_ENV] = "sk-test-123"
    server = ServerProcess(backend_url, log_dir=log_dir, extra_args=list(args))
    server.start()
    try:
        with grpc.insecure_channel(server.target) as ch:
            yield server, pb_grpc.ContextServiceStub(ch)
    finally:
        server.stop()


def new_sid(stub: pb_grpc.ContextServiceStub, **fields: Any) -> str:
    sid = f"sum-{uuid.uuid4().hex[:10]}"
    fields.setdefault("policy", policy())
    stub.CreateSession(pb.CreateSessionRequest(session_id=sid, session=ses.Session(**fields)))
    return sid


def compact(stub: pb_grpc.ContextServiceStub, sid: str, **kw: Any) -> pb.Compaction:
    return stub.Compact(pb.CompactRequest(session_id=sid, **kw), timeout=60)


def history_request(fake: FakeProvider) -> RecordedRequest:
    """The history-summary request (not the turn-prefix one)."""
    return next(r for r in fake.requests if "## Key Decisions" in str(r.body))


def openai_args(fake: FakeProvider) -> list[str]:
    return [
        "--summarizer",
        "openai",
        "--summarizer-base-url",
        fake.base_url,
        "--summarizer-model",
        "summ-mini",
        "--summarizer-api-key-env",
        KEY_ENV,
        "--summarizer-timeout",
        "10",
    ]


def test_openai_compatible_summarizer(
    backend_url: str,
    tmp_path: Path,
    fake_openai: FakeProvider,  # noqa: F811
) -> None:
    fake_openai.reply_text = "## Goal\nShip the feature."
    with serving(backend_url, tmp_path, *openai_args(fake_openai)) as (_, stub):
        sid = new_sid(stub, pinned_state="phase: testing")
        turns(stub, sid, 5)
        done = compact(stub, sid, instructions="mention tests")
        assert done.summarizer == "openai:summ-mini"
        assert done.summary.startswith("## Goal\nShip the feature.")
        assert done.trigger == pb.COMPACTION_TRIGGER_MANUAL
        req = history_request(fake_openai)
        assert req.path == "/v1/chat/completions"
        assert req.headers["authorization"] == "Bearer sk-test-123"
        body = req.body
        assert body["model"] == "summ-mini"
        assert [m["role"] for m in body["messages"]] == ["system", "user"]
        user_text = body["messages"][1]["content"]
        for section in (
            "## Goal",
            "## Progress",
            "### Done",
            "## Next Steps",
            "## Critical Context",
        ):
            assert section in user_text
        assert "<pinned-state>\nphase: testing\n</pinned-state>" in user_text
        assert "<read-files>" in user_text and "src/file0.py" in user_text
        assert "Additional focus: mention tests" in user_text
        assert "<previous-summary>" not in user_text
        assert body.get("max_tokens") == int(0.8 * 16384)
        # Second round: the previous summary goes back with only the new messages.
        turns(stub, sid, 5, start=5)
        fake_openai.requests.clear()
        compact(stub, sid)
        second = history_request(fake_openai)
        text = second.body["messages"][1]["content"]
        assert "<previous-summary>\n## Goal\nShip the feature." in text
        assert "[User]: turn 0:" not in text  # summarised last time, not again
        mi = build(stub, sid)
        assert mi.compaction_id and mi.messages[0].metadata["ctxwarden.summary"]


def test_anthropic_summarizer(
    backend_url: str,
    tmp_path: Path,
    fake_anthropic: FakeProvider,  # noqa: F811
) -> None:
    fake_anthropic.reply_text = "## Goal\nFix the bug."
    args = [
        "--summarizer",
        "anthropic",
        "--summarizer-base-url",
        fake_anthropic.base_url,
        "--summarizer-model",
        "claude-haiku-4-5",
        "--summarizer-api-key-env",
        KEY_ENV,
    ]
    with serving(backend_url, tmp_path, *args) as (_, stub):
        sid = new_sid(stub)
        turns(stub, sid, 5)
        done = compact(stub, sid)
        assert done.summarizer == "anthropic:claude-haiku-4-5"
        assert done.summary.startswith("## Goal\nFix the bug.")
        req = history_request(fake_anthropic)
        assert req.path == "/v1/messages"
        assert req.headers["x-api-key"] == "sk-test-123"
        assert req.headers["anthropic-version"] == "2023-06-01"
        assert req.body["model"] == "claude-haiku-4-5"
        assert "context checkpoints" in req.body["system"]
        assert req.body["messages"][0]["role"] == "user"
        assert "## Key Decisions" in req.body["messages"][0]["content"]


def test_extractive_summarizer_and_auto_compact(backend_url: str, tmp_path: Path) -> None:
    with serving(backend_url, tmp_path, "--summarizer", "extractive") as (_, stub):
        sid = new_sid(stub, policy=policy(context_window=1500, reserve_tokens=300, keep=300))
        turns(stub, sid, 20)
        plain = build(stub, sid)
        assert plain.compaction_recommended and plain.compaction_id == ""
        mi = build(stub, sid, auto_compact=True)
        assert mi.compaction_id and not mi.compaction_recommended
        assert mi.tokens.total_tokens < plain.tokens.total_tokens
        listed = stub.ListCompactions(pb.ListCompactionsRequest(session_id=sid)).compactions
        assert listed[0].trigger == pb.COMPACTION_TRIGGER_THRESHOLD
        assert listed[0].summarizer == "extractive"
        assert "extractive" in listed[0].summary.splitlines()[0]
        assert "turn 0: please read file0.py" in listed[0].summary
        # Under the threshold, auto_compact does nothing.
        again = build(stub, sid, auto_compact=True)
        assert again.compaction_id == mi.compaction_id


def test_summarizer_failure_changes_nothing(
    backend_url: str,
    tmp_path: Path,
    fake_openai: FakeProvider,  # noqa: F811
) -> None:
    with serving(backend_url, tmp_path, *openai_args(fake_openai)) as (_, stub):
        sid = new_sid(stub)
        turns(stub, sid, 5)
        before = build(stub, sid).SerializeToString(deterministic=True)
        fake_openai.fail_next(50, 500)
        err = expect_error(grpc.StatusCode.UNAVAILABLE, "SUMMARIZER_FAILED", compact, stub, sid)
        assert "nothing was changed" in err.details()
        assert build(stub, sid).SerializeToString(deterministic=True) == before
        assert (
            list(stub.ListCompactions(pb.ListCompactionsRequest(session_id=sid)).compactions) == []
        )
        fake_openai.reset()
        fake_openai.fail_next(1, 400, message="bad request: model not found")
        err = expect_error(
            grpc.StatusCode.FAILED_PRECONDITION, "SUMMARIZER_FAILED", compact, stub, sid
        )
        assert "model not found" in err.details()


def _race(fns: list[Callable[[], object]]) -> list[object]:
    results: list[object] = [None] * len(fns)

    def run(i: int) -> None:
        try:
            results[i] = fns[i]()
        except grpc.RpcError as err:
            results[i] = err

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(fns))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


def test_concurrent_compactions_one_wins(
    backend_url: str,
    tmp_path: Path,
    fake_openai: FakeProvider,  # noqa: F811
) -> None:
    fake_openai.delay = 1.0
    with serving(backend_url, tmp_path, *openai_args(fake_openai)) as (_, stub):
        sid = new_sid(stub)
        turns(stub, sid, 5)
        results = _race([lambda: compact(stub, sid), lambda: compact(stub, sid)])
        wins = [r for r in results if isinstance(r, pb.Compaction)]
        losses = [r for r in results if isinstance(r, grpc.RpcError)]
        assert len(wins) == 1 and len(losses) == 1
        assert losses[0].code() == grpc.StatusCode.ABORTED
        listed = stub.ListCompactions(pb.ListCompactionsRequest(session_id=sid)).compactions
        assert [c.compaction_id for c in listed] == [wins[0].compaction_id]
        # A retry with the same request_id gets the same result.
        a = compact(stub, sid, request_id="same", keep_recent_tokens=30)
        b = compact(stub, sid, request_id="same", keep_recent_tokens=30)
        assert a == b


def test_appends_continue_while_summarising(
    backend_url: str,
    tmp_path: Path,
    fake_openai: FakeProvider,  # noqa: F811
) -> None:
    fake_openai.delay = 1.5
    with serving(backend_url, tmp_path, *openai_args(fake_openai)) as (_, stub):
        sid = new_sid(stub)
        turns(stub, sid, 5)
        t0 = time.monotonic()

        def append_a_turn() -> float:
            time.sleep(0.3)
            turns(stub, sid, 1, start=5)
            return time.monotonic() - t0

        results = _race([lambda: compact(stub, sid), append_a_turn])
        assert isinstance(results[0], pb.Compaction)
        assert isinstance(results[1], float) and results[1] < 1.5  # not blocked by the LLM call
        seqs = [m.seq for m in build(stub, sid).messages[1:]]
        assert seqs[-1] == 24 and seqs[0] == results[0].first_kept_seq


def test_kill_9_during_compaction_leaves_old_state(
    backend_url: str,
    tmp_path: Path,
    fake_openai: FakeProvider,  # noqa: F811
) -> None:
    fake_openai.delay = 3.0
    with serving(backend_url, tmp_path, *openai_args(fake_openai)) as (server, stub):
        sid = new_sid(stub)
        turns(stub, sid, 5)
        before = build(stub, sid).SerializeToString(deterministic=True)
        call = stub.Compact.future(pb.CompactRequest(session_id=sid), timeout=30)
        time.sleep(0.8)
        server.kill9()
        with pytest.raises(grpc.RpcError):
            call.result()
        server.start()
        with grpc.insecure_channel(server.target) as ch:
            stub2 = pb_grpc.ContextServiceStub(ch)
            assert build(stub2, sid).SerializeToString(deterministic=True) == before
            history = stub2.ListMessages(pb.ListMessagesRequest(session_id=sid)).messages
            assert len(history) == 20
            fake_openai.delay = 0
            done = compact(stub2, sid)
            assert build(stub2, sid).compaction_id == done.compaction_id
