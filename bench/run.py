"""Benchmark harness: real ``ctxwarden serve`` processes, measured over loopback gRPC.

Run ``.venv/bin/python -m bench.run [--backends sqlite,mysql] [--quick] [--json out.json]``.
See bench/README.md for what every number means.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import grpc
from sqlalchemy.engine import make_url
from tests.support.server import ServerProcess

from bench.background import measure_background
from bench.baselines import measure as measure_baselines
from bench.common import (
    BACKENDS,
    CHANNEL_OPTIONS,
    DEFAULT_MYSQL_URL,
    MYSQL_ENV,
    TIMEOUT,
    Result,
    append_batched,
    backend_database,
    create_session,
    log,
    one_message_requests,
    run_meta,
    stream_appends,
    summarize,
    timed,
)
from bench.concurrency import run_agents
from bench.console import measure as console_pages
from bench.memory import measure_memory
from bench.scale import HistoryScaling
from bench.targets import evaluate
from bench.targets import render as render_targets
from bench.tokenizers import tokenizer_throughput
from bench.workload import Conversation
from ctxwarden.v1 import context_service_pb2 as pb
from ctxwarden.v1 import context_service_pb2_grpc as pb_grpc
from ctxwarden.v1 import message_pb2 as m

PIPELINE_WINDOW = 16
"""Requests in flight in the pipelined single-stream variant."""


@dataclass(frozen=True)
class Config:
    appends: int
    stream_messages: int
    concurrent_sessions: int
    concurrent_messages: int
    build_session_messages: int
    build_calls: int
    history_sizes: tuple[int, ...]
    history_reps: int
    memory_sessions: int
    memory_messages: int

    @classmethod
    def make(cls, quick: bool) -> Config:
        if quick:
            return cls(200, 200, 100, 20, 1000, 60, (100, 1000, 10_000), 3, 1000, 50)
        return cls(1000, 1000, 100, 100, 1000, 300, (100, 1000, 10_000, 100_000), 7, 10_000, 50)


# -- the benchmark of one backend ------------------------------------------------


class BackendBench:
    def __init__(self, backend: str, server: ServerProcess, cfg: Config, seed: int) -> None:
        self.backend = backend
        self.server = server
        self.cfg = cfg
        self.seed = seed
        self.results: list[Result] = []
        self.channel = grpc.insecure_channel(server.target, options=CHANNEL_OPTIONS)
        self.stub = pb_grpc.ContextServiceStub(self.channel)

    def close(self) -> None:
        self.channel.close()

    def add(self, result: Result) -> None:
        self.results.append(result)
        med = f"{result.median_ms:.3f}" if result.median_ms is not None else "-"
        log(f"{self.backend}: {result.metric}: median {med} ms {result.note}")

    def conversation(self, salt: int) -> Conversation:
        return Conversation(self.seed * 1000 + salt)

    def run(self) -> list[Result]:
        self.warm_up()
        self.unary_appends()
        self.streaming()
        self.concurrent_sessions()
        self.build_model_input()
        self.prepare_compaction()
        return self.results

    def warm_up(self) -> None:
        """Load the tokenizer, open DB connections and gRPC paths; nothing is recorded."""
        log(f"{self.backend}: warm-up")
        conv = self.conversation(0)
        sid = create_session(self.stub, "warmup")
        for msg in conv.alternating(20):
            self.stub.AppendMessages(
                pb.AppendMessagesRequest(session_id=sid, messages=[msg]), timeout=TIMEOUT
            )
        stream_appends(self.stub, one_message_requests(sid, conv.alternating(20)), 1)
        append_batched(self.stub, create_session(self.stub, "warmup"), conv.agent_history(200))
        for _ in range(5):
            self.stub.BuildModelInput(pb.BuildModelInputRequest(session_id=sid), timeout=TIMEOUT)
            self.stub.GetSession(pb.GetSessionRequest(session_id=sid), timeout=TIMEOUT)

    def unary_appends(self) -> None:
        n = self.cfg.appends
        log(f"{self.backend}: unary AppendMessages x{n}")
        sid = create_session(self.stub, "unary")
        requests = one_message_requests(sid, self.conversation(1).alternating(n))
        avg_bytes = sum(r.messages[0].ByteSize() for r in requests) / n
        lat = []
        t0 = time.perf_counter_ns()
        for i, req in enumerate(requests):
            s = time.perf_counter_ns()
            resp = self.stub.AppendMessages(req, timeout=TIMEOUT)
            lat.append(time.perf_counter_ns() - s)
            assert resp.last_seq == i + 1, resp.last_seq
        wall = time.perf_counter_ns() - t0
        self.add(
            summarize(
                self.backend,
                "append_unary",
                lat,
                count=n,
                wall_ns=wall,
                unit="appends/s",
                note=f"1 msg/call, {avg_bytes / 1024:.2f} KB/msg",
                extra={"avg_message_bytes": avg_bytes},
            )
        )

    def streaming(self) -> None:
        n = self.cfg.stream_messages
        for window, metric in ((1, "stream_append"), (PIPELINE_WINDOW, "stream_append_pipelined")):
            log(f"{self.backend}: StreamMessages x{n}, window {window}")
            sid = create_session(self.stub, "stream")
            requests = one_message_requests(sid, self.conversation(2 + window).alternating(n))
            lat, t0, t1 = stream_appends(self.stub, requests, window)
            note = "1 stream, lock-step" if window == 1 else f"1 stream, {window} in flight"
            self.add(
                summarize(
                    self.backend,
                    metric,
                    lat,
                    count=n,
                    wall_ns=t1 - t0,
                    unit="msgs/s",
                    note=note,
                    extra={"window": window},
                )
            )

    def concurrent_sessions(self) -> None:
        k, n = self.cfg.concurrent_sessions, self.cfg.concurrent_messages
        conv = self.conversation(50)
        variants = (
            ("append_concurrent_stream", "stream", 1, 1),
            ("append_concurrent_stream_pipelined", "stream", 4, 1),
            ("append_concurrent_unary", "unary", 1, 1),
            ("append_concurrent_stream_batch10", "stream", 1, 10),
        )
        for metric, mode, window, per_request in variants:
            log(f"{self.backend}: {k} sessions x {n} msgs, {mode}, window {window}")
            sids = [create_session(self.stub, f"conc{i}") for i in range(k)]
            work = []
            for sid in sids:
                msgs = conv.alternating(n)
                work.append(
                    [
                        pb.AppendMessagesRequest(session_id=sid, messages=msgs[i : i + per_request])
                        for i in range(0, n, per_request)
                    ]
                )
            out = run_agents(self.server.target, work, mode, window)
            for sid in sids[:3]:  # every acknowledged message is there
                got = self.stub.GetSession(pb.GetSessionRequest(session_id=sid), timeout=TIMEOUT)
                assert got.last_seq == n, (got.last_seq, n)
            shape = "1 stream each" if mode == "stream" else "unary calls"
            flight = f", {window} in flight" if window > 1 else ", lock-step"
            size = f", {per_request} msgs/request" if per_request > 1 else ", 1 msg/request"
            self.add(
                summarize(
                    self.backend,
                    metric,
                    out.latencies_ns,
                    count=out.messages,
                    wall_ns=out.wall_ns,
                    unit="msgs/s",
                    note=f"{k} sessions x {n} msgs, {shape}{flight}{size}",
                    extra={
                        "sessions": k,
                        "messages_per_session": n,
                        "window": window,
                        "messages_per_request": per_request,
                    },
                )
            )

    def build_model_input(self) -> None:
        size, calls = self.cfg.build_session_messages, self.cfg.build_calls
        log(f"{self.backend}: BuildModelInput/GetSession x{calls} on a {size}-message session")
        sid = create_session(self.stub, "hot")
        history = self.conversation(3).agent_history(size)
        append_batched(self.stub, sid, history)
        bmi_req = pb.BuildModelInputRequest(session_id=sid)
        get_req = pb.GetSessionRequest(session_id=sid)
        for _ in range(5):
            first = self.stub.BuildModelInput(bmi_req, timeout=TIMEOUT)
            self.stub.GetSession(get_req, timeout=TIMEOUT)
        assert len(first.messages) == size, len(first.messages)
        # What a provider-native agent asks for: the rendered JSON alone.
        rendered_req = pb.BuildModelInputRequest(
            session_id=sid,
            format=pb.MODEL_INPUT_FORMAT_ANTHROPIC_MESSAGES,
            view=pb.MODEL_INPUT_VIEW_BASIC,
        )
        rendered_bytes = len(self.stub.BuildModelInput(rendered_req, timeout=TIMEOUT).rendered_json)
        bmi, get, rendered = [], [], []
        for _ in range(calls):
            bmi.append(timed(lambda: self.stub.BuildModelInput(bmi_req, timeout=TIMEOUT))[0])
            get.append(timed(lambda: self.stub.GetSession(get_req, timeout=TIMEOUT))[0])
            rendered.append(
                timed(lambda: self.stub.BuildModelInput(rendered_req, timeout=TIMEOUT))[0]
            )
        info: dict[str, Any] = {
            "session_messages": size,
            "response_bytes": first.ByteSize(),
            "stored_bytes": sum(msg.ByteSize() for msg in history),
            "total_tokens": first.tokens.total_tokens,
            "tool_results": sum(1 for msg in history if msg.role == m.ROLE_TOOL_RESULT),
        }
        raw = first.SerializeToString()
        decode = statistics.median(
            timed(lambda: pb.ModelInput.FromString(raw))[0] for _ in range(20)
        )
        info["client_decode_ms"] = decode / 1e6
        ratio = statistics.median(bmi) / statistics.median(get)
        self.add(
            summarize(
                self.backend,
                "build_model_input_hot",
                bmi,
                count=calls,
                wall_ns=sum(bmi),
                unit="calls/s",
                note=(
                    f"{size} msgs, whole input: {info['response_bytes'] / 1e6:.2f} MB, "
                    f"{info['total_tokens']} tok, client decode {decode / 1e6:.1f} ms; "
                    f"/get_session {ratio:.1f}x"
                ),
                extra={**info, "ratio_to_get_session_median": ratio},
            )
        )
        rendered_ratio = statistics.median(rendered) / statistics.median(bmi)
        self.add(
            summarize(
                self.backend,
                "build_model_input_hot_rendered",
                rendered,
                count=calls,
                wall_ns=sum(rendered),
                unit="calls/s",
                note=(
                    f"{size} msgs, Anthropic Messages JSON ({rendered_bytes / 1e6:.2f} MB), "
                    f"view BASIC; /native whole input {rendered_ratio:.2f}x"
                ),
                extra={"ratio_to_native_median": rendered_ratio, "rendered_bytes": rendered_bytes},
            )
        )
        self.add(
            summarize(
                self.backend,
                "get_session_hot",
                get,
                count=calls,
                wall_ns=sum(get),
                unit="calls/s",
                note="same session, interleaved with build_model_input",
            )
        )
        # The same history in a second session, for the rendered agent loop.
        rendered_sid = create_session(self.stub, "hot-rendered")
        append_batched(self.stub, rendered_sid, history)
        rendered_held = self.stub.BuildModelInput(
            pb.BuildModelInputRequest(session_id=rendered_sid, format=rendered_req.format),
            timeout=TIMEOUT,
        )
        self.incremental_inputs(sid, first, rendered_sid, rendered_held, calls)

    def incremental_inputs(
        self,
        sid: str,
        held: pb.ModelInput,
        rendered_sid: str,
        rendered: pb.ModelInput,
        calls: int,
    ) -> None:
        """The agent loop: append the new message, then ask for the input with the
        resume token of the one held; measured: BuildModelInput alone. The same
        loop with a rendered format runs interleaved on a copy of the session
        (the client splices rendered_json)."""
        conv = self.conversation(9)
        get_req = pb.GetSessionRequest(session_id=sid)
        bmi, get, sizes, rendered_ns, rendered_sizes = [], [], [], [], []
        for msg in conv.alternating(calls):
            for target in (sid, rendered_sid):
                self.stub.AppendMessages(
                    pb.AppendMessagesRequest(session_id=target, messages=[msg]), timeout=TIMEOUT
                )
            req = pb.BuildModelInputRequest(session_id=sid, resume_token=held.resume_token)
            rreq = pb.BuildModelInputRequest(
                session_id=rendered_sid,
                format=pb.MODEL_INPUT_FORMAT_ANTHROPIC_MESSAGES,
                resume_token=rendered.resume_token,
            )

            def build(req: pb.BuildModelInputRequest = req) -> pb.ModelInput:
                return self.stub.BuildModelInput(req, timeout=TIMEOUT)

            ns, delta = timed(build)
            bmi.append(ns)
            get.append(timed(lambda: self.stub.GetSession(get_req, timeout=TIMEOUT))[0])
            assert delta.messages_offset > 0, "the server did not resume"
            sizes.append(delta.ByteSize())
            del held.messages[delta.messages_offset :]
            held.messages.extend(delta.messages)
            held.resume_token = delta.resume_token
            ns, rdelta = timed(functools.partial(build, rreq))
            rendered_ns.append(ns)
            cut = rdelta.rendered_prefix_bytes
            assert cut > 0, "the server did not resume the rendered input"
            rendered_sizes.append(rdelta.ByteSize())
            whole = rendered.rendered_json.encode()[:cut] + rdelta.rendered_json.encode()
            rendered.rendered_json = whole.decode()
            rendered.resume_token = rdelta.resume_token
        self.add(
            summarize(
                self.backend,
                "build_model_input_incremental_rendered",
                rendered_ns,
                count=calls,
                wall_ns=sum(rendered_ns),
                unit="calls/s",
                note=(
                    f"Anthropic Messages JSON ({len(rendered.rendered_json) / 1e6:.2f} MB held), "
                    f"resume_token: {statistics.median(rendered_sizes) / 1e3:.1f} KB sent; "
                    f"/native incremental "
                    f"{statistics.median(rendered_ns) / statistics.median(bmi):.2f}x"
                ),
                extra={
                    "response_bytes_median": statistics.median(rendered_sizes),
                    "ratio_to_native_median": statistics.median(rendered_ns)
                    / statistics.median(bmi),
                },
            )
        )
        ratio = statistics.median(bmi) / statistics.median(get)
        self.add(
            summarize(
                self.backend,
                "build_model_input_incremental",
                bmi,
                count=calls,
                wall_ns=sum(bmi),
                unit="calls/s",
                note=(
                    f"{len(held.messages)} msgs held, resume_token: "
                    f"{statistics.median(sizes) / 1e3:.1f} KB sent; /get_session {ratio:.1f}x"
                ),
                extra={
                    "response_bytes_median": statistics.median(sizes),
                    "ratio_to_get_session_median": ratio,
                    "get_session_median_ms": statistics.median(get) / 1e6,
                },
            )
        )

    def prepare_compaction(self) -> None:
        size = 10_000 if self.cfg.build_calls > 100 else 2_000
        log(f"{self.backend}: PrepareCompaction on a hot {size}-message session")
        sid = create_session(self.stub, "prepare")
        append_batched(self.stub, sid, self.conversation(11).agent_history(size))
        req = pb.PrepareCompactionRequest(session_id=sid)
        self.stub.PrepareCompaction(req, timeout=TIMEOUT)
        lat = []
        plan = pb.CompactionPlan()
        for _ in range(5):
            ns, plan = timed(lambda: self.stub.PrepareCompaction(req, timeout=TIMEOUT))
            lat.append(ns)
        self.add(
            summarize(
                self.backend,
                "prepare_compaction",
                lat,
                note=(
                    f"hot {size}-msg session, plan {plan.ByteSize() / 1e6:.1f} MB "
                    f"(summariser prompt included)"
                ),
                extra={"session_messages": size, "plan_bytes": plan.ByteSize()},
            )
        )


# -- driver --------------------------------------------------------------------


def run_backend(name: str, cfg: Config, seed: int) -> tuple[list[Result], dict[str, Any]]:
    with tempfile.TemporaryDirectory(prefix=f"ctxw-bench-{name}-") as tmp:
        workdir = Path(tmp)
        log_dir = workdir / "logs"
        log_dir.mkdir()
        with backend_database(name, workdir) as (url, info):
            log(f"{name}: starting server")
            server = ServerProcess(url, log_dir)
            server.start()
            bench = BackendBench(name, server, cfg, seed)
            try:
                results = bench.run()
            except BaseException:
                with contextlib.suppress(Exception):
                    sys.stderr.write(server.log_text()[-4000:])
                raise
            finally:
                bench.close()
                server.stop()
            unary = next(r for r in results if r.metric == "append_unary")
            request_bytes = int(unary.extra["avg_message_bytes"])
            results += measure_baselines(name, url, workdir, cfg.appends, request_bytes)
            results += HistoryScaling(
                name, url, log_dir, cfg.history_sizes, cfg.history_reps, seed
            ).run()
            results += console_pages(
                name, url, log_dir, cfg.history_sizes[-1], cfg.history_reps, seed
            )
            results.append(
                measure_memory(name, url, log_dir, cfg.memory_sessions, cfg.memory_messages, seed)
            )
            results += measure_background(name, url, log_dir, 16, 120, seed)
            shown = make_url(url).render_as_string(hide_password=True)
            return results, {"database_url": shown, **info}


def fmt(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def render_table(results: Sequence[Result]) -> str:
    metric_order: list[str] = []
    for r in results:
        if r.metric not in metric_order:
            metric_order.append(r.metric)
    order = [*BACKENDS, "-"]
    rows = sorted(
        results,
        key=lambda r: (
            metric_order.index(r.metric),
            order.index(r.backend) if r.backend in order else len(order),
        ),
    )
    header = ("backend", "metric", "n", "median ms", "p99 ms", "throughput", "notes")
    table = [header]
    for r in rows:
        tput = "-" if r.throughput is None else f"{r.throughput:,.0f} {r.throughput_unit}"
        table.append((r.backend, r.metric, str(r.n), fmt(r.median_ms), fmt(r.p99_ms), tput, r.note))
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    right = {2, 3, 4, 5}
    lines = []
    for j, row in enumerate(table):
        cells = [
            cell.rjust(widths[i]) if i in right else cell.ljust(widths[i])
            for i, cell in enumerate(row)
        ]
        lines.append("  ".join(cells).rstrip())
        if j == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.run", description=__doc__)
    parser.add_argument(
        "--backends",
        default=",".join(BACKENDS),
        help="comma-separated backends to run (default %(default)s); MySQL uses "
        f"${MYSQL_ENV} (default {DEFAULT_MYSQL_URL})",
    )
    parser.add_argument("--quick", action="store_true", help="fewer iterations (smoke run)")
    parser.add_argument("--json", type=Path, help="also write the results to this JSON file")
    parser.add_argument("--seed", type=int, default=1, help="workload seed (default 1)")
    parser.add_argument(
        "--no-peers", action="store_true", help="skip the side-by-side runs of the peers"
    )
    args = parser.parse_args(argv)

    backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    unknown = [b for b in backends if b not in BACKENDS]
    if unknown or not backends:
        parser.error(f"unknown backend(s) {unknown}; choose from {', '.join(BACKENDS)}")
    cfg = Config.make(args.quick)
    started = time.time()
    results: list[Result] = []
    failures: dict[str, str] = {}
    backend_info: dict[str, dict[str, Any]] = {}
    for name in backends:
        t0 = time.monotonic()
        try:
            backend_results, backend_info[name] = run_backend(name, cfg, args.seed)
            results += backend_results
        except Exception as exc:
            log(f"{name}: FAILED: {exc!r}")
            failures[name] = repr(exc)
        log(f"{name}: done in {time.monotonic() - t0:.1f} s")

    log("tokenizer throughput")
    results += tokenizer_throughput(args.seed, args.quick)
    if not args.no_peers:
        try:
            from bench.peers import run_peers
        except ImportError as exc:
            log(f"peers: not run ({exc}); install with pip install -e '.[bench]'")
        else:
            try:
                results += run_peers(backends, args.quick, args.seed)
            except Exception as exc:
                log(f"peers: FAILED: {exc!r}")
                failures["peers"] = repr(exc)

    print()
    print(render_table(results) if results else "(no results)")
    verdicts = evaluate(results, backends)
    print()
    print(render_targets(verdicts))
    for name, err in failures.items():
        print(f"\n{name}: FAILED: {err}")
    elapsed = time.time() - started
    print(f"\n{'quick' if args.quick else 'full'} run, {elapsed:.0f} s total")

    if args.json is not None:
        doc = {
            "meta": {
                **run_meta(started, args.quick, args.seed, asdict(cfg)),
                "backends": backend_info,
            },
            "results": [asdict(r) for r in results],
            "targets": [asdict(v) for v in verdicts],
            "failures": failures,
        }
        args.json.write_text(json.dumps(doc, indent=2) + "\n")
        log(f"wrote {args.json}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
