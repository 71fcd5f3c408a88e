"""Calling every RPC with hostile input and judging what comes back.

The RPC list comes from the generated descriptor, so a new RPC is fuzzed as
soon as it is in the proto. Requests are always sent as raw bytes (structured
requests are serialized first), so both fuzzers share one calling path and one
verdict: the status must be OK or a client error the API documents, carry a
``google.rpc.Status`` with an ``ErrorInfo`` in the ctxwarden.dev domain, and
arrive before the deadline.
"""

from __future__ import annotations

import json
import os
import re
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import grpc
from google.protobuf import message_factory
from google.protobuf.descriptor import Descriptor, MethodDescriptor
from google.protobuf.message import DecodeError
from google.protobuf.message import Message as PbMessage
from google.rpc import error_details_pb2, status_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc
from hypothesis import HealthCheck, settings

from ctxwarden.v1 import context_service_pb2
from tests.fuzz.consistency import database_problems
from tests.support.errors import call_error
from tests.support.server import ServerProcess

SERVICE = context_service_pb2.DESCRIPTOR.services_by_name["ContextService"]
DOMAIN = "ctxwarden.dev"

EXAMPLES_ENV = "CTXWARDEN_FUZZ_EXAMPLES"


def fuzz_settings(ci_examples: int) -> settings:
    """Bounded and deterministic in CI; ``CTXWARDEN_FUZZ_EXAMPLES`` for a longer random run."""
    wanted = os.environ.get(EXAMPLES_ENV, "")
    deep = wanted.strip().isdigit() and int(wanted) > 0
    return settings(
        max_examples=int(wanted) if deep else ci_examples,
        deadline=None,
        derandomize=not deep,
        database=None,
        print_blob=deep,
        suppress_health_check=[
            HealthCheck.too_slow,
            HealthCheck.data_too_large,
            HealthCheck.filter_too_much,
            HealthCheck.large_base_example,
            HealthCheck.function_scoped_fixture,
        ],
    )


CALL_TIMEOUT = float(os.environ.get("CTXWARDEN_FUZZ_CALL_TIMEOUT", "20"))
"""Seconds each fuzzed call may take; running out is reported as a hang."""

Code = grpc.StatusCode

CLIENT_ERRORS = frozenset(
    {
        Code.INVALID_ARGUMENT,
        Code.NOT_FOUND,
        Code.FAILED_PRECONDITION,
        Code.ALREADY_EXISTS,
        Code.ABORTED,
        Code.OUT_OF_RANGE,
        Code.RESOURCE_EXHAUSTED,
    }
)
"""What bad input may get. Not UNIMPLEMENTED: no RPC of the proto documents it.
Not UNAUTHENTICATED/PERMISSION_DENIED: the fuzzed server runs without auth.
Not UNAVAILABLE: the fuzzed server's summariser is the local extractive one and
its database is up, so UNAVAILABLE can only mean a request was misread as an
outage. Never INTERNAL, UNKNOWN or DEADLINE_EXCEEDED."""


@dataclass(frozen=True)
class Rpc:
    """One method of the service, as the descriptor describes it."""

    name: str
    path: str
    request_type: type[PbMessage]
    streaming: bool

    @property
    def request_descriptor(self) -> Descriptor:
        # The protobuf stubs type DESCRIPTOR as the pure-Python or the upb class; at run time
        # it is the one google.protobuf.descriptor.Descriptor stands for.
        return cast(Descriptor, self.request_type.DESCRIPTOR)

    def parse(self, payload: bytes) -> PbMessage | None:
        """The request the server would see, or None when it is not valid protobuf."""
        try:
            return self.request_type.FromString(payload)
        except (DecodeError, RuntimeWarning, ValueError):
            return None


def _rpc(method: MethodDescriptor) -> Rpc:
    return Rpc(
        name=method.name,
        path=f"/{SERVICE.full_name}/{method.name}",
        request_type=message_factory.GetMessageClass(method.input_type),
        streaming=method.client_streaming or method.server_streaming,
    )


DESTRUCTIVE_RPCS = frozenset({"DeleteSession", "ArchiveSession"})
"""RPCs fuzzed only against throw-away sessions, so the pool stays usable (an archived
session refuses every write)."""

