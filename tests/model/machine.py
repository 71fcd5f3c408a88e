"""A model-based test of the whole API: hypothesis drives every RPC at random against real
servers, interleaved, and checks the reference model (``reference.Ref``) after every step.

Rules: plain, streamed and idempotently retried appends, ``AppendModelOutput`` in all four
formats, tool calls answered in any order, failed turns, rollbacks (plain and ``to_seq``),
agent-side and server compactions with layered clearing, forks of forks, ``state_delta``,
history-only messages, memory writes and refreshes, archive/unarchive, export -> import,
delete and purge, restarts of every replica. Invariants (``checks.py``): no orphan tool call
or result in the view or any rendering; no failed, rolled-back or history-only message in
the view; replay at every seq equals what was returned then; a fork equals its source's
replay at the fork point and never leaks either way; what a provider sent survives
rendering back to it; export -> import and restart are byte-identical; every acknowledged
append is stored exactly once; the tenant quota holds (a refused append leaves no trace);
the usage ledger is the sum of the usage of the messages stored, unchanged by a retry."""

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
from google.protobuf import struct_pb2
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from ctxwarden.v1 import context_service_pb2 as pb
from ctxwarden.v1 import memory_pb2 as mem
from ctxwarden.v1 import message_pb2 as m
from ctxwarden.v1 import session_pb2 as ses
from tests.core.ingest import sdk_fixtures as sdk
from tests.model import checks
from tests.model.harness import Harness, Stub
from tests.model.reference import Ref
from tests.support.builders import assistant, failed, result, user

F = TypeVar("F", bound=Callable[..., Any])
PICK = st.integers(0, 10**6)
WORDS = st.text("abcdefgh ", min_size=1, max_size=40)
STATS: Counter[str] = Counter()
"""Steps and invariant checks run, across every example (printed by the test)."""


def _logged(step: F) -> F:
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


def _id() -> str:
    return uuid.uuid4().hex


