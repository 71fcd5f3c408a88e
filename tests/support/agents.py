"""Simulated LLM agents: a load driver shared by the reliability tests and the soak run.

Each agent owns one session and plays realistic turns against a real server
over grpc.aio (all agents share one event loop and a few channels): append
the user's ask, ``BuildModelInput``, a few tool rounds (assistant tool call,
tool result, ``BuildModelInput``), the final answer; now and then a model
call fails (a failed assistant message, then ``RollbackTurn``), and every few
turns the agent compacts (server-side ``Compact`` and agent-side
``PrepareCompaction``/``CommitCompaction``, alternately).

Every mutating call carries an idempotency key (``request_id``; half of the
agents also set ``message_id`` on every message) and is retried with the
very same request after any failure, so what an agent believes was
acknowledged is exact: every acknowledged seq with its message ID and a
digest of its content, every rolled-back seq, every compaction.
:func:`verify_database` compares that with the database, read directly.

Agents also check what they read: ``BuildModelInput`` must reflect their
last acknowledged seq and checkpoint and never show a rolled-back message;
an append must get the next seqs. A mismatch is a *violation*.

Usage::

    report = asyncio.run(run_agents(server.target, LoadOptions(agents=200, duration=60)))
    assert not report.unexpected_errors() and not report.violations
    assert not verify_database(database_url, report).problems
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import math
import random
import secrets
import statistics
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, TypeVar

import grpc
from google.rpc import error_details_pb2, status_pb2
from sqlalchemy import Table, create_engine, select

from ctxwarden.core.messages import ContentKind
from ctxwarden.store.codec import message_from_row
from ctxwarden.store.models import CompactionRow, MessageRow, SessionRow
from ctxwarden.store.urls import sync_url
from ctxwarden.v1 import context_service_pb2 as pb
from ctxwarden.v1 import context_service_pb2_grpc as pb_grpc
from ctxwarden.v1 import message_pb2 as m
from ctxwarden.v1 import session_pb2 as ses

T = TypeVar("T")

TRANSIENT_CODES = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED})
"""Codes an agent keeps retrying until its retry budget runs out (others: a few times)."""

CHANNEL_OPTIONS: list[tuple[str, Any]] = [
    # Every channel gets its own connection (grpc shares subchannels of
    # identical channels by default), so no single HTTP/2 connection hits
    # the server's max_concurrent_streams.
    ("grpc.use_local_subchannel_pool", 1),
    # Reconnect quickly after a server restart (the default backoff grows to 120 s).
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.min_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 1000),
    ("grpc.max_receive_message_length", 64 * 1024 * 1024),
    ("grpc.max_send_message_length", 64 * 1024 * 1024),
]

MODEL = "gpt-4o"
SYSTEM_PROMPT = (
    "You are a careful coding agent working in a Python repository. Read before you edit, "
    "keep changes small, run the tests after each change and report what you verified."
)
TOOLS = (
    ses.ToolDefinition(
        name="read",
        description="Read a file of the repository.",
        parameters_json='{"type":"object","properties":{"path":{"type":"string"}},'
        '"required":["path"]}',
    ),
    ses.ToolDefinition(
        name="shell",
        description="Run a shell command in the repository root.",
        parameters_json='{"type":"object","properties":{"command":{"type":"string"}},'
        '"required":["command"]}',
    ),
)
WORDS = [
    "the",
    "test",
    "fails",
    "because",
    "parser",
    "returns",
    "None",
    "when",
    "config",
    "file",
    "is",
    "missing",
    "so",
    "we",
    "add",
    "a",
    "default",
    "and",
    "check",
    "every",
    "caller",
    "of",
    "load_settings",
    "in",
    "src",
    "cli",
    "py",
    "then",
    "rerun",
    "pytest",
    "with",
    "verbose",
    "output",
    "to",
    "confirm",
    "that",
    "nothing",
    "else",
    "regressed",
    "while",
    "the",
    "cache",
    "layer",
    "keeps",
    "stale",
    "entries",
    "after",
    "a",
    "schema",
    "change",
    "which",
    "explains",
    "the",
    "flaky",
    "integration",
    "suite",
]
PROVIDER_ERRORS = (
    "429 Too Many Requests: rate limit reached, retry in 2s",
    "503 Service Unavailable: the engine is currently overloaded",
    "Connection reset by peer",
)


# -- options and records -----------------------------------------------------------------


@dataclass(frozen=True)
class LoadOptions:
    agents: int = 200
    duration: float = 60.0
    """Seconds agents start new operations for (``stop`` may end the run earlier)."""
    channels: int = 8
    call_timeout: float = 30.0
    retry_budget: float = 120.0
    """Seconds one operation may keep retrying transient errors before the agent gives up."""
    other_attempts: int = 3
    """Attempts for an operation failing with a non-transient code."""
    max_tool_rounds: int = 2
    failure_probability: float = 0.08
    """Chance, per model call, that it fails (failed assistant message + RollbackTurn)."""
    compact_every_turns: int = 5
    """Compact after every this many turns (0: never)."""
    server_compact: bool = True
    """Alternate server-side Compact (needs --summarizer) with Prepare/CommitCompaction."""
    keep_recent_tokens: int = 300
    message_id_share: float = 0.5
    """Share of agents that set message_id on their messages (all set request_id)."""
    tool_result_ids: bool = False
    """Give tool results a message_id even in agents that otherwise rely on request_id
    alone (off: a resent tool result is replayed by its request_id)."""
    seed: int = 1
    run_id: str = field(default_factory=lambda: secrets.token_hex(3))


@dataclass(frozen=True, slots=True)
class Acked:
    seq: int
    message_id: str
    role: int
    digest: str


@dataclass
class AgentRecord:
    """What one agent knows was acknowledged, and how it fared."""

    index: int
    session_id: str
    uses_message_ids: bool
    created: bool = False
    acked: dict[int, Acked] = field(default_factory=dict)
    rolled_back: set[int] = field(default_factory=set)
    last_seq: int = 0
    compactions: list[str] = field(default_factory=list)
    compaction_id: str = ""
    turns: int = 0
    ops: int = 0
    retried_ops: int = 0
    replayed_appends: int = 0
    """Appends retried after an error whose answer shows the first attempt had committed."""
    done_times: list[float] = field(default_factory=list)
    """Report-relative times at which this agent's operations succeeded."""
    pending: list[m.Message] = field(default_factory=list)
    """Messages of an append that never got an answer (only when the agent gave up)."""
    gave_up: str = ""

    def ops_after(self, t: float) -> int:
        return sum(1 for x in self.done_times if x >= t)


