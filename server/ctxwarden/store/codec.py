"""Domain objects <-> row values.

Message bodies and revision settings are MessagePack: strings and bytes are
stored as they are, so the stored size is the content's size whatever the
characters (JSON escapes a control character as six bytes, a quote as two).
Rows written before schema 0006 hold JSON, which stays readable.
"""

from __future__ import annotations

import base64
import functools
import json
import sys
from typing import Any

import msgpack

from ctxwarden.core.memory import EMPTY_BLOCK, MemoryBlock
from ctxwarden.core.messages import (
    EMPTY_METADATA,
    ContentBlock,
    ContentKind,
    Message,
    MessageState,
    Role,
    StopReason,
    Usage,
    Visibility,
)
from ctxwarden.core.session import (
    ContextPolicy,
    Session,
    ToolDefinition,
    shared_tools,
)
from ctxwarden.core.state import decode_state, encode_state
from ctxwarden.core.tenancy import tenant_of
from ctxwarden.core.usage_ledger import UsageLedger, ledger_json, ledger_of_json
from ctxwarden.store.models import MessageRow, SessionRow


def compact_json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), sort_keys=True)


_TEXT, _IMAGE, _THINKING, _TOOL_CALL, _PROVIDER = 0, 1, 2, 3, 4


def _block_to_list(block: ContentBlock) -> list[Any]:
    k = block.kind
    if k is ContentKind.TEXT:
        return [_TEXT, block.text]
    if k is ContentKind.IMAGE:
        return [_IMAGE, block.mime_type, block.data]
    if k is ContentKind.THINKING:
        return [_THINKING, block.text, block.signature, block.redacted]
    if k is ContentKind.PROVIDER:
        return [_PROVIDER, block.family, block.provider_json]
    return [_TOOL_CALL, block.tool_call_id, block.tool_name, block.arguments_json]


def _block_from_list(b: list[Any]) -> ContentBlock:
    kind = b[0]
    if kind == _TEXT:
        return ContentBlock(ContentKind.TEXT, text=b[1])
    if kind == _IMAGE:
        return ContentBlock(ContentKind.IMAGE, mime_type=b[1], data=bytes(b[2]))
    if kind == _THINKING:
        return ContentBlock(ContentKind.THINKING, text=b[1], signature=b[2], redacted=b[3])
    if kind == _PROVIDER:
        return ContentBlock.of_provider(b[1], b[2])
    return ContentBlock(
        ContentKind.TOOL_CALL, tool_call_id=b[1], tool_name=b[2], arguments_json=b[3]
    )


def message_data(m: Message) -> bytes:
    """The stored body of a message (MessagePack)."""
    body: dict[str, Any] = {"c": [_block_to_list(b) for b in m.content]}
    for name in ("model", "provider", "error_message", "tool_call_id", "tool_name"):
        value = getattr(m, name)
        if value:
            body[name] = value
    if m.is_error:
        body["is_error"] = True
    if m.usage is not None:
        u = m.usage
        body["usage"] = [
            u.input_tokens,
            u.output_tokens,
            u.cache_read_tokens,
            u.cache_write_tokens,
            u.total_tokens,
        ]
        if u.reasoning_tokens:  # a sixth count only when reported: older rows stay as they were
            body["usage"].append(u.reasoning_tokens)
    if m.metadata:
        body["metadata"] = dict(sorted(m.metadata.items()))
    if m.history_only:
        body["v"] = int(m.visibility)
    data: bytes = msgpack.packb(body, use_bin_type=True)
    return data


MESSAGE_ROW_OVERHEAD = 64
"""Bytes charged per stored row on top of its body (keys, counters, times)."""


def message_row_values(session_id: str, m: Message) -> dict[str, Any]:
    calib = m.calibration
    return {
        "session_id": session_id,
        "seq": m.seq,
        "message_id": m.message_id,
        "role": int(m.role),
        "state": int(m.state),
        "stop_reason": int(m.stop_reason),
        "token_count": m.token_count,
        "counted_with": m.counted_with,
        "create_time_us": m.create_time_us,
        "rolled_back_at_seq": 0,
        "body": None,
        "data": message_data(m),
        "calib_ratio": None if calib is None else float(calib[0]),
        "calib_samples": None if calib is None else int(calib[1]),
    }


def stored_message_bytes(values: dict[str, Any]) -> int:
    """What a message row costs in storage (for limits and quotas)."""
    return len(values["data"]) + len(values["message_id"]) + MESSAGE_ROW_OVERHEAD


