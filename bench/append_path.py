"""ctxwarden's own work per streamed message, in process, and what the CPU cache
does to token counting.

    .venv/bin/python -m bench.append_path [--runs 256] [--run 10] [--texts 512]
                                           [--json PATH]

The server's work for a merged run of ``--run`` one-message requests (the run
length ``bench.stream_cpu`` sees on average), stage by stage, without gRPC or a
database: decoding the requests (protobuf, then the domain messages), planning
(validation is the caller's; seqs, IDs, token counts, the session after),
installing in the hot copy (the compressed text it keeps) and encoding the
answers. The workload's ~800-byte alternating turns, tiktoken o200k (as the
session's gpt-4.1 model picks), median of five passes, microseconds per message.

Then token counting alone: warm (one message after another) and after the CPU
caches were flushed (a 32 MiB sweep before each message, as when the client and
the database ran on the core between two requests). The gap between the two is
why counting costs several times more in the server than here.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

from bench.workload import Conversation
from ctxwarden.api.convert import message_from_pb
from ctxwarden.api.convert_requests import append_response
from ctxwarden.core.append import planned_run
from ctxwarden.core.context import SessionContext
from ctxwarden.core.session import Session
from ctxwarden.service.results import AppendResult
from ctxwarden.tokenizers import load_tokenizer
from ctxwarden.util import ids
from ctxwarden.v1 import context_service_pb2 as pb

TOKENIZER = "tiktoken:o200k_base"
SWEEP_BYTES = 32 * 1024 * 1024
STAGES = ("decode", "plan", "install", "answer")


def _requests(n: int) -> list[bytes]:
    return [
        pb.AppendMessagesRequest(session_id="s", messages=[m]).SerializeToString()
        for m in Conversation(21).alternating(n)
    ]


def stages_per_message(raw: list[bytes], runs: int, run: int) -> dict[str, float]:
    """One pass: ``runs`` runs of ``run`` requests on a fresh session."""
    ctx = SessionContext(Session(session_id="s"), None, (), load_tokenizer(TOKENIZER))
    spent = dict.fromkeys(STAGES, 0.0)
    at = 0
    for _ in range(runs):
        t0 = time.perf_counter()
        batch = [pb.AppendMessagesRequest.FromString(raw[(at + k) % len(raw)]) for k in range(run)]
        decoded = [[message_from_pb(m, "messages[0]") for m in r.messages] for r in batch]
        t1 = time.perf_counter()
        plans = planned_run(ctx, decoded, ids.now_us(), iter(ids.new_id, None), {})
        t2 = time.perf_counter()
        for plan in plans:
            ctx.apply_append(plan)
        t3 = time.perf_counter()
        for p in plans:
            append_response(AppendResult(p.messages, p.last_seq, p.context_tokens), 0)
        t4 = time.perf_counter()
        for stage, seconds in zip(STAGES, (t1 - t0, t2 - t1, t3 - t2, t4 - t3), strict=True):
            spent[stage] += seconds
        at += run
    return {stage: s / (runs * run) * 1e6 for stage, s in spent.items()}


def counting(texts: list[str], cold: bool) -> float:
    """Microseconds per count, warm or after a cache flush before each."""
    tokenizer = load_tokenizer(TOKENIZER)
    junk = bytearray(SWEEP_BYTES)
    spent = 0.0
    for text in texts:
        if cold:
            junk[::64] = b"\x01" * (SWEEP_BYTES // 64)  # one write per cache line
        t = time.perf_counter()
        tokenizer.count(text)
        spent += time.perf_counter() - t
    return spent / len(texts) * 1e6


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=256)
    parser.add_argument("--run", type=int, default=10)
    parser.add_argument("--texts", type=int, default=512, help="messages token counting times")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    raw = _requests(4096)
    passes = [stages_per_message(raw, args.runs, args.run) for _ in range(5)]
    result: dict[str, float] = {s: statistics.median(p[s] for p in passes) for s in STAGES}
    result["total"] = statistics.median(sum(p.values()) for p in passes)
    texts = [m.content[0].text.text for m in Conversation(21).alternating(args.texts)]
    result["count_warm"] = statistics.median(counting(texts, False) for _ in range(3))
    result["count_cold"] = statistics.median(counting(texts, True) for _ in range(3))
    for name, us in result.items():
        print(f"{name:12s} {us:8.1f} us per message")
    if args.json is not None:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
