"""The invariants of the whole-API model test, each a function over what the server returned.

Kept apart from the state machine so that a shrunk example can be replayed as a plain
regression test with the same checks."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

from ctxwarden.v1 import context_service_pb2 as pb
from ctxwarden.v1 import message_pb2 as m

RENDERED = {
    "openai_chat": pb.MODEL_INPUT_FORMAT_OPENAI_CHAT,
    "openai_responses": pb.MODEL_INPUT_FORMAT_OPENAI_RESPONSES,
    "anthropic": pb.MODEL_INPUT_FORMAT_ANTHROPIC_MESSAGES,
    "gemini": pb.MODEL_INPUT_FORMAT_GEMINI,
}
SUMMARY_KEY = "ctxwarden.summary"
MEMORY_KEY = "ctxwarden.memory"


def normalized(mi: pb.ModelInput) -> bytes:
    """A ModelInput without what names the session, a checkpoint row or a moment: two
    sessions that lived the same life (a fork and its source's replay, an import and its
    export) compare equal."""
    out = pb.ModelInput()
    out.CopyFrom(mi)
    out.session_id = out.resume_token = out.compaction_id = ""
    out.ClearField("cache_prefix")  # what it shares with the call before: not its state
    for msg in out.messages:
        msg.ClearField("create_time")
        msg.metadata.pop(SUMMARY_KEY, None)
    return out.SerializeToString(deterministic=True)


def diff(want: bytes, got: bytes) -> str:
    """Two normalized inputs side by side, as text, for an assertion message."""
    import difflib

    from google.protobuf import text_format

    def lines(data: bytes) -> list[str]:
        return text_format.MessageToString(pb.ModelInput.FromString(data)).splitlines()

    return "\n".join(difflib.unified_diff(lines(want), lines(got), "expected", "got", lineterm=""))


def native_pairs(messages: list[m.Message]) -> list[str]:
    """Every tool call of the view is answered by exactly one result right after its
    assistant message, and every result answers a call of that message."""
    problems: list[str] = []
    waiting: Counter[str] = Counter()
    for msg in messages:
        if msg.role == m.ROLE_TOOL_RESULT:
            if waiting[msg.tool_call_id] != 1:
                problems.append(f"orphan result {msg.tool_call_id} at seq {msg.seq}")
            waiting[msg.tool_call_id] -= 1
            continue
        if +waiting:
            problems.append(f"calls {sorted(+waiting)} unanswered before seq {msg.seq}")
        waiting = Counter(
            b.tool_call.id for b in msg.content if b.WhichOneof("block") == "tool_call"
        )
    if +waiting:
        problems.append(f"calls {sorted(+waiting)} unanswered at the end")
    return problems


def _balanced(calls: list[str], results: list[str], where: str) -> list[str]:
    if Counter(calls) == Counter(results) and all(c == 1 for c in Counter(calls).values()):
        return []
    return [f"{where}: calls {sorted(calls)} vs results {sorted(results)}"]


def rendered_pairs(kind: str, rendered_json: str) -> list[str]:
    """The same pairing, in a provider's wire form."""
    doc: Any = json.loads(rendered_json)
    calls: list[str] = []
    results: list[str] = []
    if kind == "openai_chat":
        for msg in doc["messages"]:
            calls += [c["id"] for c in msg.get("tool_calls") or []]
            if msg["role"] == "tool":
                results.append(msg["tool_call_id"])
    elif kind == "openai_responses":
        for item in doc["input"]:
            if item.get("type") == "function_call":
                calls.append(item["call_id"])
            elif item.get("type") == "function_call_output":
                results.append(item["call_id"])
    elif kind == "anthropic":
        for msg in doc["messages"]:
            for block in msg["content"] if isinstance(msg["content"], list) else []:
                if block["type"] == "tool_use":
                    calls.append(block["id"])
                elif block["type"] == "tool_result":
                    results.append(block["tool_use_id"])
    else:
        for content in doc["contents"]:
            for part in content["parts"]:
                if "functionCall" in part:
                    calls.append(part["functionCall"].get("id") or part["functionCall"]["name"])
                elif "functionResponse" in part:
                    resp = part["functionResponse"]
                    results.append(resp.get("id") or resp["name"])
    return _balanced(calls, results, kind)


def view_problems(mi: pb.ModelInput, visible: list[str], known: set[str]) -> list[str]:
    """The view shows the visible messages only (no failed, rolled-back or history-only
    one), in order, each once, as a tail of the session's visible messages: what a
    compaction cut is replaced by the summary, never a hole in the middle."""
    problems = native_pairs(list(mi.messages))
    shown = []
    for msg in mi.messages:
        if msg.message_id in known:
            shown.append(msg.message_id)
        elif SUMMARY_KEY in msg.metadata or MEMORY_KEY in msg.metadata:
            continue  # the checkpoint's summary, the session's memory block
        elif msg.role == m.ROLE_TOOL_RESULT and not msg.message_id:
            continue  # a synthetic result for a call still waiting for its own
        else:
            problems.append(f"unknown message in the view: {msg.message_id!r} role {msg.role}")
    hidden = [i for i in shown if i not in visible]
    if hidden:
        problems.append(f"failed, rolled-back or history-only messages in the view: {hidden}")
    elif shown != visible[len(visible) - len(shown) :]:
        problems.append(f"the view {shown} is not a tail of the visible messages {visible}")
    return problems


def ledger_problems(report: pb.UsageReport, agent: list[int]) -> list[str]:
    """GetUsage's totals are the sum of the usage of the messages stored (each once),
    and the summariser's calls (none with the extractive summariser) are apart."""
    t = report.total
    got = [t.calls, t.input_tokens, t.cache_read_tokens, t.cache_write_tokens]
    got += [t.output_tokens, t.reasoning_tokens]
    problems = [] if got == agent else [f"usage totals {got} != stored messages' {agent}"]
    if report.summarizer.calls:
        problems.append(f"the extractive summariser reported {report.summarizer.calls} calls")
    return problems
