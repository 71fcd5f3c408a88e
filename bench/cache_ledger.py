"""The cache ledger, predicted against observed: a replayed agent loop against a
fake provider that reports ``cache_read`` as a real provider computes it.

    .venv/bin/python -m bench.cache_ledger [--turns 60] [--json out.json]

One deterministic coding session (bench.workload, as bench.layered plays it) runs
through a real ``ctxwarden serve`` (extractive summariser, layered clearing, a
window small enough to compact). Before each assistant message the agent calls
``BuildModelInput(auto_compact, format=ANTHROPIC_MESSAGES, report_cache_prefix)``
and sends the rendered input to the fake provider, which keeps every prefix it
has seen at block boundaries (tools, system blocks, then each message's content
blocks) and reports as ``cache_read`` the tokens of the longest one this request
starts with (whole blocks, no expiry); the rest is uncached input. The answer
is appended with that usage, so the ledger pairs each prediction with what the
provider observed. Every 15 turns a failed call is rolled back.

Tokens: ctxwarden counts with its heuristic tokenizer (framing included); the
fake provider with ceil(characters / 4) per block. Compare shares, not tokens.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import sys
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import grpc
from tests.support.server import ServerProcess, migrate_database

from bench.common import CHANNEL_OPTIONS
from bench.layered import _groups
from bench.workload import SYSTEM_PROMPT, TOOLS
from ctxwarden.v1 import context_service_pb2 as pb
from ctxwarden.v1 import context_service_pb2_grpc as pb_grpc
from ctxwarden.v1 import message_pb2 as m
from ctxwarden.v1 import session_pb2 as ses

ANTHROPIC = pb.MODEL_INPUT_FORMAT_ANTHROPIC_MESSAGES


def _block_text(block: Any) -> str:
    if not isinstance(block, dict):
        return str(block)
    for key in ("text", "thinking"):
        if isinstance(block.get(key), str):
            return str(block[key])
    if block.get("type") == "tool_use":
        return str(block.get("name", "")) + json.dumps(block.get("input", {}))
    if block.get("type") == "tool_result":
        content = block.get("content", "")
        return content if isinstance(content, str) else "".join(map(_block_text, content))
    return json.dumps(block, sort_keys=True)


def _identity(block: Any) -> str:
    """What the cache keys a block by: its content, not where breakpoints are
    (``cache_control`` marks the last block and moves on the next call)."""
    if isinstance(block, dict):
        block = {k: v for k, v in block.items() if k != "cache_control"}
    return json.dumps(block, sort_keys=True)


def blocks(rendered_json: str) -> list[tuple[str, int]]:
    """(identity, tokens) of each cacheable block, in the provider's cache order."""
    doc = json.loads(rendered_json)
    out: list[tuple[str, int]] = []
    for tool in doc.get("tools", []):
        out.append((_identity(tool), math.ceil(len(_block_text(tool)) / 4)))
    system = doc.get("system", [])
    for part in [system] if isinstance(system, str) else system:
        text = _block_text(part)
        out.append(("system:" + _identity(part), math.ceil(len(text) / 4)))
    for message in doc["messages"]:
        content = message["content"]
        for part in [content] if isinstance(content, str) else content:
            identity = message["role"] + ":" + _identity(part)
            out.append((identity, max(1, math.ceil(len(_block_text(part)) / 4))))
    return out


@dataclass
class FakeProvider:
    """A prompt cache keyed by the prefixes of every request seen, at block boundaries."""

    seen: dict[bytes, int] = field(default_factory=dict)

    def usage(self, rendered_json: str) -> m.Usage:
        h = hashlib.sha256()
        tokens = read = 0
        boundaries: list[tuple[bytes, int]] = []
        for identity, n in blocks(rendered_json):
            h.update(identity.encode() + b"\x00")
            tokens += n
            key = h.digest()
            if key in self.seen and read == tokens - n:  # still inside a cached prefix
                read = tokens
            boundaries.append((key, tokens))
        self.seen.update(boundaries)
        return m.Usage(input_tokens=tokens - read, cache_read_tokens=read, output_tokens=50)


@dataclass
class Call:
    predicted: int
    input_tokens: int
    observed: int
    prompt: int
    reason: str


@dataclass
class Outcome:
    calls: list[Call]
    ledger: dict[str, Any]

    def summary(self) -> dict[str, Any]:
        c = self.ledger
        pred_share = [k.predicted / k.input_tokens for k in self.calls if k.input_tokens]
        obs_share = [k.observed / k.prompt for k in self.calls if k.prompt]
        gaps = [abs(a - b) for a, b in zip(pred_share, obs_share, strict=True)]
        broke = sum(1 for a, b in zip(pred_share, obs_share, strict=True) if (a < 0.5) != (b < 0.5))
        return {
            "calls": len(self.calls),
            "predicted_share": sum(k.predicted for k in self.calls)
            / sum(k.input_tokens for k in self.calls),
            "observed_share": sum(k.observed for k in self.calls)
            / sum(k.prompt for k in self.calls),
            "mean_abs_share_gap": sum(gaps) / len(gaps),
            "calls_disagreeing_on_a_break": broke,
            "ledger": c,
        }