class WholeApi(RuleBasedStateMachine):
    harness: Harness
    tmp: Path

    def __init__(self) -> None:
        super().__init__()
        self.refs: dict[str, Ref] = {}
        self.deleted: set[str] = set()
        self.touched: str = ""
        self.users = [f"u-{_id()[:8]}" for _ in range(2)]
        """Two users of this example's own (memories outlive an example in the database)."""

    # -- helpers --------------------------------------------------------------------------

    @property
    def stub(self) -> Stub:
        return self.harness.stub()

    def live(self) -> list[Ref]:
        return [r for r in self.refs.values() if r.sid not in self.deleted]

    def writable(self) -> list[Ref]:
        return [r for r in self.live() if not r.archived]

    def pick(self, refs: list[Ref], n: int) -> Ref:
        ref = refs[n % len(refs)]
        self.touched = ref.sid
        STATS["steps"] += 1
        return ref

    def usage(self, sid: str) -> pb.UsageReport:
        return self.stub.GetUsage(pb.GetUsageRequest(session_id=sid))

    def build(self, sid: str, **kw: Any) -> pb.ModelInput:
        return self.stub.BuildModelInput(pb.BuildModelInputRequest(session_id=sid, **kw))

    def append(self, ref: Ref, msgs: list[m.Message], **kw: Any) -> pb.AppendMessagesResponse:
        for msg in msgs:
            msg.message_id = msg.message_id or _id()
        req = pb.AppendMessagesRequest(
            session_id=ref.sid, messages=msgs, request_id=_id(), view=pb.MESSAGE_VIEW_FULL, **kw
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
            return pb.AppendMessagesResponse()  # the quota held: nothing is stored
        self.record(ref, resp)
        ref.last_request = req
        return resp

    def before_append(self, ref: Ref) -> None:
        """Note what BuildModelInput returns right before an append: its replay."""
        ref.latest = checks.normalized(self.build(ref.sid))
        ref.before_append()

    def record(self, ref: Ref, resp: pb.AppendMessagesResponse) -> None:
        for msg in resp.messages:
            ref.stored(msg)

    # -- sessions -------------------------------------------------------------------------

    @rule(memory=st.booleans(), clearing=st.booleans())
    @_logged
    def create_session(self, memory: bool, clearing: bool) -> None:
        STATS["steps"] += 1
        user_id = self.users[len(self.refs) % 2]
        policy = ses.ContextPolicy(
            tokenizer="heuristic",
            context_window=4000,
            keep_recent_tokens=60,
            memory_max_tokens=120 if memory else 0,
            clear_tool_results_at_least=40 if clearing else 0,
        )
        tools = [ses.ToolDefinition(name="read", description="Read", parameters_json="{}")]
        session = self.stub.CreateSession(
            pb.CreateSessionRequest(
                session_id=f"m-{_id()[:12]}",
                session=ses.Session(
                    system_prompt="Model test.",
                    model="gpt-4o",
                    policy=policy,
                    tools=tools,
                    user_id=user_id,
                    title='it\'s a "title" \\ with quotes',
                ),
            )
        )
        self.refs[session.session_id] = Ref(sid=session.session_id, user_id=user_id)
        self.touched = session.session_id

    @precondition(lambda self: self.writable())
    @rule(n=PICK, kind=st.sampled_from(["user", "assistant", "failed", "history"]), text=WORDS)
    @_logged
    def append_one(self, n: int, kind: str, text: str) -> None:
        ref = self.pick(self.writable(), n)
        if kind == "user":
            msg = user(text)
        elif kind == "assistant":
            msg = assistant(text)
            msg.usage.CopyFrom(
                m.Usage(input_tokens=n % 97, cache_read_tokens=n % 13, output_tokens=9)
            )
        elif kind == "failed":
            msg = failed("500 internal error " + text)
        else:
            msg = user("history only " + text)
            msg.visibility = m.MESSAGE_VISIBILITY_HISTORY_ONLY
        delta = pb.StateDelta(session=struct_pb2.Struct())
        delta.session.update({"step": float(n % 7)})
        resp = self.append(ref, [msg], state_delta=delta)
        if resp.messages:
            ref.state["step"] = float(n % 7)

    @precondition(lambda self: self.writable())
    @rule(n=PICK, calls=st.integers(1, 3))
    @_logged
    def call_tools(self, n: int, calls: int) -> None:
        ref = self.pick(self.writable(), n)
        batch = [(f"call_{_id()[:8]}", "read", {"path": f"f{i}.py"}) for i in range(calls)]
        self.append(ref, [assistant("calling", calls=batch)])

    @precondition(lambda self: any(r.open_calls for r in self.writable()))
    @rule(n=PICK, which=PICK, big=st.booleans())
    @_logged
    def answer_call(self, n: int, which: int, big: bool) -> None:
        ref = self.pick([r for r in self.writable() if r.open_calls], n)
        call = ref.open_calls[which % len(ref.open_calls)]
        body = ("line of output\n" * 400) if big else f"result of {call}"
        self.append(ref, [result(call, body, name="read")])

    @precondition(lambda self: self.writable())
    @rule(n=PICK, count=st.integers(1, 4))
    @_logged
    def stream(self, n: int, count: int) -> None:
        ref = self.pick(self.writable(), n)
        reqs = []
        for i in range(count):
            msg = user(f"streamed {i}") if i % 2 == 0 else assistant(f"streamed {i}")
            msg.message_id = _id()
            reqs.append(
                pb.AppendMessagesRequest(
                    session_id=ref.sid, messages=[msg], view=pb.MESSAGE_VIEW_FULL
                )
            )
        for req in reqs:
            self.before_append(ref)
            (resp,) = self.stub.StreamMessages(iter([req]))
            self.record(ref, resp)

    @precondition(lambda self: any(r.last_request for r in self.writable()))
    @rule(n=PICK)
    @_logged
    def retry_last_append(self, n: int) -> None:
        """A retry with the same request_id applies once and answers as the first time."""
        ref = self.pick([r for r in self.writable() if r.last_request], n)
        assert ref.last_request is not None
        before = list(ref.ids)
        self.stub.AppendMessages(ref.last_request)
        assert ref.ids == before
        assert not checks.ledger_problems(self.usage(ref.sid), ref.usage)
        STATS["idempotent retries"] += 1

    @precondition(lambda self: self.writable())
    @rule(n=PICK, fmt=st.sampled_from(sorted(checks.RENDERED)), tool=st.booleans())
    @_logged
    def model_output(self, n: int, fmt: str, tool: bool) -> None:
        ref = self.pick(self.writable(), n)
        if ref.open_calls:
            return  # a provider answers only a request whose calls are all answered
        call_id = f"call_{_id()[:8]}"
        body = _provider_body(fmt, call_id if tool else "", f"answer {n}")
        self.before_append(ref)
        resp = self.stub.AppendModelOutput(
            pb.AppendModelOutputRequest(
                session_id=ref.sid,
                format=checks.RENDERED[fmt],
                response_json=body,
                view=pb.MESSAGE_VIEW_FULL,
            )
        )
        self.record(ref, resp)
        # What the provider sent survives rendering back to the same provider.
        rendered = self.build(ref.sid, format=checks.RENDERED[fmt]).rendered_json
        assert f"answer {n}" in rendered
        if tool:
            assert call_id in rendered or fmt == "gemini"
        STATS["render(ingest(x)) checks"] += 1

    # -- rollbacks and compactions --------------------------------------------------------

    @precondition(lambda self: self.writable())
    @rule(n=PICK, back=st.integers(0, 6), plain=st.booleans())
    @_logged
    def rollback(self, n: int, back: int, plain: bool) -> None:
        ref = self.pick(self.writable(), n)
        req = pb.RollbackTurnRequest(session_id=ref.sid)
        if not plain:
            if ref.last_seq == 0:
                return
            req.to_seq = max(1, ref.last_seq - back)
        try:
            resp = self.stub.RollbackTurn(req)
        except grpc.RpcError as err:
            if err.code() != grpc.StatusCode.FAILED_PRECONDITION:
                raise
            return  # nothing to roll back
        ref.rolled_back(list(resp.rolled_back_seqs))

    @precondition(lambda self: self.writable())
    @rule(n=PICK, keep=st.integers(0, 200), server=st.booleans())
    @_logged
    def compact(self, n: int, keep: int, server: bool) -> None:
        ref = self.pick(self.writable(), n)
        try:
            if server:
                self.stub.Compact(pb.CompactRequest(session_id=ref.sid, keep_recent_tokens=keep))
            else:
                plan = self.stub.PrepareCompaction(
                    pb.PrepareCompactionRequest(session_id=ref.sid, keep_recent_tokens=keep)
                )
                self.stub.CommitCompaction(
                    pb.CommitCompactionRequest(
                        session_id=ref.sid,
                        plan_id=plan.plan_id,
                        summary=f"summary {n}",
                        turn_prefix_summary="prefix" if plan.split_turn else "",
                    )
                )
        except grpc.RpcError as err:
            if err.code() != grpc.StatusCode.FAILED_PRECONDITION:
                raise
            return  # nothing to compact
        STATS["compactions"] += 1

    @precondition(lambda self: self.writable())
    @rule(n=PICK)
    @_logged
    def auto_compact(self, n: int) -> None:
        ref = self.pick(self.writable(), n)
        self.build(ref.sid, auto_compact=True, max_output_tokens=3900)

    # -- forks, memory, lifecycle, transfer ----------------------------------------------

    @precondition(lambda self: self.live())
    @rule(n=PICK, at=PICK)
    @_logged
    def fork(self, n: int, at: int) -> None:
        source = self.pick(self.live(), n)
        if source.archived:
            return
        k = 1 + at % (source.last_seq + 1)
        forked = self.stub.ForkSession(pb.ForkSessionRequest(session_id=source.sid, at_seq=k))
        child = source.fork(forked.session_id, k)
        got = checks.normalized(self.build(child.sid))
        assert got == child.latest, f"fork != replay:\n{checks.diff(child.latest, got)}"
        self.refs[child.sid] = child
        STATS["forks"] += 1

    @precondition(lambda self: self.live())
    @rule(n=PICK, text=WORDS, pinned=st.booleans())
    @_logged
    def write_memory(self, n: int, text: str, pinned: bool) -> None:
        ref = self.pick(self.live(), n)
        self.stub.CreateMemory(
            mem.CreateMemoryRequest(
                memory=mem.Memory(user_id=ref.user_id, text=f"remember {text}", pinned=pinned)
            )
        )

    @precondition(lambda self: self.writable())
    @rule(n=PICK)
    @_logged
    def refresh_memory(self, n: int) -> None:
        ref = self.pick(self.writable(), n)
        self.build(ref.sid, refresh_memory=True)

    @precondition(lambda self: self.live())
    @rule(n=PICK)
    @_logged
    def archive_toggle(self, n: int) -> None:
        ref = self.pick(self.live(), n)
        if ref.archived:
            self.stub.UnarchiveSession(pb.UnarchiveSessionRequest(session_id=ref.sid))
        else:
            self.stub.ArchiveSession(pb.ArchiveSessionRequest(session_id=ref.sid))
        ref.archived = not ref.archived

    @precondition(lambda self: self.live())
    @rule(n=PICK, roll=st.integers(0, 2))
    @_logged
    def export_import(self, n: int, roll: int) -> None:
        """(One draw in three: two CLI runs.)"""
        if roll:
            return
        ref = self.pick(self.live(), n)
        new_sid = f"i-{_id()[:12]}"
        self.harness.export_import(ref.sid, new_sid, self.tmp / f"{new_sid}.json")
        twin = ref.copy_as(new_sid)
        assert checks.normalized(self.build(new_sid)) == checks.normalized(self.build(ref.sid))
        self.refs[new_sid] = twin
        STATS["export -> import"] += 1

    @precondition(lambda self: len(self.live()) > 1)
    @rule(n=PICK, archived=st.booleans(), roll=st.integers(0, 2))
    @_logged
    def delete_and_purge(self, n: int, archived: bool, roll: int) -> None:
        """A session leaves (deleted, or archived) and the retention rules purge it; its
        forks and every other session are untouched. (One draw in three: a CLI run.)"""
        if roll:
            return
        ref = self.pick(self.live(), n)
        if archived:
            if not ref.archived:
                self.stub.ArchiveSession(pb.ArchiveSessionRequest(session_id=ref.sid))
            self.harness.age(ref.sid, "archive_time_us", 2)
        else:
            self.stub.DeleteSession(pb.DeleteSessionRequest(session_id=ref.sid))
            self.harness.age(ref.sid, "delete_time_us", 2)
        self.deleted.add(ref.sid)
        self.harness.purge()
        STATS["purges"] += 1
        self.touched = ""

    @rule(roll=st.integers(0, 5))
    @_logged
    def restart(self, roll: int) -> None:
        """Every replica restarts: each session comes back byte-identical. (One draw in six:
        a restart costs seconds.)"""
        if roll or not self.refs:
            return
        STATS["steps"] += 1
        before = {r.sid: self.build(r.sid).SerializeToString() for r in self.live()}
        self.harness.restart()
        for sid, data in before.items():
            after = self.build(sid)
            after.resume_token = ""
            was = pb.ModelInput.FromString(data)
            was.resume_token = ""
            assert after == was, f"{sid} differs after a restart"
        STATS["restarts"] += 1

    # -- invariants -----------------------------------------------------------------------

    @invariant()
    @_logged
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
        problems += checks.ledger_problems(self.usage(ref.sid), ref.usage)
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

    def teardown(self) -> None:
        for ref in self.live():
            self.check(ref)


def _provider_body(fmt: str, call_id: str, text: str) -> str:
    """One assistant turn as the provider's SDK types serialise it."""
    call = {"path": "a.py"}
    if fmt == "openai_chat":
        rendered: dict[str, Any] = {"content": text}
        if call_id:
            rendered["tool_calls"] = [
                {"id": call_id, "function": {"name": "read", "arguments": json.dumps(call)}}
            ]
        done = sdk.chat_completion(rendered, "tool_calls" if call_id else "stop")
        return json.dumps(sdk.dump(done))
    if fmt == "openai_responses":
        items: list[dict[str, Any]] = [{"role": "assistant", "content": text}]
        if call_id:
            items.append(
                {
                    "type": "function_call",
                    "call_id": call_id,
                    "name": "read",
                    "arguments": json.dumps(call),
                }
            )
        return json.dumps(sdk.dump(sdk.response(sdk.responses_output(items))))
    if fmt == "anthropic":
        blocks: list[dict[str, Any]] = [{"type": "text", "text": text}]
        if call_id:
            blocks.append({"type": "tool_use", "id": call_id, "name": "read", "input": call})
        message = sdk.anthropic_message(blocks, "tool_use" if call_id else "end_turn")
        return json.dumps(sdk.dump(message))
    parts = [sdk.gemini_part({"text": text})]
    if call_id:
        parts.append(
            sdk.gemini_part({"functionCall": {"id": call_id, "name": "read", "args": call}})
        )
    return json.dumps(sdk.dump_gemini(sdk.gemini_response(parts)))