@dataclass(frozen=True, slots=True)
class ErrorEvent:
    t: float
    """Seconds since the report started."""
    agent: int
    op: str
    code: str
    reason: str
    """The ErrorInfo reason, "" when the error carried none (transport errors)."""
    details: str


@dataclass(frozen=True, slots=True)
class LatencyStats:
    n: int
    median_ms: float
    p99_ms: float
    max_ms: float


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100) of already sorted values."""
    rank = max(1, math.ceil(q / 100 * len(sorted_values)))
    return sorted_values[rank - 1]


class LoadReport:
    """Everything a run observed; safe to read while the run is going on."""

    def __init__(self, options: LoadOptions) -> None:
        self.options = options
        self.started = time.monotonic()
        self.started_wall = time.time()
        self.elapsed = 0.0
        self.agents: list[AgentRecord] = []
        self.samples: list[tuple[float, str, float]] = []
        """(report time, operation, latency ms) of every successful call."""
        self.errors: list[ErrorEvent] = []
        self.violations: list[str] = []

    def now(self) -> float:
        return time.monotonic() - self.started

    # -- reading ---------------------------------------------------------------

    def latency(
        self, op: str | None = None, since: float = 0.0, until: float = math.inf
    ) -> LatencyStats:
        ms = sorted(x for t, o, x in self.samples if since <= t < until and (op is None or o == op))
        if not ms:
            return LatencyStats(0, math.nan, math.nan, math.nan)
        return LatencyStats(len(ms), statistics.median(ms), percentile(ms, 99), ms[-1])

    def ops(self, since: float = 0.0, until: float = math.inf) -> int:
        return sum(1 for t, _, _ in self.samples if since <= t < until)

    def throughput(self) -> float:
        return len(self.samples) / self.elapsed if self.elapsed > 0 else 0.0

    def unexpected_errors(self, allowed: Iterable[str] = ()) -> list[ErrorEvent]:
        allow = set(allowed)
        return [e for e in self.errors if e.code not in allow]

    def errors_between(self, t0: float, t1: float) -> list[ErrorEvent]:
        return [e for e in self.errors if t0 <= e.t < t1]

    def gave_up(self) -> list[str]:
        return [f"agent {a.index}: {a.gave_up}" for a in self.agents if a.gave_up]

    def idle_agents(self, since: float, min_ops: int = 1) -> list[int]:
        """Agents still running that completed fewer than ``min_ops`` operations since
        ``since`` (agents that gave up are in ``gave_up()`` instead)."""
        return [a.index for a in self.agents if not a.gave_up and a.ops_after(since) < min_ops]

    def summary(self) -> dict[str, Any]:
        by_op = sorted({o for _, o, _ in self.samples})
        per_agent = sorted(a.ops for a in self.agents) or [0]
        return {
            "options": asdict(self.options),
            "elapsed_s": round(self.elapsed, 3),
            "ops": len(self.samples),
            "throughput_ops_per_s": round(self.throughput(), 1),
            "latency_ms": asdict(self.latency()),
            "latency_ms_by_op": {o: asdict(self.latency(o)) for o in by_op},
            "errors_by_code": dict(Counter(e.code for e in self.errors)),
            "violations": len(self.violations),
            "gave_up": len(self.gave_up()),
            "agents": len(self.agents),
            "ops_per_agent": {
                "min": per_agent[0],
                "median": statistics.median(per_agent),
                "max": per_agent[-1],
            },
            "turns": sum(a.turns for a in self.agents),
            "messages_acked": sum(len(a.acked) for a in self.agents),
            "rollbacks": sum(len(a.rolled_back) for a in self.agents),
            "compactions": sum(len(a.compactions) for a in self.agents),
            "retried_ops": sum(a.retried_ops for a in self.agents),
            "replayed_appends": sum(a.replayed_appends for a in self.agents),
        }

    def describe(self) -> str:
        s = self.summary()
        lat = s["latency_ms"]
        return (
            f"{s['agents']} agents, {s['elapsed_s']:.1f} s: {s['ops']} ops "
            f"({s['throughput_ops_per_s']:.0f}/s), latency median {lat['median_ms']:.1f} ms "
            f"p99 {lat['p99_ms']:.1f} ms max {lat['max_ms']:.1f} ms; "
            f"{s['messages_acked']} messages, {s['rollbacks']} rollbacks, "
            f"{s['compactions']} compactions; errors {s['errors_by_code']}, "
            f"retried ops {s['retried_ops']} (replayed appends {s['replayed_appends']})"
        )


# -- digests -------------------------------------------------------------------------------


def _digest(role: int, blocks: list[list[str]], tool_call_id: str, error_message: str) -> str:
    raw = json.dumps([role, blocks, tool_call_id, error_message], separators=(",", ":"))
    return hashlib.sha256(raw.encode()).hexdigest()


def message_digest(msg: m.Message) -> str:
    """Digest of a message's role and content as the agent sent it."""
    blocks: list[list[str]] = []
    for b in msg.content:
        kind = b.WhichOneof("block")
        if kind == "text":
            blocks.append(["text", b.text.text])
        elif kind == "tool_call":
            tc = b.tool_call
            blocks.append(["tool_call", tc.id, tc.name, tc.arguments_json])
        else:
            raise ValueError(f"the agents never send {kind} blocks")
    return _digest(int(msg.role), blocks, msg.tool_call_id, msg.error_message)