def _legacy_body(text: str) -> dict[str, Any]:
    """A pre-0006 JSON body in the MessagePack layout."""
    body: dict[str, Any] = json.loads(text)
    blocks = []
    for d in body.pop("content"):
        t = d["t"]
        if t == "text":
            blocks.append([_TEXT, d["text"]])
        elif t == "image":
            blocks.append([_IMAGE, d["mime_type"], base64.b64decode(d["data"])])
        elif t == "thinking":
            blocks.append([_THINKING, d["thinking"], d["signature"], d["redacted"]])
        else:
            blocks.append([_TOOL_CALL, d["id"], d["name"], d["arguments_json"]])
    body["c"] = blocks
    return body


def message_from_row(row: MessageRow | Any) -> Message:
    data = row.data
    body = msgpack.unpackb(data, raw=False) if data is not None else _legacy_body(row.body or "{}")
    usage = body.get("usage")
    ratio, samples = row.calib_ratio, row.calib_samples
    return Message(
        role=Role(row.role),
        content=tuple(_block_from_list(b) for b in body["c"]),
        seq=row.seq,
        message_id=row.message_id,
        stop_reason=StopReason(row.stop_reason),
        usage=Usage(*usage) if usage is not None else None,
        model=sys.intern(body.get("model", "")),
        provider=sys.intern(body.get("provider", "")),
        error_message=body.get("error_message", ""),
        tool_call_id=body.get("tool_call_id", ""),
        tool_name=sys.intern(body.get("tool_name", "")),
        is_error=body.get("is_error", False),
        state=MessageState(row.state),
        token_count=row.token_count,
        counted_with=sys.intern(row.counted_with),
        create_time_us=row.create_time_us,
        metadata=body.get("metadata") or EMPTY_METADATA,
        calibration=None if samples is None or ratio is None else (float(ratio), int(samples)),
        visibility=Visibility(body.get("v", Visibility.MODEL)),
    )


def _policy_json(p: ContextPolicy) -> str:
    d: dict[str, Any] = {
        "context_window": p.context_window,
        "reserve_tokens": p.reserve_tokens,
        "keep_recent_tokens": p.keep_recent_tokens,
        "tool_output_max_bytes": p.tool_output_max_bytes,
        "tool_output_max_lines": p.tool_output_max_lines,
        "tokenizer": p.tokenizer,
        "keep_tool_results": p.keep_tool_results,
        "background_compaction_percent": p.background_compaction_percent,
    }
    # Memory's and layered clearing's settings only when set: older rows and exports read the same.
    if p.clear_tool_results_at_least or p.clear_tool_results_keep:
        d["clear_tool_results_at_least"] = p.clear_tool_results_at_least
        d["clear_tool_results_keep"] = p.clear_tool_results_keep
    if p.memory_max_tokens:
        d["memory_max_tokens"] = p.memory_max_tokens
    if p.cache_lifetime_seconds:
        d["cache_lifetime_seconds"] = p.cache_lifetime_seconds
    if p.memory_write:
        d["memory_write"] = p.memory_write
    if p.preserve_lost_anchors:  # loss reports' re-injection (core.anchor_report)
        d["preserve_lost_anchors"] = p.preserve_lost_anchors
        d["preserve_lost_anchors_max_tokens"] = p.preserve_lost_anchors_max_tokens
    return compact_json(d)


def session_row_values(s: Session) -> dict[str, Any]:
    return {
        "session_id": s.session_id,
        "tenant_id": tenant_of(s.session_id),
        "user_id": s.user_id,
        "project_id": s.project_id,
        "title": s.title,
        "system_prompt": s.system_prompt,
        "tools_json": compact_json([[t.name, t.description, t.parameters_json] for t in s.tools]),
        "model": s.model,
        "policy_json": _policy_json(s.policy),
        "pinned_state": s.pinned_state,
        "labels_json": compact_json(dict(s.labels)),
        "last_seq": s.last_seq,
        "context_tokens": s.context_tokens,
        "revision": s.revision,
        "consecutive_failures": s.consecutive_failures,
        "create_time_us": s.create_time_us,
        "update_time_us": s.update_time_us,
        "delete_time_us": s.delete_time_us,
        "archive_time_us": s.archive_time_us,
        "calibration_json": calibration_json(s.estimate_ratio, s.estimate_samples),
        "state_json": encode_state(s.state) if s.state else None,
        "memory_json": memory_json(s.memory),
        "usage_json": ledger_json(s.usage),
        "version": s.version,
        "parent_key": s.parent_session_id,
        "parent_seq": s.parent_seq,
        "fork_seq": s.fork_seq,
    }


PROGRESS_COLUMNS = (
    "last_seq",
    "version",
    "context_tokens",
    "update_time_us",
    "consecutive_failures",
    "calibration_json",
    "usage_json",
)
"""The session-row columns every write that moves a session on sets (appends,
rollbacks, compactions); the session's settings are written by UpdateSession."""