def play(stub: pb_grpc.ContextServiceStub, turns: int, seed: int) -> Outcome:
    sid = f"cache-{uuid.uuid4().hex[:12]}"
    window = 30_000
    policy = ses.ContextPolicy(
        context_window=window,
        reserve_tokens=window // 8,
        keep_recent_tokens=window // 4,
        tokenizer="heuristic",
        clear_tool_results_at_least=window // 4,
        clear_tool_results_keep=3,
    )
    session = ses.Session(
        system_prompt=SYSTEM_PROMPT, tools=TOOLS, policy=policy, model="claude-sonnet-4-5"
    )
    stub.CreateSession(pb.CreateSessionRequest(session_id=sid, session=session))
    provider = FakeProvider()
    calls: list[Call] = []
    answered = 0
    for group in _groups(turns, seed):
        if group[0].role == m.ROLE_ASSISTANT:
            answered += 1
            if answered % 15 == 0:  # a failed call, rolled back before the retry
                failed = m.Message(role=m.ROLE_ASSISTANT, stop_reason=m.STOP_REASON_ERROR)
                failed.error_message = "overloaded"
                stub.AppendMessages(pb.AppendMessagesRequest(session_id=sid, messages=[failed]))
                stub.RollbackTurn(pb.RollbackTurnRequest(session_id=sid))
            mi = stub.BuildModelInput(
                pb.BuildModelInputRequest(
                    session_id=sid, auto_compact=True, format=ANTHROPIC, report_cache_prefix=True
                )
            )
            usage = provider.usage(mi.rendered_json)
            group[0].usage.CopyFrom(usage)
            p = mi.cache_prefix
            calls.append(
                Call(
                    p.shared_tokens,
                    p.input_tokens,
                    usage.cache_read_tokens,
                    usage.input_tokens + usage.cache_read_tokens,
                    pb.CacheBreakReason.Name(p.break_reason).removeprefix("CACHE_BREAK_REASON_"),
                )
            )
        stub.AppendMessages(pb.AppendMessagesRequest(session_id=sid, messages=group))
    report = stub.GetUsage(pb.GetUsageRequest(session_id=sid))
    ledger = {
        "builds": report.cache.builds,
        "input_tokens": report.cache.input_tokens,
        "predicted_cached_tokens": report.cache.predicted_cached_tokens,
        "paired_calls": report.cache.paired_calls,
        "paired_predicted_cached_tokens": report.cache.paired_predicted_cached_tokens,
        "paired_observed_cache_read_tokens": report.cache.paired_observed_cache_read_tokens,
        "paired_observed_prompt_tokens": report.cache.paired_observed_prompt_tokens,
        "breaks": {
            pb.CacheBreakReason.Name(b.reason).removeprefix("CACHE_BREAK_REASON_").lower(): [
                b.count,
                b.tokens_lost,
            ]
            for b in report.cache.breaks
        },
    }
    return Outcome(calls, ledger)


@contextmanager
def serving() -> Iterator[pb_grpc.ContextServiceStub]:
    tmp = Path(tempfile.mkdtemp(prefix="ctxw-cache-"))
    url = f"sqlite:///{tmp / 'bench.db'}"
    migrate_database(url)
    server = ServerProcess(url, log_dir=tmp, extra_args=["--summarizer", "extractive"])
    server.start()
    try:
        with grpc.insecure_channel(server.target, options=CHANNEL_OPTIONS) as ch:
            yield pb_grpc.ContextServiceStub(ch)
    finally:
        server.stop()


def render(summary: dict[str, Any]) -> str:
    c = summary["ledger"]
    lines = [
        "| Figure | Predicted (ctxwarden) | Observed (fake provider) |",
        "| --- | ---: | ---: |",
        f"| Calls | {c['paired_calls']} of {c['builds']} builds | {summary['calls']} |",
        f"| Cached tokens, paired calls | {c['paired_predicted_cached_tokens']:,} "
        f"| {c['paired_observed_cache_read_tokens']:,} |",
        f"| Prompt tokens | {c['input_tokens']:,} | {c['paired_observed_prompt_tokens']:,} |",
        f"| Cached share | {summary['predicted_share']:.1%} | {summary['observed_share']:.1%} |",
        "",
        f"Mean per-call gap between the two shares: {summary['mean_abs_share_gap']:.1%}; "
        f"calls where one says the cache broke (<50%) and the other not: "
        f"{summary['calls_disagreeing_on_a_break']}.",
        "Breaks (times, tokens lost): "
        + ", ".join(f"{k} {v[0]} ({v[1]:,})" for k, v in c["breaks"].items()),
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--turns", type=int, default=60)
    ap.add_argument("--seed", type=int, default=17)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    with serving() as stub:
        outcome = play(stub, args.turns, args.seed)
    summary = outcome.summary()
    print(render(summary))
    if args.json:
        data = {**summary, "per_call": [asdict(c) for c in outcome.calls]}
        args.json.write_text(json.dumps(data, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
