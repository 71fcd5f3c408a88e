"""Rules that write messages: plain, streamed and idempotently retried appends (with
``state_delta``, usage, failed turns and history-only messages), tool calls answered in
any order, and ``AppendModelOutput`` in all four formats."""

from __future__ import annotations

import json
from typing import Any

from google.protobuf import struct_pb2
from hypothesis import strategies as st
from hypothesis.stateful import precondition, rule

from ctxwarden.v1 import context_service_pb2 as pb
from ctxwarden.v1 import message_pb2 as m
from tests.core.ingest import sdk_fixtures as sdk
from tests.model import checks
from tests.model.base import PICK, STATS, WORDS, Base, logged, new_id
from tests.support.builders import assistant, failed, result, user


class MessageRules(Base):
    @precondition(lambda self: self.writable())
    @rule(n=PICK, kind=st.sampled_from(["user", "assistant", "failed", "history"]), text=WORDS)
    @logged
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
    @logged
    def call_tools(self, n: int, calls: int) -> None:
        ref = self.pick(self.writable(), n)
        batch = [(f"call_{new_id()[:8]}", "read", {"path": f"f{i}.py"}) for i in range(calls)]
        self.append(ref, [assistant("calling", calls=batch)])

    @precondition(lambda self: any(r.open_calls for r in self.writable()))
    @rule(n=PICK, which=PICK, big=st.booleans())
    @logged
    def answer_call(self, n: int, which: int, big: bool) -> None:
        ref = self.pick([r for r in self.writable() if r.open_calls], n)
        call = ref.open_calls[which % len(ref.open_calls)]
        body = ("line of output\n" * 400) if big else f"result of {call}"
        self.append(ref, [result(call, body, name="read")])

    @precondition(lambda self: self.writable())
    @rule(n=PICK, count=st.integers(1, 4))
    @logged
    def stream(self, n: int, count: int) -> None:
        """Requests one per stream, or (odd ``n``: no draw of its own, which would
        change every fixed example) all sent at once on one stream, which the
        server writes as one run; then a run may carry one request twice. One odd
        ``n`` in three: the client goes away after half the answers (``abandon_stream``)."""
        if n % 6 == 5:  # odd, no resend: a client that goes away after half the answers
            self.abandon_stream(n, count, count // 2)
            return
        ref = self.pick(self.writable(), n)
        together = n % 2 == 1
        reqs = _requests(ref.sid, "streamed", count, keyed=together)
        if not together:
            for req in reqs:
                self.before_append(ref)
                (resp,) = self.stub.StreamMessages(iter([req]))
                self.record(ref, resp)
            return
        if n % 3 == 0:
            reqs.insert(count // 2 + 1, reqs[0])  # a resend within the run
        self.before_append(ref)
        answers = list(self.stub.StreamMessages(iter(reqs)))
        assert len(answers) == len(reqs)
        later: list[int] = []
        for i, (req, resp) in enumerate(zip(reqs, answers, strict=True)):
            if i > 0 and req is reqs[0]:
                # Its message_id is stored: it answers with the stored message (and
                # the session's last_seq now, as any resend found by message_id).
                assert list(resp.messages) == list(answers[0].messages)
                assert resp.last_seq == answers[i - 1].last_seq
                STATS["resends in a streamed run"] += 1
                continue
            if i > 0:  # what a fork at this seq inherits (its replay is read below)
                k = ref.last_seq + 1
                later.append(k)
                ref.visible_at[k], ref.labels_at[k] = list(ref.visible), dict(ref.labels)
            self.record(ref, resp, settle=False)
        # The run was one write, answered after it: what it queued (a background
        # compaction) came after every answer.
        self.after_growth(ref.sid)
        for k in later:
            ref.replays[k] = checks.normalized(self.build(ref.sid, as_of_seq=k))
        STATS["streamed runs"] += 1

    @logged
    def abandon_stream(self, n: int, count: int, read: int) -> None:
        """A client that goes away in the middle of a stream: it sends ``count``
        requests at once, reads ``read`` answers and cancels. Every answered request
        is stored, any other the server went on to store is stored whole and in order,
        and what the server says next is what it stored (a write it left in flight is
        waited for, not raced). Drawn as a kind of ``stream`` (a rule of its own
        would change every fixed example); the written scenarios call it directly."""
        ref = self.pick(self.writable(), n)
        reqs = _requests(ref.sid, "abandoned", count, keyed=True)
        self.before_append(ref)
        call = self.stub.StreamMessages(iter(reqs))
        r = self.replica
        answers = [next(call) for _ in range(min(read, count))]
        call.cancel()
        self.harness.finished(r, "StreamMessages")
        stub = self.harness.stub_of(r)
        stub.GetSession(pb.GetSessionRequest(session_id=ref.sid))  # after the write settled
        listed = stub.ListMessages(
            pb.ListMessagesRequest(session_id=ref.sid, after_seq=ref.last_seq, page_size=100)
        ).messages
        sent = [req.messages[0].message_id for req in reqs]
        assert [msg.message_id for msg in listed] == sent[: len(listed)], "not the first sent"
        assert len(listed) >= len(answers), "an answered request is missing"
        assert [a.messages[0].seq for a in answers] == [msg.seq for msg in listed[: len(answers)]]
        if not listed:
            ref.nothing_appended()
        later: list[int] = []
        for i, msg in enumerate(listed):
            if i > 0:
                k = ref.last_seq + 1
                later.append(k)
                ref.visible_at[k], ref.labels_at[k] = list(ref.visible), dict(ref.labels)
            self.record(ref, pb.AppendMessagesResponse(messages=[msg]), settle=False)
        compacted = self.compacted_meanwhile(ref.sid)
        uncertain = self.cache.maybe_dropped(r, ref.sid)
        if uncertain:  # did the replica keep its copy? This build's report tells.
            self.build(ref.sid, settle=False, replica=r, report=True, format=uncertain[0])
            self.after_growth(ref.sid)  # a live build may queue a background compaction
        elif compacted:
            self.build(ref.sid)
        for k in later:
            ref.replays[k] = checks.normalized(self.build(ref.sid, as_of_seq=k))
        STATS["abandoned streams"] += 1
        STATS["abandoned requests stored"] += len(listed)

    @precondition(lambda self: any(r.last_request for r in self.writable()))
    @rule(n=PICK)
    @logged
    def retry_last_append(self, n: int) -> None:
        """A retry with the same request_id applies once and answers as the first time."""
        ref = self.pick([r for r in self.writable() if r.last_request], n)
        assert ref.last_request is not None
        before = list(ref.ids)
        self.stub.AppendMessages(ref.last_request)
        assert ref.ids == before
        assert not self.usage_problems(ref)
        STATS["idempotent retries"] += 1

    @precondition(lambda self: self.writable())
    @rule(n=PICK, fmt=st.sampled_from(sorted(checks.RENDERED)), tool=st.booleans())
    @logged
    def model_output(self, n: int, fmt: str, tool: bool) -> None:
        ref = self.pick(self.writable(), n)
        if ref.open_calls:
            return  # a provider answers only a request whose calls are all answered
        call_id = f"call_{new_id()[:8]}"
        body = provider_body(fmt, call_id if tool else "", f"answer {n}")
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


def provider_body(fmt: str, call_id: str, text: str) -> str:
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


def _requests(sid: str, text: str, count: int, *, keyed: bool) -> list[pb.AppendMessagesRequest]:
    """``count`` one-message requests, user and assistant in turn (with a request_id
    each when ``keyed``)."""
    reqs = []
    for i in range(count):
        msg = user(f"{text} {i}") if i % 2 == 0 else assistant(f"{text} {i}")
        msg.message_id = new_id()
        reqs.append(
            pb.AppendMessagesRequest(
                session_id=sid,
                messages=[msg],
                view=pb.MESSAGE_VIEW_FULL,
                request_id=new_id() if keyed else "",
            )
        )
    return reqs
