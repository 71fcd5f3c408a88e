"""Page load times of the web console on a 100,000-message session.

One server with ``--console-listen`` and the extractive summariser; one session of
coding-agent history (bench/workload.py) appended through the API, compacted at the
middle and at the end, with a failed turn rolled back in between. Each page is fetched
``reps`` times over HTTP (the whole response read; the first fetch of each is the
cold one, after the server restored the session) and timed by the client:

* the session page as it opens (the newest timeline page, the effective context, the
  checkpoints, the token bar and the chart over all 100,000 seqs),
* a timeline page in the middle (``?at=``) and the first one,
* a replay (``?as_of=`` just after the first compaction) and the same point rendered
  for OpenAI Chat,
* the session list and the byte-range viewer of a tool output.

Run alone with ``python -m bench.console [--messages N] [--backend sqlite|mysql]``;
``bench.run`` runs it on every backend.
"""

from __future__ import annotations

import argparse
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import grpc
import httpx
from tests.support.server import ServerProcess

from bench.common import (
    CHANNEL_OPTIONS,
    TIMEOUT,
    Result,
    append_batched,
    backend_database,
    create_session,
    log,
    summarize,
)
from bench.targets import evaluate, render
from bench.workload import Conversation
from ctxwarden.v1 import context_service_pb2 as pb
from ctxwarden.v1 import context_service_pb2_grpc as pb_grpc
from ctxwarden.v1 import message_pb2 as m

MESSAGES = 100_000


class ConsoleServer(ServerProcess):
    def __init__(self, url: str, log_dir: Path) -> None:
        super().__init__(
            url, log_dir, ["--console-listen", "127.0.0.1:0", "--summarizer", "extractive"]
        )
        self.console = ""

    def start(self, port: int | None = None) -> None:
        super().start(port)
        assert self.proc is not None and self.proc.stdout is not None
        stdout = self.proc.stdout
        lines: list[str] = []
        reader = threading.Thread(target=lambda: lines.append(stdout.readline()), daemon=True)
        reader.start()
        reader.join(timeout=10)
        if not lines or not lines[0].startswith("ctxwarden console on "):
            raise RuntimeError(f"no console address printed: {lines!r}")
        self.console = lines[0].split()[-1]


def _build(stub: pb_grpc.ContextServiceStub, messages: int, seed: int) -> tuple[str, int]:
    """The session, and the seq of a tool result in it."""
    sid = create_session(stub, "console")
    history = Conversation(seed * 104_729 + messages).agent_history(messages)
    half = len(history) // 2
    append_batched(stub, sid, history[:half])
    stub.Compact(pb.CompactRequest(session_id=sid), timeout=600)
    failed = m.Message(
        role=m.ROLE_ASSISTANT, stop_reason=m.STOP_REASON_ERROR, error_message="overloaded"
    )
    stub.AppendMessages(
        pb.AppendMessagesRequest(session_id=sid, messages=[failed]), timeout=TIMEOUT
    )
    stub.RollbackTurn(pb.RollbackTurnRequest(session_id=sid), timeout=TIMEOUT)
    rest = history[half:]
    for start in range(0, len(rest), 1000):
        stub.AppendMessages(
            pb.AppendMessagesRequest(session_id=sid, messages=rest[start : start + 1000]),
            timeout=TIMEOUT,
        )
    stub.Compact(pb.CompactRequest(session_id=sid), timeout=600)
    tool_seq = next(i + 1 for i, x in enumerate(history) if x.role == m.ROLE_TOOL_RESULT)
    return sid, tool_seq


def measure(
    backend: str, url: str, log_dir: Path, messages: int, reps: int, seed: int
) -> list[Result]:
    server = ConsoleServer(url, log_dir)
    server.start()
    try:
        with grpc.insecure_channel(server.target, options=CHANNEL_OPTIONS) as channel:
            stub = pb_grpc.ContextServiceStub(channel)
            log(f"{backend}: console: building a {messages:,}-message session")
            t0 = time.perf_counter()
            sid, tool_seq = _build(stub, messages, seed)
            log(f"{backend}: console: built in {time.perf_counter() - t0:.0f} s")
        server.restart()  # the first page load restores the session, as after a restart
        middle = messages // 2
        replay = middle + 1000  # after the first compaction: the replay reads from it
        pages = [
            ("console_session_page", f"/sessions/{sid}"),
            ("console_timeline_middle", f"/sessions/{sid}?at={middle}"),
            ("console_timeline_first", f"/sessions/{sid}?after=0"),
            ("console_replay_middle", f"/sessions/{sid}?as_of={replay}"),
            ("console_replay_rendered", f"/sessions/{sid}?as_of={replay}&format=openai-chat"),
            ("console_sessions_list", "/sessions"),
            ("console_tool_output", f"/sessions/{sid}/tool-output/{tool_seq}"),
        ]
        results = []
        with httpx.Client(base_url=server.console, timeout=TIMEOUT) as http:
            for metric, path in pages:
                samples, size = [], 0
                for _ in range(reps):
                    t0 = time.perf_counter_ns()
                    r = http.get(path)
                    samples.append(time.perf_counter_ns() - t0)
                    r.raise_for_status()
                    size = len(r.content)
                first = samples[0]
                results.append(
                    summarize(
                        backend,
                        metric,
                        samples[1:] or samples,
                        note=f"{messages:,} msgs; first load {first / 1e6:.0f} ms; {size:,} B",
                        extra={"messages": messages, "first_ms": first / 1e6, "bytes": size},
                    )
                )
                log(
                    f"{backend}: {metric}: first {first / 1e6:.0f} ms, then "
                    f"{results[-1].median_ms:.0f} ms median"
                )
        return results
    finally:
        server.stop()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.console", description=__doc__)
    parser.add_argument("--messages", type=int, default=MESSAGES)
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--backend", default="sqlite", choices=["sqlite", "mysql"])
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="ctxw-bench-console-") as tmp:
        workdir = Path(tmp)
        with backend_database(args.backend, workdir) as (url, _):
            results = measure(args.backend, url, workdir, args.messages, args.reps, args.seed)
    for r in results:
        print(f"{r.metric:28} median {r.median_ms:8.1f} ms  p99 {r.p99_ms:8.1f} ms  {r.note}")
    verdicts = [v for v in evaluate(results, [args.backend]) if v.target.startswith("console")]
    print(render(verdicts))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
