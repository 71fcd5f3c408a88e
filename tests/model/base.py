"""The whole-API state machine's common part: its state (the reference model of every
session, the cache ledger's model), the calls every rule makes through it (appends and
builds, each checked and recorded) and the invariants checked after every step."""

from __future__ import annotations

import functools
import json
import sys
import traceback
import uuid
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import grpc
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant

from ctxwarden.v1 import context_service_pb2 as pb
from ctxwarden.v1 import message_pb2 as m
from tests.model import checks
from tests.model.background import BackgroundWatch
from tests.model.cache_model import CacheModel
from tests.model.harness import Harness, Stub
from tests.model.reference import Ref

F = TypeVar("F", bound=Callable[..., Any])
PICK = st.integers(0, 10**6)
WORDS = st.text("abcdefgh ", min_size=1, max_size=40)
STATS: Counter[str] = Counter()
"""Steps and invariant checks run, across every example (printed by the test)."""


def logged(step: F) -> F:
    """Print a failing step's error at once: hypothesis reports only the last run, and a
    failure that does not repeat (a race) would otherwise leave no trace."""

    @functools.wraps(step)
    def run(*args: Any, **kwargs: Any) -> Any:
        try:
            return step(*args, **kwargs)
        except Exception:
            print(f"\nmodel test: {step.__name__}{kwargs} failed:", file=sys.stderr)
            traceback.print_exc(file=sys.stderr)
            raise

    return run  # type: ignore[return-value]


def new_id() -> str:
    return uuid.uuid4().hex