RPCS: tuple[Rpc, ...] = tuple(_rpc(m) for m in SERVICE.methods)
RPC_BY_NAME = {r.name: r for r in RPCS}


# -- known server bugs -----------------------------------------------------------


@dataclass(frozen=True)
class KnownBug:
    """A server bug in code this suite may not change, tolerated until it is fixed.

    Each one has a strict-xfail regression test in test_regressions.py: once the
    bug is fixed that test passes, the xfail fails the run, and the entry here
    (and the xfail mark) must go.
    """

    key: str
    summary: str
    codes: frozenset[grpc.StatusCode]
    matches: Callable[[str, PbMessage | None], bool]
    traceback: re.Pattern[str] | None = None
    """Matches the server's logged traceback of the bug (for the log check)."""


KNOWN_BUGS: tuple[KnownBug, ...] = ()
"""None open: the bugs fuzzing found are fixed and pinned in test_regressions.py."""


def known_bug(rpc: str, request: PbMessage | None, code: grpc.StatusCode) -> KnownBug | None:
    for bug in KNOWN_BUGS:
        if code in bug.codes and bug.matches(rpc, request):
            return bug
    return None


# -- calling ------------------------------------------------------------------------


@dataclass
class Outcome:
    code: grpc.StatusCode
    details: str
    responses: list[bytes]
    trailing: tuple[tuple[str, str | bytes], ...] = ()

    @property
    def ok(self) -> bool:
        return self.code is Code.OK


def status_details(trailing: Iterable[tuple[str, str | bytes]]) -> status_pb2.Status | None:
    for key, value in trailing:
        if key == "grpc-status-details-bin" and isinstance(value, bytes):
            return status_pb2.Status.FromString(value)
    return None


def error_info(trailing: Iterable[tuple[str, str | bytes]]) -> error_details_pb2.ErrorInfo | None:
    status = status_details(trailing)
    if status is None:
        return None
    for detail in status.details:
        info = error_details_pb2.ErrorInfo()
        if detail.Unpack(info):
            return info
    return None


def _from_error(err: grpc.RpcError, responses: list[bytes]) -> Outcome:
    call = call_error(err)
    return Outcome(
        call.code(),
        call.details() or "",
        responses,
        tuple(call.trailing_metadata() or ()),
    )


def call_raw(
    channel: grpc.Channel,
    rpc: Rpc,
    payload: bytes | Sequence[bytes],
    *,
    timeout: float = CALL_TIMEOUT,
    metadata: tuple[tuple[str, str | bytes], ...] = (),
) -> Outcome:
    """Send raw request bytes (a list of frames for a streaming RPC)."""
    if rpc.streaming:
        frames = [payload] if isinstance(payload, bytes) else list(payload)
        stream: grpc.StreamStreamMultiCallable[bytes, bytes] = channel.stream_stream(
            rpc.path, request_serializer=None, response_deserializer=None
        )
        responses: list[bytes] = []
        try:
            for item in stream(iter(frames), timeout=timeout, metadata=metadata or None):
                responses.append(item)
        except grpc.RpcError as err:
            return _from_error(err, responses)
        return Outcome(Code.OK, "", responses)
    assert isinstance(payload, bytes)
    unary: grpc.UnaryUnaryMultiCallable[bytes, bytes] = channel.unary_unary(
        rpc.path, request_serializer=None, response_deserializer=None
    )
    try:
        response = unary(payload, timeout=timeout, metadata=metadata or None)
    except grpc.RpcError as err:
        return _from_error(err, [])
    return Outcome(Code.OK, "", [response])


@dataclass
class Verdicts:
    """Counts of what the fuzzers saw, for the summary line and the log check."""

    codes: Counter[str] = field(default_factory=Counter)
    tolerated: Counter[str] = field(default_factory=Counter)


def _preview(payload: bytes | Sequence[bytes], limit: int = 300) -> str:
    frames = [payload] if isinstance(payload, bytes) else list(payload)
    return " | ".join(f.hex()[:limit] + ("..." if len(f) * 2 > limit else "") for f in frames)


