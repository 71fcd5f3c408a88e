"""Latency against history length: BuildModelInput and restore, with and without a checkpoint.

A server started with ``--max-hot-sessions 2`` forgets a session as soon as two
others were used, so "restore" is measured by touching two filler sessions and
then timing the next BuildModelInput of the session (it reads the session row,
its newest checkpoint and the kept messages). "hot" is the call right after.
Sessions "with checkpoint" were compacted once by the server's extractive
summariser after they were built, like a long agent session that crossed its
compaction threshold; the others have their whole history in the input.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import grpc
from tests.support.server import ServerProcess

from bench.common import (
    CHANNEL_OPTIONS,
    TIMEOUT,
    Result,
    append_batched,
    create_session,
    log,
    summarize,
    timed,
)
from bench.workload import Conversation
from ctxwarden.v1 import context_service_pb2 as pb
from ctxwarden.v1 import context_service_pb2_grpc as pb_grpc

TAIL_MESSAGES = 20
TAIL_REPS = 30
PLAIN_MAX = 10_000
"""Largest history measured without a checkpoint (beyond, the input is hundreds
of MB and millions of tokens: no model takes it, so nobody sends it)."""


class HistoryScaling:
    def __init__(
        self,
        backend: str,
        url: str,
        log_dir: Path,
        sizes: Sequence[int],
        reps: int,
        seed: int,
    ) -> None:
        self.backend = backend
        self.sizes = sizes
        self.reps = reps
        self.seed = seed
        self.server = ServerProcess(
            url, log_dir, ["--max-hot-sessions", "2", "--summarizer", "extractive"]
        )
        self.results: list[Result] = []

    def run(self) -> list[Result]:
        self.server.start()
        try:
            with grpc.insecure_channel(self.server.target, options=CHANNEL_OPTIONS) as channel:
                self._run(pb_grpc.ContextServiceStub(channel))
        finally:
            self.server.stop()
        return self.results

    def _run(self, stub: pb_grpc.ContextServiceStub) -> None:
        fillers = [create_session(stub, f"filler{i}") for i in range(2)]
        for sid in fillers:
            append_batched(stub, sid, Conversation(self.seed).alternating(4))

        def evict() -> None:
            for sid in fillers:
                stub.BuildModelInput(pb.BuildModelInputRequest(session_id=sid), timeout=TIMEOUT)

        for size in self.sizes:
            history = Conversation(self.seed * 7919 + size).agent_history(size)
            log(f"{self.backend}: history {size}: building ({len(history)} msgs)")
            sid = create_session(stub, f"hist{size}")
            t0 = time.perf_counter()
            append_batched(stub, sid, history)
            build_s = time.perf_counter() - t0
            self._measure_tail(stub, sid, size)
            if size <= PLAIN_MAX:
                self._measure(stub, sid, size, "no_checkpoint", evict)
            log(f"{self.backend}: history {size}: compacting")

            def compact(sid: str = sid) -> pb.Compaction:
                return stub.Compact(pb.CompactRequest(session_id=sid), timeout=600)

            ns, done = timed(compact)
            self._measure(
                stub,
                sid,
                size,
                "checkpoint",
                evict,
                {
                    "compact_ms": ns / 1e6,
                    "build_s": build_s,
                    "first_kept_seq": done.first_kept_seq,
                    "tokens_before": done.tokens_before,
                    "tokens_after": done.tokens_after,
                },
            )

    def _measure_tail(self, stub: pb_grpc.ContextServiceStub, sid: str, size: int) -> None:
        """ListMessages of the newest TAIL_MESSAGES (what a framework adapter's
        ``get_items(limit)`` asks for): one indexed range read, whatever the history."""
        req = pb.ListMessagesRequest(session_id=sid, newest_first=True, page_size=TAIL_MESSAGES)
        samples = []
        for _ in range(TAIL_REPS):
            ns, page = timed(lambda: stub.ListMessages(req, timeout=TIMEOUT))
            assert len(page.messages) == TAIL_MESSAGES, len(page.messages)
            samples.append(ns)
        note = f"newest {TAIL_MESSAGES} of {size:,} msgs"
        self.results.append(
            summarize(
                self.backend,
                f"tail_read_{size}",
                samples,
                note=note,
                extra={"history_messages": size, "page_size": TAIL_MESSAGES},
            )
        )
        log(f"{self.backend}: tail read {size}: {statistics.median(samples) / 1e6:.2f} ms")

    def _measure(
        self,
        stub: pb_grpc.ContextServiceStub,
        sid: str,
        size: int,
        kind: str,
        evict: Callable[[], None],
        extra: dict[str, Any] | None = None,
    ) -> None:
        req = pb.BuildModelInputRequest(session_id=sid)
        restore: list[int] = []
        hot: list[int] = []
        first = pb.ModelInput()
        for _ in range(self.reps):
            evict()
            ns, first = timed(lambda: stub.BuildModelInput(req, timeout=TIMEOUT * 5))
            restore.append(ns)
            hot.append(timed(lambda: stub.BuildModelInput(req, timeout=TIMEOUT * 5))[0])
        info = {
            "history_messages": size,
            "input_messages": len(first.messages),
            "input_bytes": first.ByteSize(),
            "input_tokens": first.tokens.total_tokens,
            "hot_median_ms": statistics.median(hot) / 1e6,
            **(extra or {}),
        }
        note = (
            f"{size:,} msgs history, input {len(first.messages):,} msgs / "
            f"{first.ByteSize() / 1e6:.2f} MB"
        )
        self.results.append(
            summarize(self.backend, f"restore_{kind}_{size}", restore, note=note, extra=info)
        )
        self.results.append(
            summarize(self.backend, f"build_model_input_{kind}_{size}", hot, note=note, extra=info)
        )
        log(
            f"{self.backend}: {kind} {size}: restore {statistics.median(restore) / 1e6:.2f} ms, "
            f"hot {statistics.median(hot) / 1e6:.2f} ms ({note})"
        )