class Base(RuleBasedStateMachine):
    harness: Harness
    tmp: Path

    def __init__(self) -> None:
        super().__init__()
        self.refs: dict[str, Ref] = {}
        self.deleted: set[str] = set()
        self.aged: set[str] = set()
        """Archived sessions past the purge rule, kept while forks read from them."""
        self.touched: str = ""
        self.users = [f"u-{new_id()[:8]}" for _ in range(2)]
        """Two users of this example's own (memories outlive an example in the database)."""
        self.run = f"r-{new_id()[:8]}"
        """This example's label (the database outlives an example)."""
        self.cache = CacheModel()
        self.watch = BackgroundWatch()
        """Sessions the servers may compact on their own (background.py)."""
        self.compactions = self.harness.settle()
        """Background compactions each replica committed, as last seen (the replicas
        serve every example of a run)."""

    # -- helpers --------------------------------------------------------------------------

    @property
    def stub(self) -> Stub:
        return self.harness.stub()

    @property
    def replica(self) -> int:
        """The replica that served the last call."""
        return self.harness.last

    def live(self) -> list[Ref]:
        return [r for r in self.refs.values() if r.sid not in self.deleted]

    def writable(self) -> list[Ref]:
        return [r for r in self.live() if not r.archived]

    def pick(self, refs: list[Ref], n: int) -> Ref:
        ref = refs[n % len(refs)]
        self.touched = ref.sid
        STATS["steps"] += 1
        return ref

    def usage_problems(self, ref: Ref) -> list[str]:
        """GetUsage's usage ledger and cache ledger against the models'."""
        self.after_growth(ref.sid)
        report = self.stub.GetUsage(pb.GetUsageRequest(session_id=ref.sid))
        problems = checks.ledger_problems(report, ref.usage)
        problems += self.cache.reported(self.replica, ref.sid).problems(report.cache)
        STATS["cache ledgers compared"] += 1
        return problems

    def build(
        self,
        sid: str,
        *,
        settle: bool = True,
        replica: int | None = None,
        report: bool | None = None,
        **kw: Any,
    ) -> pb.ModelInput:
        """BuildModelInput, with report_cache_prefix three times in four; a live input's
        cache report (or, without one, what the ledger counts) is checked against the
        previous input of its replica and format. A live build of a watched session
        then waits for the background compaction it may have queued and, if one
        committed, is taken again (``settle``=False: the caller settles later, with
        ``after_growth``). ``replica`` and ``report``: on that replica, with or
        without the report (else drawn)."""
        live = "as_of_seq" not in kw
        if report is None:
            report = self.harness.rng.random() < 0.75
        req = pb.BuildModelInputRequest(
            session_id=sid, view=pb.MODEL_INPUT_VIEW_FULL, report_cache_prefix=report, **kw
        )
        stub = self.stub if replica is None else self.harness.stub_of(replica)
        mi = stub.BuildModelInput(req)
        if not live:
            assert not mi.HasField("cache_prefix"), "a replay carries a cache report"
            return mi
        r, latest = self.replica, self.cache.latest.get(sid)
        compacted = latest is not None and mi.compaction_id != latest.compaction_id
        if kw.get("auto_compact") and compacted:  # it compacted first: a write
            self.cache.wrote(r, sid, "compaction")
        if latest is not None and kw.get("refresh_memory"):
            block = (latest.memory_block, list(latest.memory_ids))
            if (mi.memory_block, list(mi.memory_ids)) != block:  # stored: a write
                self.cache.wrote(r, sid, "memory", ledger=False)
        problems = self.cache.built(r, sid, kw.get("format", 0), mi, report)
        assert not problems, problems
        STATS["cache prefixes checked" if report else "cache prefixes counted"] += 1
        if report and mi.cache_prefix.break_reason:
            name = pb.CacheBreakReason.Name(mi.cache_prefix.break_reason)
            STATS["cache breaks: " + name.removeprefix("CACHE_BREAK_REASON_").lower()] += 1
        if settle and self.compacted_meanwhile(sid):
            again = {k: v for k, v in kw.items() if k not in ("auto_compact", "refresh_memory")}
            return self.build(sid, **again)
        return mi

    def compacted_meanwhile(self, sid: str) -> bool:
        """Wait until no replica has a background compaction to come; whether one of
        ``sid`` committed (recorded as a write of the replica that compacted).

        Only appends and live builds queue one, on the replica that served them, and
        the model settles after each such call of a watched session before any other
        call that may grow a session: so a new checkpoint is the work of the replica
        that served the last call, which its metrics confirm (``Harness.settle``)."""
        if not self.watch.watches(sid):
            return False
        grower = self.replica
        done = self.harness.settle()
        rose = [
            i
            for i, (now, before) in enumerate(zip(done, self.compactions, strict=True))
            if now > before
        ]
        self.compactions = done
        fresh = self.watch.new(self.stub, sid)
        assert rose == ([grower] if fresh else []), (sid, grower, rose, fresh)
        if fresh:
            self.cache.wrote(grower, sid, "compaction")
            STATS["background compactions"] += len(fresh)
        return bool(fresh)

    def after_growth(self, sid: str) -> None:
        """After a call that may have queued a background compaction of ``sid``: if one
        committed, a build shows it (the model's latest input is the current one)."""
        if self.compacted_meanwhile(sid):
            self.build(sid)

    def append(self, ref: Ref, msgs: list[m.Message], **kw: Any) -> pb.AppendMessagesResponse:
        for msg in msgs:
            msg.message_id = msg.message_id or new_id()
        req = pb.AppendMessagesRequest(
            session_id=ref.sid, messages=msgs, request_id=new_id(), view=pb.MESSAGE_VIEW_FULL, **kw
        )
        return self.send(ref, req)

    def send(self, ref: Ref, req: pb.AppendMessagesRequest) -> pb.AppendMessagesResponse:
        self.before_append(ref)
        try:
            resp = self.stub.AppendMessages(req)
        except grpc.RpcError as err:
            if err.code() != grpc.StatusCode.RESOURCE_EXHAUSTED:
                raise
            STATS["quota refusals"] += 1
            ref.nothing_appended()
            return pb.AppendMessagesResponse()  # the quota held: nothing is stored
        self.record(ref, resp)
        ref.last_request = req
        return resp

    def before_append(self, ref: Ref) -> None:
        """Note what BuildModelInput returns right before an append: its replay."""
        ref.latest = checks.normalized(self.build(ref.sid))
        ref.before_append()

    def record(self, ref: Ref, resp: pb.AppendMessagesResponse, *, settle: bool = True) -> None:
        """An acknowledged append (a write on the replica that served it). ``settle``
        False: more answers of the same write follow (a streamed run), and the caller
        settles after the last (a background compaction the write queued comes after
        all of them)."""
        replica = self.replica
        for msg in resp.messages:
            ref.stored(msg)
        usages = [msg.usage for msg in resp.messages if msg.HasField("usage")]
        self.cache.wrote(replica, ref.sid, "append", usages)
        if settle:
            self.after_growth(ref.sid)

    # -- invariants -----------------------------------------------------------------------

    @invariant()
    @logged
    def touched_session_holds(self) -> None:
        if self.touched and self.touched not in self.deleted:
            self.check(self.refs[self.touched], replays=3)

    def check(self, ref: Ref, replays: int | None = None) -> None:
        """Every invariant of one session; ``replays`` limits the replayed seqs."""
        STATS["invariant checks"] += 1
        mi = self.build(ref.sid)
        problems = checks.view_problems(mi, ref.visible, set(ref.ids))
        for kind, fmt in checks.RENDERED.items():
            problems += checks.rendered_pairs(kind, self.build(ref.sid, format=fmt).rendered_json)
        problems += self.usage_problems(ref)
        assert not problems, problems
        ref.latest = checks.normalized(mi)
        seqs = sorted(ref.replays)
        if replays is not None:
            seqs = seqs[-replays:]
        for k in seqs:
            got = checks.normalized(self.build(ref.sid, as_of_seq=k))
            assert got == ref.replays[k], (
                f"replay of {ref.sid} at {k} differs:\n{checks.diff(ref.replays[k], got)}"
            )
            STATS["replays compared"] += 1
        self.check_stored(ref)

    def check_stored(self, ref: Ref) -> None:
        """Every acknowledged message is stored once, and nothing else is."""
        got: list[str] = []
        token = ""
        while True:
            page = self.stub.ListMessages(
                pb.ListMessagesRequest(
                    session_id=ref.sid, include_rolled_back=True, page_size=500, page_token=token
                )
            )
            got += [msg.message_id for msg in page.messages]
            token = page.next_page_token
            if not token:
                break
        assert sorted(got) == sorted(ref.ids), (ref.sid, len(got), len(ref.ids))
        session = self.stub.GetSession(pb.GetSessionRequest(session_id=ref.sid))
        state = json.loads(json.dumps(dict(session.state.items())))
        assert {k: v for k, v in state.items() if k in ref.state} == ref.state
        assert dict(session.labels) == ref.labels, (ref.sid, dict(session.labels), ref.labels)

    def teardown(self) -> None:
        for ref in self.live():
            self.check(ref)
