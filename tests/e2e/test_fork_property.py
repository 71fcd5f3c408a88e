"""Property: a fork is indistinguishable from a session that lived the same
life. Random appends, failed turns, rollbacks, rewinds and compactions run on a
source; it is forked at a random seq at a random moment; then more random
operations run on the fork and on the source, interleaved. A twin (a plain
session) gets the source's operations up to the fork point and then the
fork's. After every step the fork's BuildModelInput equals the twin's, and at
once after the fork it equals the source's BuildModelInput(as_of_seq=at_seq);
what the source does afterwards never changes the fork."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

import grpc
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ctxwarden.v1 import context_service_pb2 as pb
from ctxwarden.v1 import context_service_pb2_grpc as pb_grpc
from ctxwarden.v1 import message_pb2 as m
from ctxwarden.v1 import session_pb2 as ses
from tests.support.builders import assistant, failed, user

Stub = pb_grpc.ContextServiceStub
Op = tuple[str, int]

OPS = st.one_of(
    st.tuples(st.sampled_from(["user", "assistant", "assistant", "failed"]), st.integers(0, 99)),
    st.tuples(st.sampled_from(["rollback", "rewind", "compact"]), st.integers(0, 99)),
)


@dataclass
class Driven:
    """A session and the operations applied to it."""

    stub: Stub
    sid: str
    last_seq: int = 0
    log: list[tuple[Op, int, str]] = field(default_factory=list)
    """(operation, last_seq before it, the message_id it appends)."""

    def apply(self, op: Op, message_id: str = "") -> None:
        """``message_id``: of the message ``op`` appends (a twin appends the same)."""
        kind, n = op
        last = self.last_seq
        message_id = message_id or uuid.uuid4().hex
        self.log.append((op, last, message_id))
        if kind in ("user", "assistant", "failed"):
            text = f"{kind} {n} " * 8
            if kind == "user":
                msg = user(text)
            else:
                msg = assistant(text) if kind == "assistant" else failed(text)
            msg.message_id = message_id
            self.last_seq = self.stub.AppendMessages(
                pb.AppendMessagesRequest(session_id=self.sid, messages=[msg])
            ).last_seq
        elif kind == "rollback":
            self.stub.RollbackTurn(pb.RollbackTurnRequest(session_id=self.sid))
        elif kind == "rewind" and last > 0:
            to_seq = 1 + n % last
            self.stub.RollbackTurn(pb.RollbackTurnRequest(session_id=self.sid, to_seq=to_seq))
        elif kind == "compact":
            self.compact(n)

    def compact(self, n: int) -> None:
        try:
            plan = self.stub.PrepareCompaction(
                pb.PrepareCompactionRequest(session_id=self.sid, keep_recent_tokens=20 + n)
            )
        except grpc.RpcError as err:
            if err.code() != grpc.StatusCode.FAILED_PRECONDITION:  # nothing to compact
                raise
            return
        self.stub.CommitCompaction(
            pb.CommitCompactionRequest(
                session_id=self.sid,
                plan_id=plan.plan_id,
                summary=f"summary {n}",
                turn_prefix_summary="prefix" if plan.split_turn else "",
            )
        )


def _session(stub: Stub) -> str:
    sid = f"p-{uuid.uuid4().hex[:12]}"
    stub.CreateSession(
        pb.CreateSessionRequest(
            session_id=sid,
            session=ses.Session(
                system_prompt="Property.",
                model="fork-property-model",
                policy=ses.ContextPolicy(tokenizer="heuristic", context_window=100_000),
            ),
        )
    )
    return sid


def _input(stub: Stub, sid: str, as_of_seq: int = 0) -> bytes:
    """BuildModelInput without what names a session or a checkpoint row."""
    req = pb.BuildModelInputRequest(session_id=sid)
    if as_of_seq:
        req.as_of_seq = as_of_seq
    mi = stub.BuildModelInput(req)
    mi.session_id = mi.resume_token = ""
    mi.compaction_id = ""
    for msg in mi.messages:
        msg.ClearField("create_time")
        msg.metadata.pop("ctxwarden.summary", None)
    return mi.SerializeToString(deterministic=True)


def _twin_ops(log: list[tuple[Op, int, str]], at: int) -> list[tuple[Op, str]]:
    """The source's operations that happened before message ``at`` was appended."""
    out = []
    for op, last_before, message_id in log:
        appends = op[0] in ("user", "assistant", "failed")
        if last_before >= at or (appends and last_before == at - 1):
            break
        out.append((op, message_id))
    return out


@settings(
    max_examples=15,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    before=st.lists(OPS, min_size=1, max_size=12),
    at_pick=st.integers(0, 1000),
    after=st.lists(st.tuples(st.booleans(), OPS), max_size=12),
)
def test_a_fork_lives_like_a_twin(
    stub: Stub, before: list[Op], at_pick: int, after: list[tuple[bool, Op]]
) -> None:
    source = Driven(stub, _session(stub))
    for op in before:
        source.apply(op)
    at = 1 + at_pick % (source.last_seq + 1)
    expected = _input(stub, source.sid, at)
    forked = stub.ForkSession(pb.ForkSessionRequest(session_id=source.sid, at_seq=at))
    fork = Driven(stub, forked.session_id, forked.last_seq)
    twin = Driven(stub, _session(stub))
    for op, message_id in _twin_ops(source.log, at):
        twin.apply(op, message_id)
    assert _input(stub, fork.sid) == expected
    assert _input(stub, twin.sid) == expected
    for on_fork, op in after:
        if on_fork:
            message_id = uuid.uuid4().hex
            fork.apply(op, message_id)
            twin.apply(op, message_id)
        else:
            source.apply(op)
        assert _input(stub, fork.sid) == _input(stub, twin.sid), (on_fork, op)
    history = [
        pb.ListMessagesRequest(session_id=sid, include_rolled_back=True, page_size=1000)
        for sid in (fork.sid, twin.sid)
    ]
    got = [
        [
            (x.seq, x.state, x.content[0].text.text if x.content else "")
            for x in stub.ListMessages(r).messages
        ]
        for r in history
    ]
    assert got[0] == got[1]
    assert m.MESSAGE_STATE_ACTIVE  # the states compared above are the stored ones
