"""Compaction and calibration measurements.

    .venv/bin/python -m bench.compaction [--messages 10000] [--json out.json]

1. PrepareCompaction latency on a long session, over loopback gRPC (median of 7).
2. Token reduction of one Compact (extractive summariser, default policy) on a
   realistic coding-agent transcript.
3. Token-estimate error before and after calibration: the heuristic estimate of
   a Claude session versus "reported" usage computed with a real BPE tokenizer
   (o200k_base) of the same text, turn by turn (in-process, core only).
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import grpc
from tests.support.server import ServerProcess, migrate_database

from bench.workload import Conversation
from ctxwarden.api.convert import message_from_pb
from ctxwarden.core.context import SessionContext
from ctxwarden.core.messages import Role, Usage
from ctxwarden.core.session import Session
from ctxwarden.core.tokens import HeuristicTokenizer, message_text
from ctxwarden.tokenizers import load_tokenizer
from ctxwarden.v1 import context_service_pb2 as pb
from ctxwarden.v1 import context_service_pb2_grpc as pb_grpc
from ctxwarden.v1 import session_pb2 as ses


def _ms(ns: int) -> float:
    return ns / 1e6


def compaction_bench(n: int) -> dict[str, object]:
    tmp = Path(tempfile.mkdtemp(prefix="ctxw-bench-"))
    url = f"sqlite:///{tmp / 'bench.db'}"
    migrate_database(url)
    server = ServerProcess(url, log_dir=tmp, extra_args=["--summarizer", "extractive"])
    server.start()
    try:
        with grpc.insecure_channel(
            server.target, options=[("grpc.max_receive_message_length", 256 << 20)]
        ) as ch:
            stub = pb_grpc.ContextServiceStub(ch)
            sid = "bench-compaction"
            stub.CreateSession(
                pb.CreateSessionRequest(
                    session_id=sid,
                    session=ses.Session(model="claude-sonnet-4-5", system_prompt="coding agent"),
                )
            )
            history = Conversation(7).agent_history(n)
            for i in range(0, n, 500):
                stub.AppendMessages(
                    pb.AppendMessagesRequest(session_id=sid, messages=history[i : i + 500]),
                    timeout=120,
                )
            samples = []
            for _ in range(7):
                t = time.perf_counter_ns()
                plan = stub.PrepareCompaction(
                    pb.PrepareCompactionRequest(session_id=sid), timeout=120
                )
                samples.append(time.perf_counter_ns() - t)
            before = stub.BuildModelInput(pb.BuildModelInputRequest(session_id=sid))
            t = time.perf_counter_ns()
            done = stub.Compact(pb.CompactRequest(session_id=sid), timeout=300)
            compact_ns = time.perf_counter_ns() - t
            after = stub.BuildModelInput(pb.BuildModelInputRequest(session_id=sid))
            return {
                "messages": n,
                "prepare_median_ms": round(_ms(int(statistics.median(samples))), 1),
                "prepare_min_ms": round(_ms(min(samples)), 1),
                "plan_prompt_chars": len(plan.history_prompt.user),
                "compact_ms": round(_ms(compact_ns), 1),
                "tokens_before": before.tokens.total_tokens,
                "tokens_after": after.tokens.total_tokens,
                "reduction": round(1 - after.tokens.total_tokens / before.tokens.total_tokens, 4),
                "first_kept_seq": done.first_kept_seq,
                "kept_messages": len(after.messages) - 1,
            }
    finally:
        server.stop()


def calibration_bench(turns: int = 40) -> dict[str, object]:
    """Heuristic estimates vs a real tokenizer's count, before and after calibration."""
    real = load_tokenizer("tiktoken:o200k_base")
    history = Conversation(11).agent_history(turns * 8)
    ctx = SessionContext(
        Session(session_id="cal", model="claude-sonnet-4-5"), None, (), HeuristicTokenizer()
    )
    ids = (str(i) for i in itertools.count())
    true_total = 0
    raw_errors: list[float] = []
    calibrated_errors: list[float] = []
    for pbm in history:
        msg = message_from_pb(pbm, "m")
        if msg.role is Role.ASSISTANT and msg.usage is not None:
            # The model call: what we would estimate now vs what the provider bills.
            view = ctx.model_input()
            t = view.tokens
            raw = t.system_tokens + t.tools_tokens + t.summary_tokens + t.message_tokens
            raw_errors.append(abs(raw - true_total) / true_total)
            calibrated_errors.append(abs(t.total_tokens - true_total) / true_total)
            out = real.count(message_text(msg))
            msg = type(msg)(
                **{
                    **{f: getattr(msg, f) for f in msg.__dataclass_fields__},
                    "usage": Usage(input_tokens=true_total, output_tokens=out),
                }
            )
        plan = ctx.plan_append([msg], now_us=1, new_message_id=ids)
        ctx.apply_append(plan)
        true_total += real.count(message_text(msg)) + 3  # per-message framing
    tail = calibrated_errors[5:]
    return {
        "model_calls": len(raw_errors),
        "heuristic_error_median": round(statistics.median(raw_errors), 4),
        "calibrated_error_median_after_5_calls": round(statistics.median(tail), 4),
        "calibrated_error_max_after_5_calls": round(max(tail), 4),
        "learned_ratio": ctx.calibration.ratio,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--messages", type=int, default=10_000)
    parser.add_argument("--json", default="")
    args = parser.parse_args(argv)
    results = {
        "compaction": compaction_bench(args.messages),
        "calibration": calibration_bench(),
    }
    for section, values in results.items():
        print(f"[{section}]")
        for k, v in values.items():
            print(f"  {k:42} {v}")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