def judge(
    rpc: Rpc,
    payload: bytes | Sequence[bytes],
    outcome: Outcome,
    verdicts: Verdicts,
    requests: Sequence[PbMessage | None] | None = None,
    *,
    fuzzer: str = "raw",
) -> None:
    """Fail unless ``outcome`` is an acceptable answer to hostile input."""
    info = None if outcome.ok else error_info(outcome.trailing)
    reason = f" {info.reason}" if info is not None else ""
    verdicts.codes[f"{fuzzer:10} {rpc.name} {outcome.code.name}{reason}"] += 1
    if outcome.ok or outcome.code in CLIENT_ERRORS:
        if not outcome.ok:
            assert info is not None and info.domain == DOMAIN, (
                f"{rpc.name} answered {outcome.code.name} without an ErrorInfo in the "
                f"{DOMAIN} domain: {outcome.details!r}; request bytes: {_preview(payload)}"
            )
            status = status_details(outcome.trailing)
            assert status is not None and status.code == outcome.code.value[0]
        return
    if requests is None:
        frames = [payload] if isinstance(payload, bytes) else list(payload)
        requests = [rpc.parse(f) for f in frames]
    for request in requests:
        bug = known_bug(rpc.name, request, outcome.code)
        if bug is not None:
            verdicts.tolerated[bug.key] += 1
            return
    raise AssertionError(
        f"{rpc.name} answered {outcome.code.name} ({outcome.details!r}) to hostile input; "
        f"request bytes (hex): {_preview(payload)}"
    )


def health_check(channel: grpc.Channel, server: ServerProcess) -> None:
    """The process is alive and the standard health service says SERVING."""
    assert server.proc is not None and server.proc.poll() is None, (
        f"the server process died: {server.log_text()[-3000:]}"
    )
    reply = health_pb2_grpc.HealthStub(channel).Check(
        health_pb2.HealthCheckRequest(service=""), timeout=10
    )
    assert reply.status == health_pb2.HealthCheckResponse.SERVING


@dataclass
class Pool:
    """Real sessions created before fuzzing, so most requests reach existing state."""

    sessions: list[str]
    """Sessions any fuzzed request may target (never deleted by the fuzzers)."""
    victims: list[str]
    """Sessions DeleteSession may delete."""
    page_tokens: dict[str, str] = field(default_factory=dict)
    """A real next_page_token per list RPC, for mutation."""
    compactable: list[str] = field(default_factory=list)
    """Sessions only well-paired exchanges are appended to, so they stay compactable
    (an unanswered tool call pins the cut, and fuzzed appends leave many)."""
    memories: list[str] = field(default_factory=list)
    """IDs of real long-term memories, for the memory RPCs."""

    def for_rpc(self, rpc: str) -> Pool:
        """The sessions ``rpc`` may target: only victims for an RPC that destroys them."""
        if rpc not in DESTRUCTIVE_RPCS:
            return self
        return Pool(self.victims, self.victims, self.page_tokens, self.compactable, self.memories)


@dataclass
class FuzzTarget:
    server: ServerProcess
    channel: grpc.Channel
    url: str
    since_us: int
    pool: Pool
    verdicts: Verdicts = field(default_factory=Verdicts)

    @property
    def log_dir(self) -> Path:
        return self.server.log_dir

    def assert_healthy(self) -> None:
        health_check(self.channel, self.server)

    def assert_consistent(self) -> None:
        """Alive and SERVING, database invariants hold, no unexplained traceback logged."""
        self.assert_healthy()
        problems = database_problems(self.url, self.since_us)
        assert not problems, "inconsistent database:\n" + "\n".join(problems[:30])
        errors = unexplained_errors(self.log_dir)
        assert not errors, "unexplained errors in the server log:\n" + "\n\n".join(errors[:5])


# -- the server log -----------------------------------------------------------------


def unexplained_errors(log_dir: Path) -> list[str]:
    """Logged tracebacks (and logging errors) that no known bug accounts for."""
    problems: list[str] = []
    for path in sorted(log_dir.glob("server-*.log")):
        for line in path.read_text(errors="replace").splitlines():
            if "Traceback" not in line and "Logging error" not in line:
                continue
            try:
                entry: dict[str, Any] = json.loads(line)
            except ValueError:
                problems.append(f"{path.name}: {line[:500]}")
                continue
            text = str(entry.get("exc", "")) or str(entry.get("msg", ""))
            if any(b.traceback is not None and b.traceback.search(text) for b in KNOWN_BUGS):
                continue
            problems.append(f"{path.name}: {entry.get('msg')}: {text[-1500:]}")
    return problems