def row_digest(row: Any) -> str:
    """The same digest, from a ``messages`` row (decoded as the server stores it)."""
    m = message_from_row(row)
    blocks: list[list[str]] = []
    for blk in m.content:
        if blk.kind is ContentKind.TEXT:
            blocks.append(["text", blk.text])
        elif blk.kind is ContentKind.TOOL_CALL:
            blocks.append(["tool_call", blk.tool_call_id, blk.tool_name, blk.arguments_json])
        else:
            blocks.append([blk.kind.name.lower()])
    return _digest(int(m.role), blocks, m.tool_call_id, m.error_message)


def error_reason(err: grpc.aio.AioRpcError) -> str:
    for key, value in err.trailing_metadata() or ():
        if key == "grpc-status-details-bin" and isinstance(value, bytes):
            status = status_pb2.Status.FromString(value)
            for detail in status.details:
                info = error_details_pb2.ErrorInfo()
                if detail.Unpack(info):
                    return str(info.reason)
    return ""


# -- the agents ----------------------------------------------------------------------------


class _GaveUp(Exception):
    pass


def _text_block(text: str) -> m.ContentBlock:
    return m.ContentBlock(text=m.TextContent(text=text))


class _Agent:
    def __init__(
        self,
        index: int,
        stub: pb_grpc.ContextServiceAsyncStub,
        options: LoadOptions,
        report: LoadReport,
        stopping: Callable[[], bool],
    ) -> None:
        self.stub = stub
        self.o = options
        self.report = report
        self.stopping = stopping
        self.rng = random.Random(f"{options.seed}-{index}")
        uses_ids = self.rng.random() < options.message_id_share
        sid = f"ag-{options.run_id}-{index:04d}"
        self.rec = AgentRecord(index, sid, uses_ids)
        self.sid = sid
        self._requests = 0
        self._compactions = 0
        self._attempt_wall = 0.0
        self._attempts = 0

    # -- plumbing ----------------------------------------------------------------

    async def _call(
        self,
        op: str,
        fn: Callable[..., Awaitable[T]],
        request: Any,
        *,
        accept: Callable[[grpc.aio.AioRpcError], bool] | None = None,
    ) -> T | None:
        """Call until it succeeds, retrying the same request; None for an accepted error."""
        began = time.monotonic()
        attempts = 0
        while True:
            attempts += 1
            self._attempt_wall = time.time()
            t0 = time.perf_counter()
            try:
                resp = await fn(request, timeout=self.o.call_timeout)
            except grpc.aio.AioRpcError as err:
                ms = (time.perf_counter() - t0) * 1000
                if accept is not None and accept(err):
                    self._done(op, ms, attempts)
                    return None
                code = err.code()
                self.report.errors.append(
                    ErrorEvent(
                        self.report.now(),
                        self.rec.index,
                        op,
                        code.name,
                        error_reason(err),
                        (err.details() or "")[:300],
                    )
                )
                budget_left = time.monotonic() - began < self.o.retry_budget
                if not budget_left or (
                    code not in TRANSIENT_CODES and attempts >= self.o.other_attempts
                ):
                    raise _GaveUp(
                        f"{op} failed {attempts} times, last {code.name}: {err.details()}"
                    ) from None
                delay = min(1.0, 0.05 * 2 ** min(attempts, 6))
                await asyncio.sleep(delay * (0.5 + self.rng.random() / 2))
                continue
            self._done(op, (time.perf_counter() - t0) * 1000, attempts)
            return resp

    def _done(self, op: str, ms: float, attempts: int) -> None:
        now = self.report.now()
        self.report.samples.append((now, op, ms))
        self.rec.ops += 1
        self.rec.done_times.append(now)
        self._attempts = attempts
        if attempts > 1:
            self.rec.retried_ops += 1

    def _violation(self, what: str) -> None:
        self.report.violations.append(f"agent {self.rec.index} ({self.sid}): {what}")

    def _words(self, lo: int, hi: int) -> str:
        return " ".join(self.rng.choice(WORDS) for _ in range(self.rng.randint(lo, hi)))

    def _last_active(self) -> int:
        for seq in range(self.rec.last_seq, 0, -1):
            if seq not in self.rec.rolled_back:
                return seq
        return 0

    # -- operations --------------------------------------------------------------

    async def _create(self) -> None:
        req = pb.CreateSessionRequest(
            session_id=self.sid,
            request_id=f"create-{self.sid}",
            session=ses.Session(
                system_prompt=SYSTEM_PROMPT,
                tools=TOOLS,
                model=MODEL,
                user_id=f"agent-{self.rec.index}",
                project_id="reliability",
                policy=ses.ContextPolicy(keep_recent_tokens=self.o.keep_recent_tokens),
            ),
        )
        created = await self._call("create", self.stub.CreateSession, req)
        assert created is not None
        if created.session_id != self.sid or created.last_seq != 0:
            self._violation(f"CreateSession answered {created.session_id} at {created.last_seq}")
        self.rec.created = True

    async def _append(self, messages: list[m.Message]) -> list[int]:
        n = self._requests
        self._requests += 1
        for k, msg in enumerate(messages):
            if self.rec.uses_message_ids or (
                self.o.tool_result_ids and msg.role == m.ROLE_TOOL_RESULT
            ):
                msg.message_id = f"m{n}-{k}"
        req = pb.AppendMessagesRequest(session_id=self.sid, messages=messages, request_id=f"a{n}")
        self.rec.pending = messages
        resp = await self._call("append", self.stub.AppendMessages, req)
        assert resp is not None
        self.rec.pending = []
        want = list(range(self.rec.last_seq + 1, self.rec.last_seq + 1 + len(messages)))
        got = [x.seq for x in resp.messages]
        if got != want or resp.last_seq != want[-1]:
            self._violation(f"append {n} got seqs {got} last_seq {resp.last_seq}, wanted {want}")
        if self._attempts > 1 and resp.messages:
            committed = resp.messages[0].create_time.ToMicroseconds() / 1e6
            if committed < self._attempt_wall:
                self.rec.replayed_appends += 1
        for sent, stored in zip(messages, resp.messages, strict=False):
            digest = message_digest(sent)
            if message_digest(stored) != digest:
                self._violation(f"append {n}: seq {stored.seq} came back with other content")
            if sent.message_id and stored.message_id != sent.message_id:
                self._violation(f"append {n}: seq {stored.seq} has id {stored.message_id}")
            self.rec.acked[stored.seq] = Acked(
                stored.seq, stored.message_id, int(sent.role), digest
            )
        self.rec.last_seq = max(self.rec.last_seq, resp.last_seq)
        return got

    async def _build(self) -> None:
        mi = await self._call(
            "build", self.stub.BuildModelInput, pb.BuildModelInputRequest(session_id=self.sid)
        )
        assert mi is not None
        if mi.last_seq != self.rec.last_seq:
            self._violation(f"BuildModelInput at last_seq {mi.last_seq}, acked {self.rec.last_seq}")
        if mi.compaction_id != self.rec.compaction_id:
            self._violation(
                f"BuildModelInput checkpoint {mi.compaction_id!r}, acked {self.rec.compaction_id!r}"
            )
        seqs = [x.seq for x in mi.messages if x.seq > 0]
        shown_back = [s for s in seqs if s in self.rec.rolled_back]
        if shown_back:
            self._violation(f"BuildModelInput shows rolled-back seqs {shown_back}")
        last = self._last_active()
        if seqs and seqs[-1] != last:
            self._violation(f"BuildModelInput ends at seq {seqs[-1]}, last active is {last}")

    async def _failed_model_call(self) -> None:
        """The provider call fails: record the failure, roll it back."""
        error = self.rng.choice(PROVIDER_ERRORS)
        failed = m.Message(
            role=m.ROLE_ASSISTANT, stop_reason=m.STOP_REASON_ERROR, error_message=error
        )
        seqs = await self._append([failed])
        if self.stopping():
            # Leave it: a failed turn the agent did not get to roll back is
            # still a valid state (and exactly what the database must hold).
            return
        n = self._requests
        self._requests += 1
        rb = await self._call(
            "rollback",
            self.stub.RollbackTurn,
            pb.RollbackTurnRequest(session_id=self.sid, request_id=f"rb{n}"),
        )
        assert rb is not None
        if list(rb.rolled_back_seqs) != seqs:
            self._violation(f"RollbackTurn rolled back {list(rb.rolled_back_seqs)}, not {seqs}")
        self.rec.rolled_back.update(rb.rolled_back_seqs)

    async def _compact(self) -> None:
        self._compactions += 1
        n = self._requests
        self._requests += 1
        nothing = _nothing_to_compact
        done: pb.Compaction | None
        if self.o.server_compact and (self._compactions + self.rec.index) % 2 == 1:
            done = await self._call(
                "compact",
                self.stub.Compact,
                pb.CompactRequest(session_id=self.sid, request_id=f"cp{n}"),
                accept=nothing,
            )
        else:
            plan = await self._call(
                "prepare",
                self.stub.PrepareCompaction,
                pb.PrepareCompactionRequest(session_id=self.sid),
                accept=nothing,
            )
            if plan is None:
                return
            summary = f"## Goal\nKeep going (agent {self.rec.index}, compaction {n}).\n"
            done = await self._call(
                "commit",
                self.stub.CommitCompaction,
                pb.CommitCompactionRequest(
                    session_id=self.sid,
                    plan_id=plan.plan_id,
                    summary=summary + self._words(20, 60),
                    turn_prefix_summary=self._words(5, 20) if plan.split_turn else "",
                ),
            )
        if done is None:
            return
        if done.first_kept_seq > self.rec.last_seq + 1:
            self._violation(f"checkpoint keeps from {done.first_kept_seq} > {self.rec.last_seq}")
        self.rec.compactions.append(done.compaction_id)
        self.rec.compaction_id = done.compaction_id

    async def _turn(self) -> None:
        t = self.rec.turns
        ask = f"turn {t}: " + self._words(30, 120)
        await self._append([m.Message(role=m.ROLE_USER, content=[_text_block(ask)])])
        for r in range(self.rng.randint(0, self.o.max_tool_rounds)):
            if self.stopping():
                return
            await self._build()
            if self.rng.random() < self.o.failure_probability:
                await self._failed_model_call()
                if self.stopping():
                    return
                await self._build()
            call_id = f"call-{t}-{r}"
            tool = self.rng.choice(("read", "shell"))
            args = {"path": f"src/mod{self.rng.randint(0, 40)}.py"}
            if tool == "shell":
                args = {"command": f"pytest -q tests/test_mod{self.rng.randint(0, 40)}.py"}
            call = m.Message(
                role=m.ROLE_ASSISTANT,
                stop_reason=m.STOP_REASON_TOOL_USE,
                content=[
                    _text_block(self._words(3, 15)),
                    m.ContentBlock(
                        tool_call=m.ToolCall(
                            id=call_id, name=tool, arguments_json=json.dumps(args, sort_keys=True)
                        )
                    ),
                ],
            )
            await self._append([call])
            output = "\n".join(self._words(5, 15) for _ in range(self.rng.randint(3, 30)))
            await self._append(
                [
                    m.Message(
                        role=m.ROLE_TOOL_RESULT,
                        tool_call_id=call_id,
                        tool_name=tool,
                        content=[_text_block(output)],
                    )
                ]
            )
        if self.stopping():
            return
        await self._build()
        if self.rng.random() < self.o.failure_probability:
            await self._failed_model_call()
            if self.stopping():
                return
            await self._build()
        answer = m.Message(
            role=m.ROLE_ASSISTANT,
            stop_reason=m.STOP_REASON_STOP,
            content=[_text_block(self._words(20, 100))],
        )
        await self._append([answer])
        self.rec.turns += 1
        every = self.o.compact_every_turns
        if every and (self.rec.turns + self.rec.index) % every == 0 and not self.stopping():
            await self._compact()
            if not self.stopping():
                await self._build()

    async def run(self) -> None:
        try:
            await self._create()
            while not self.stopping():
                await self._turn()
        except _GaveUp as exc:
            self.rec.gave_up = str(exc)


