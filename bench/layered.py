"""Layered compaction: prompt-cache hit ratio and summariser calls of three policies.

    .venv/bin/python -m bench.layered [--turns 60] [--backend sqlite] [--json out.json]

One deterministic coding session (bench.workload: reads, greps, test runs and
edits, tool outputs of 0.2-20 KB) is played through a real ``ctxwarden serve``
(extractive summariser) once per policy. Before every assistant message the
agent calls ``BuildModelInput(auto_compact=true, format=OPENAI_CHAT)``, as it
would before each model call. For each input after the first, the share of its
bytes (tools, then the rendered messages) equal to the previous input's prefix
is the part a provider's prompt cache could serve; the table reports its mean,
and the summariser calls (non-clearing checkpoints) and clearings.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

import grpc
from tests.support.server import (
    ServerProcess,
    drop_mysql_database,
    make_mysql_database,
    migrate_database,
)

from bench.common import CHANNEL_OPTIONS, DEFAULT_MYSQL_URL
from bench.workload import SYSTEM_PROMPT, TOOLS, Conversation
from ctxwarden.v1 import context_service_pb2 as pb
from ctxwarden.v1 import context_service_pb2_grpc as pb_grpc
from ctxwarden.v1 import message_pb2 as m
from ctxwarden.v1 import session_pb2 as ses


def policies(window: int = 60_000) -> dict[str, ses.ContextPolicy]:
    """The three policies compared, for a context window of ``window`` tokens."""
    base = ses.ContextPolicy(
        context_window=window,
        reserve_tokens=window // 8,
        keep_recent_tokens=window // 4,
        tokenizer="heuristic",
    )
    at_least = window // 4
    static, layered = ses.ContextPolicy(), ses.ContextPolicy()
    static.CopyFrom(base)
    static.keep_tool_results = 3
    layered.CopyFrom(base)
    layered.clear_tool_results_at_least = at_least
    layered.clear_tool_results_keep = 3
    return {
        "no layering": base,
        "static keep_tool_results=3": static,
        f"layered (clear >= {at_least:,}, keep 3)": layered,
    }


@dataclass
class Outcome:
    policy: str
    inputs: int
    cache_hit_ratio: float
    """Mean share of an input's bytes equal to the previous input's prefix."""
    summariser_calls: int
    clearings: int
    mean_input_tokens: float


def _common_prefix(a: bytes, b: bytes) -> int:
    n = min(len(a), len(b))
    lo, hi = 0, n  # binary search on equal prefixes: fast on long inputs
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


def prompt_bytes(rendered_json: str) -> bytes:
    """What a provider caches by prefix: the tools, then the messages in order."""
    doc = json.loads(rendered_json)
    parts = [json.dumps(doc.get("tools", []), sort_keys=True)]
    parts += [json.dumps(item, sort_keys=True) for item in doc["messages"]]
    return "\n".join(parts).encode()


def _groups(turns: int, seed: int) -> Iterator[list[m.Message]]:
    """The session's messages in append groups, without usage or images (so the
    token counts, and thus every decision, depend on the text alone)."""
    conv = Conversation(seed)
    for _ in range(turns):
        for group in conv._turn_messages():
            for message in group:
                message.ClearField("usage")
                kept = [b for b in message.content if not b.HasField("image")]
                del message.content[:]
                message.content.extend(kept)
            yield group


def simulate(
    stub: pb_grpc.ContextServiceStub, name: str, policy: ses.ContextPolicy, turns: int, seed: int
) -> Outcome:
    sid = f"layered-{uuid.uuid4().hex[:12]}"
    stub.CreateSession(
        pb.CreateSessionRequest(
            session_id=sid,
            session=ses.Session(system_prompt=SYSTEM_PROMPT, tools=TOOLS, policy=policy),
        )
    )
    previous = b""
    shares: list[float] = []
    tokens: list[int] = []
    for group in _groups(turns, seed):
        if group[0].role == m.ROLE_ASSISTANT:  # the model is called for this message
            mi = stub.BuildModelInput(
                pb.BuildModelInputRequest(
                    session_id=sid, auto_compact=True, format=pb.MODEL_INPUT_FORMAT_OPENAI_CHAT
                )
            )
            current = prompt_bytes(mi.rendered_json)
            if previous:
                shares.append(_common_prefix(previous, current) / len(current))
            previous = current
            tokens.append(mi.tokens.total_tokens)
        stub.AppendMessages(pb.AppendMessagesRequest(session_id=sid, messages=group))
    listed = stub.ListCompactions(pb.ListCompactionsRequest(session_id=sid, page_size=1000))
    clearings = sum(1 for c in listed.compactions if c.clearing_only)
    return Outcome(
        policy=name,
        inputs=len(tokens),
        cache_hit_ratio=sum(shares) / len(shares),
        summariser_calls=len(listed.compactions) - clearings,
        clearings=clearings,
        mean_input_tokens=sum(tokens) / len(tokens),
    )


def run_all(
    stub: pb_grpc.ContextServiceStub, turns: int, seed: int = 17, window: int = 60_000
) -> list[Outcome]:
    return [simulate(stub, name, p, turns, seed) for name, p in policies(window).items()]


@contextmanager
def serving(backend: str) -> Iterator[pb_grpc.ContextServiceStub]:
    tmp = Path(tempfile.mkdtemp(prefix="ctxw-layered-"))
    name = ""
    if backend == "sqlite":
        url = f"sqlite:///{tmp / 'bench.db'}"
    else:
        name = f"ctxw_layered_{tmp.name[-6:].lower()}"
        url = make_mysql_database(DEFAULT_MYSQL_URL, name)
    migrate_database(url)
    server = ServerProcess(url, log_dir=tmp, extra_args=["--summarizer", "extractive"])
    server.start()
    try:
        with grpc.insecure_channel(server.target, options=CHANNEL_OPTIONS) as ch:
            yield pb_grpc.ContextServiceStub(ch)
    finally:
        server.stop()
        if name:
            drop_mysql_database(DEFAULT_MYSQL_URL, name)


def table(outcomes: list[Outcome]) -> str:
    rows = [
        "| Policy | Inputs | Prompt-cache hit ratio | Summariser calls | Clearings "
        "| Mean input tokens |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for o in outcomes:
        rows.append(
            f"| {o.policy} | {o.inputs} | {o.cache_hit_ratio:.1%} | {o.summariser_calls} "
            f"| {o.clearings} | {o.mean_input_tokens:,.0f} |"
        )
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--turns", type=int, default=60)
    ap.add_argument("--seed", type=int, default=17)
    ap.add_argument("--window", type=int, default=60_000, help="context window (tokens)")
    ap.add_argument("--backend", choices=("sqlite", "mysql"), default="sqlite")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    with serving(args.backend) as stub:
        outcomes = run_all(stub, args.turns, args.seed, args.window)
    print(table(outcomes))
    if args.json:
        args.json.write_text(json.dumps([asdict(o) for o in outcomes], indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