def progress_values(s: Session) -> dict[str, Any]:
    """The new values of PROGRESS_COLUMNS for the session as the write leaves it:
    the one computation both write paths (group commit, records.advance) use."""
    return {
        "last_seq": s.last_seq,
        "version": s.version,
        "context_tokens": s.context_tokens,
        "update_time_us": s.update_time_us,
        "consecutive_failures": s.consecutive_failures,
        "calibration_json": calibration_json(s.estimate_ratio, s.estimate_samples),
        "usage_json": _ledger_json(s.usage),
    }


_LEDGER_TEXTS: dict[int, tuple[UsageLedger, str | None]] = {}
"""ledger_json of recently written ledgers, by identity (an append without
usage leaves the session's ledger object as it was); holds each ledger it
names, so an id is not reused while it is here."""


def _ledger_json(ledger: UsageLedger) -> str | None:
    hit = _LEDGER_TEXTS.get(id(ledger))
    if hit is not None and hit[0] is ledger:
        return hit[1]
    text = ledger_json(ledger)
    if len(_LEDGER_TEXTS) >= 4096:
        _LEDGER_TEXTS.clear()
    _LEDGER_TEXTS[id(ledger)] = (ledger, text)
    return text


@functools.lru_cache(maxsize=4096, typed=True)
def calibration_json(ratio: float, samples: int) -> str:
    return compact_json({"n": samples, "r": ratio})


SETTINGS_FIELDS = (
    "user_id",
    "project_id",
    "title",
    "system_prompt",
    "tools_json",
    "model",
    "policy_json",
    "pinned_state",
    "labels_json",
    "calibration_json",
)


def settings_data(s: Session) -> bytes:
    """The replay-relevant settings of a session revision (MessagePack)."""
    values = session_row_values(s)
    data: bytes = msgpack.packb({k: values[k] for k in SETTINGS_FIELDS}, use_bin_type=True)
    return data


REVISION_OVERHEAD = 64


def revision_bytes(s: Session) -> int:
    """What storing one settings revision of ``s`` costs (the session row holds
    the same settings once more, charged with its first revision)."""
    return len(settings_data(s)) + REVISION_OVERHEAD


def session_with_settings(base: Session, data: bytes | None, legacy_json: str | None) -> Session:
    """``base`` with the settings of a stored revision (none stored: base's)."""
    if data is not None:
        values = msgpack.unpackb(data, raw=False)
    else:
        values = json.loads(legacy_json or "{}")
    if not values:
        return base
    row = dict(session_row_values(base))
    row.update(values)
    return session_from_row(_Row(row))


class _Row:
    def __init__(self, values: dict[str, Any]) -> None:
        self.__dict__.update(values)


def session_from_row(row: SessionRow | Any) -> Session:
    return Session(
        session_id=row.session_id,
        user_id=row.user_id,
        project_id=row.project_id,
        title=row.title,
        system_prompt=sys.intern(row.system_prompt),
        tools=shared_tools(
            tuple(
                ToolDefinition(name, sys.intern(description), sys.intern(parameters))
                for name, description, parameters in json.loads(row.tools_json)
            )
        ),
        model=row.model,
        policy=ContextPolicy(**json.loads(row.policy_json)),
        pinned_state=row.pinned_state,
        labels=json.loads(row.labels_json),
        last_seq=row.last_seq,
        context_tokens=row.context_tokens,
        revision=row.revision,
        consecutive_failures=row.consecutive_failures,
        create_time_us=row.create_time_us,
        update_time_us=row.update_time_us,
        delete_time_us=row.delete_time_us,
        archive_time_us=getattr(row, "archive_time_us", 0) or 0,
        version=getattr(row, "version", 0),
        state=decode_state(getattr(row, "state_json", None)),
        parent_session_id=getattr(row, "parent_key", ""),
        parent_seq=getattr(row, "parent_seq", 0),
        fork_seq=getattr(row, "fork_seq", 0),
        memory=memory_block(getattr(row, "memory_json", None)),
        usage=ledger_of_json(getattr(row, "usage_json", None)),
        **_calibration(getattr(row, "calibration_json", "")),
    )


def memory_json(block: MemoryBlock) -> str | None:
    """The frozen memory block as stored in sessions.memory_json (NULL: none)."""
    if not block:
        return None
    return compact_json({"text": block.text, "ids": list(block.memory_ids)})


def memory_block(text: str | None) -> MemoryBlock:
    if not text:
        return EMPTY_BLOCK
    value = json.loads(text)
    return MemoryBlock(str(value["text"]), tuple(str(i) for i in value["ids"]))


def _calibration(text: str) -> dict[str, Any]:
    if not text:
        return {}
    value = json.loads(text)
    return {"estimate_ratio": float(value["r"]), "estimate_samples": int(value["n"])}