def _nothing_to_compact(err: grpc.aio.AioRpcError) -> bool:
    return (
        err.code() == grpc.StatusCode.FAILED_PRECONDITION
        and error_reason(err) == "NOTHING_TO_COMPACT"
    )


async def run_agents(
    target: str,
    options: LoadOptions,
    report: LoadReport | None = None,
    stop: asyncio.Event | None = None,
) -> LoadReport:
    """Run ``options.agents`` agents against ``target`` until ``options.duration``
    passes or ``stop`` is set; every agent then finishes the operation it is in
    (with its retries). Pass ``report`` to watch the run while it goes on."""
    report = report or LoadReport(options)
    channels = [
        grpc.aio.insecure_channel(target, options=CHANNEL_OPTIONS)
        for _ in range(max(1, options.channels))
    ]
    deadline = time.monotonic() + options.duration

    def stopping() -> bool:
        return time.monotonic() >= deadline or (stop is not None and stop.is_set())

    try:
        stubs = [pb_grpc.ContextServiceStub(ch) for ch in channels]
        agents = [
            _Agent(i, stubs[i % len(stubs)], options, report, stopping)
            for i in range(options.agents)
        ]
        report.agents = [a.rec for a in agents]
        await asyncio.gather(*(a.run() for a in agents))
    finally:
        report.elapsed = report.now()
        for ch in channels:
            await ch.close()
    return report


