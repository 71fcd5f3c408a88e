"""BuildModelInput latency with and without background compactions running.

    .venv/bin/python -m bench.background [--agents 16] [--turns 120] [--json out.json]

One ``ctxwarden serve`` with an OpenAI-compatible summariser that is a fake
provider answering after 2 s. Agents (one thread and session each) loop: append
a user turn, BuildModelInput(auto_compact), think for 50 ms (a real agent waits
for its model). Two kinds of phase on the same server, alternated (without,
with, without, with: the machine's load drifts) and pooled per kind:

- without: sessions whose policy has no soft threshold (nothing is compacted);
- with: the same workload, background_compaction_percent = 40, so every
  session crosses its soft threshold once and is compacted in the background
  (2 s per summariser call) while the agents go on.

The target (bench/targets.py): p99 with <= 2x p99 without, and no
BuildModelInput of the "with" phase crossed the hard threshold (where it would
wait for a summariser).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import grpc
from tests.summarizers.fake_providers import FakeProvider
from tests.support.server import ServerProcess, migrate_database

from bench.common import Result, log, summarize
from bench.workload import Conversation
from ctxwarden.v1 import context_service_pb2 as pb
from ctxwarden.v1 import context_service_pb2_grpc as pb_grpc
from ctxwarden.v1 import message_pb2 as m
from ctxwarden.v1 import session_pb2 as ses

KEY_ENV = "CTXWARDEN_BENCH_SUMMARIZER_KEY"
SUMMARIZER_DELAY = 2.0
SOFT_PERCENT = 40
TURN_BYTES = 400  # ~100 tokens
THINK_SECONDS = 0.05


def _policy(percent: int) -> ses.ContextPolicy:
    """Threshold 20,000 - 4,000 = 16,000 tokens; soft threshold ``percent`` of it."""
    return ses.ContextPolicy(
        context_window=20_000,
        reserve_tokens=4_000,
        keep_recent_tokens=2_000,
        tokenizer="heuristic",
        background_compaction_percent=percent,
    )


def _agent(
    stub: pb_grpc.ContextServiceStub,
    sid: str,
    turns: int,
    seed: int,
    samples: list[int],
    over_hard: list[int],
) -> None:
    conv = Conversation(seed)
    for _ in range(turns):
        stub.AppendMessages(
            pb.AppendMessagesRequest(
                session_id=sid, messages=[conv.text_message(m.ROLE_USER, TURN_BYTES)]
            ),
            timeout=60,
        )
        t = time.perf_counter_ns()
        view = stub.BuildModelInput(
            pb.BuildModelInputRequest(session_id=sid, auto_compact=True), timeout=60
        )
        samples.append(time.perf_counter_ns() - t)
        if view.compaction_recommended:
            over_hard.append(1)
        time.sleep(THINK_SECONDS)  # the agent's own model call


def _phase(
    stub: pb_grpc.ContextServiceStub, agents: int, turns: int, percent: int, seed: int
) -> tuple[list[int], int, list[str], float]:
    sids = []
    for i in range(agents):
        sid = f"bg-{percent}-{i}-{uuid.uuid4().hex[:6]}"
        stub.CreateSession(
            pb.CreateSessionRequest(session_id=sid, session=ses.Session(policy=_policy(percent)))
        )
        sids.append(sid)
    samples: list[int] = []
    over_hard: list[int] = []
    threads = [
        threading.Thread(target=_agent, args=(stub, sid, turns, seed + i, samples, over_hard))
        for i, sid in enumerate(sids)
    ]
    t0 = time.monotonic()
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    return samples, len(over_hard), sids, time.monotonic() - t0


def _background_compactions(stub: pb_grpc.ContextServiceStub, sids: list[str]) -> int:
    done = 0
    for sid in sids:
        page = stub.ListCompactions(pb.ListCompactionsRequest(session_id=sid, page_size=100))
        done += sum(c.trigger == pb.COMPACTION_TRIGGER_BACKGROUND for c in page.compactions)
    return done


def measure_background(
    backend: str, url: str, log_dir: Path, agents: int, turns: int, seed: int, rounds: int = 2
) -> list[Result]:
    """Both phases against one server on ``url`` (a migrated database)."""
    os.environ[KEY_ENV] = "sk-bench"
    with FakeProvider("openai") as fake:
        fake.delay = SUMMARIZER_DELAY
        fake.reply_text = "## Goal\nbenchmark\n\n## Progress\nmany turns"
        server = ServerProcess(
            url,
            log_dir,
            extra_args=[
                "--summarizer", "openai",
                "--summarizer-base-url", fake.base_url,
                "--summarizer-model", "bench-summarizer",
                "--summarizer-api-key-env", KEY_ENV,
                "--background-compactions", str(agents),
            ],
        )  # fmt: skip
        server.start()
        try:
            with grpc.insecure_channel(server.target) as ch:
                stub = pb_grpc.ContextServiceStub(ch)
                _phase(stub, 2, 10, 0, seed)  # warm-up: tokenizer, connections
                base: list[int] = []
                with_bg: list[int] = []
                base_hard = with_hard = compactions = 0
                base_wall = with_wall = 0.0
                for r in range(rounds):
                    log(f"{backend}: background compaction: round {r + 1}, without")
                    samples, hard, _, wall = _phase(stub, agents, turns, 0, seed)
                    base += samples
                    base_hard += hard
                    base_wall += wall
                    log(f"{backend}: background compaction: round {r + 1}, with (2 s summariser)")
                    samples, hard, sids, wall = _phase(stub, agents, turns, SOFT_PERCENT, seed)
                    with_bg += samples
                    with_hard += hard
                    with_wall += wall
                    compactions += _background_compactions(stub, sids)
                calls = len(fake.requests)
        finally:
            server.stop()
    note = f"{rounds} x {agents} agents x {turns} turns, summariser {SUMMARIZER_DELAY:.0f} s"
    return [
        summarize(
            backend,
            "build_model_input_no_background",
            base,
            note=note,
            extra={"over_hard_threshold": base_hard, "wall_s": round(base_wall, 1)},
        ),
        summarize(
            backend,
            "build_model_input_background",
            with_bg,
            note=f"{note}, {compactions} background compactions",
            extra={
                "background_compactions": compactions,
                "summarizer_requests": calls,
                "over_hard_threshold": with_hard,
                "wall_s": round(with_wall, 1),
            },
        ),
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--agents", type=int, default=16)
    parser.add_argument("--turns", type=int, default=120)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", default="")
    args = parser.parse_args(argv)
    tmp = Path(tempfile.mkdtemp(prefix="ctxw-bench-bg-"))
    url = f"sqlite:///{tmp / 'bench.db'}"
    migrate_database(url)
    results = measure_background(
        "sqlite", url, tmp, args.agents, args.turns, args.seed, args.rounds
    )
    doc = [
        {
            "metric": r.metric,
            "n": r.n,
            "median_ms": round(r.median_ms or 0, 3),
            "p99_ms": round(r.p99_ms or 0, 3),
            "max_ms": round(r.max_ms or 0, 3),
            **r.extra,
        }
        for r in results
    ]
    base, with_bg = doc
    ratio = with_bg["p99_ms"] / max(base["p99_ms"], 1e-9)
    print(json.dumps({"results": doc, "p99_ratio": round(ratio, 2)}, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(doc, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