# -- checking the database ------------------------------------------------------------


def sync_database_url(url: str) -> str:
    """The synchronous-driver URL of a server database URL."""
    return sync_url(url).render_as_string(hide_password=False)


@dataclass
class DatabaseCheck:
    problems: list[str]
    sessions: int = 0
    messages: int = 0
    rolled_back: int = 0
    compactions: int = 0


ACTIVE = int(m.MESSAGE_STATE_ACTIVE)
ROLLED_BACK = int(m.MESSAGE_STATE_ROLLED_BACK)


def verify_database(database_url: str, agents: Sequence[AgentRecord]) -> DatabaseCheck:
    """Compare every agent's acknowledged record with the database, read directly.

    Problems: a session missing or at another last_seq; seqs not dense; an
    acknowledged message missing (lost) or with another ID, role or content;
    a stored message nobody acknowledged (duplicate or phantom; for an agent
    that gave up, its unanswered append may legitimately be there); a wrong
    rolled-back state; checkpoints other than the acknowledged ones.
    """
    msgs_t: Table = MessageRow.__table__  # type: ignore[assignment]
    sess_t: Table = SessionRow.__table__  # type: ignore[assignment]
    comp_t: Table = CompactionRow.__table__  # type: ignore[assignment]
    ids = [a.session_id for a in agents if a.created]
    engine = create_engine(sync_database_url(database_url))
    try:
        with engine.connect() as conn:
            rows = conn.execute(
                select(msgs_t)
                .where(msgs_t.c.session_id.in_(ids))
                .order_by(msgs_t.c.session_id, msgs_t.c.seq)
            ).all()
            sessions = {
                r.session_id: r
                for r in conn.execute(
                    select(sess_t.c.session_id, sess_t.c.last_seq, sess_t.c.compaction_id).where(
                        sess_t.c.session_id.in_(ids)
                    )
                )
            }
            checkpoints = conn.execute(
                select(comp_t.c.session_id, comp_t.c.compaction_id).where(
                    comp_t.c.session_id.in_(ids)
                )
            ).all()
    finally:
        engine.dispose()
    by_session: dict[str, list[Any]] = {sid: [] for sid in ids}
    for r in rows:
        by_session[r.session_id].append(r)
    stored_checkpoints: dict[str, list[str]] = {sid: [] for sid in ids}
    for c in checkpoints:
        stored_checkpoints[c.session_id].append(c.compaction_id)
    check = DatabaseCheck([], sessions=len(sessions), messages=len(rows))
    check.rolled_back = sum(1 for r in rows if r.state == ROLLED_BACK)
    check.compactions = len(checkpoints)
    for a in agents:
        if a.created:
            check.problems += _check_agent(
                a, sessions.get(a.session_id), by_session, stored_checkpoints
            )
    return check


def _check_agent(
    a: AgentRecord,
    session: Any,
    by_session: dict[str, list[Any]],
    stored_checkpoints: dict[str, list[str]],
) -> list[str]:
    sid = a.session_id
    if session is None:
        return [f"{sid}: session row missing"]
    out: list[str] = []
    uncertain = {message_digest(x) for x in a.pending} if a.gave_up else set()
    stored = by_session[sid]
    seqs = [r.seq for r in stored]
    if seqs != list(range(1, len(seqs) + 1)):
        out.append(f"{sid}: seqs are not 1..{len(seqs)}: {seqs[:5]}...")
    if session.last_seq != len(seqs):
        out.append(f"{sid}: sessions.last_seq {session.last_seq} but {len(seqs)} messages")
    if not a.gave_up and session.last_seq != a.last_seq:
        out.append(f"{sid}: sessions.last_seq {session.last_seq}, acknowledged {a.last_seq}")
    seen: set[int] = set()
    for r in stored:
        seen.add(r.seq)
        digest = row_digest(r)
        ack = a.acked.get(r.seq)
        if ack is None:
            if digest not in uncertain:
                out.append(f"{sid}: seq {r.seq} ({r.message_id}) stored but never acknowledged")
            continue
        if (r.message_id, r.role, digest) != (ack.message_id, ack.role, ack.digest):
            out.append(f"{sid}: seq {r.seq} differs from what was acknowledged")
        want = ROLLED_BACK if r.seq in a.rolled_back else ACTIVE
        if r.state != want:
            out.append(f"{sid}: seq {r.seq} state {r.state}, want {want}")
    lost = sorted(set(a.acked) - seen)
    if lost:
        out.append(f"{sid}: acknowledged seqs missing from the database: {lost}")
    if sorted(stored_checkpoints[sid]) != sorted(a.compactions):
        out.append(
            f"{sid}: checkpoints {sorted(stored_checkpoints[sid])}, acknowledged "
            f"{sorted(a.compactions)}"
        )
    if not a.gave_up and session.compaction_id != a.compaction_id:
        out.append(f"{sid}: current checkpoint {session.compaction_id!r}, not {a.compaction_id!r}")
    return out
