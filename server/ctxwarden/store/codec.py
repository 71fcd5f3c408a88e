"""Domain objects <-> row values (JSON bodies)."""

from __future__ import annotations

import base64
import json
import sys
from typing import Any

from ctxwarden.core.messages import (
    EMPTY_METADATA,
    ContentBlock,
    ContentKind,
    Message,
    MessageState,
    Role,
    StopReason,
    Usage,
)
from ctxwarden.core.session import Checkpoint, ContextPolicy, Session, ToolDefinition
from ctxwarden.core.tenancy import tenant_of
from ctxwarden.store.models import CompactionRow, MessageRow, SessionRow


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), sort_keys=True)


def _block_to_json(block: ContentBlock) -> dict[str, Any]:
    k = block.kind
    if k is ContentKind.TEXT:
        return {"t": "text", "text": block.text}
    if k is ContentKind.IMAGE:
        return {
            "t": "image",
            "mime_type": block.mime_type,
            "data": base64.b64encode(block.data).decode("ascii"),
        }
    if k is ContentKind.THINKING:
        return {
            "t": "thinking",
            "thinking": block.text,
            "signature": block.signature,
            "redacted": block.redacted,
        }
    return {
        "t": "tool_call",
        "id": block.tool_call_id,
        "name": block.tool_name,
        "arguments_json": block.arguments_json,
    }


def _block_from_json(d: dict[str, Any]) -> ContentBlock:
    t = d["t"]
    if t == "text":
        return ContentBlock(ContentKind.TEXT, text=d["text"])
    if t == "image":
        return ContentBlock(
            ContentKind.IMAGE, mime_type=d["mime_type"], data=base64.b64decode(d["data"])
        )
    if t == "thinking":
        return ContentBlock(
            ContentKind.THINKING,
            text=d["thinking"],
            signature=d["signature"],
            redacted=d["redacted"],
        )
    return ContentBlock(
        ContentKind.TOOL_CALL,
        tool_call_id=d["id"],
        tool_name=d["name"],
        arguments_json=d["arguments_json"],
    )


def message_body(m: Message) -> str:
    body: dict[str, Any] = {"content": [_block_to_json(b) for b in m.content]}
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
    if m.metadata:
        body["metadata"] = dict(m.metadata)
    if m.calibration is not None:
        body["calib"] = list(m.calibration)
    return _dumps(body)


def message_row_values(session_id: str, m: Message) -> dict[str, Any]:
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
        "body": message_body(m),
    }


def message_from_row(row: MessageRow | Any) -> Message:
    body = json.loads(row.body)
    usage = body.get("usage")
    return Message(
        role=Role(row.role),
        content=tuple(_block_from_json(b) for b in body["content"]),
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
        counted_with=row.counted_with,
        create_time_us=row.create_time_us,
        metadata=body.get("metadata") or EMPTY_METADATA,
        calibration=(float(body["calib"][0]), int(body["calib"][1])) if "calib" in body else None,
    )


def _policy_json(p: ContextPolicy) -> str:
    return _dumps(
        {
            "context_window": p.context_window,
            "reserve_tokens": p.reserve_tokens,
            "keep_recent_tokens": p.keep_recent_tokens,
            "tool_output_max_bytes": p.tool_output_max_bytes,
            "tool_output_max_lines": p.tool_output_max_lines,
            "tokenizer": p.tokenizer,
            "keep_tool_results": p.keep_tool_results,
        }
    )


def session_row_values(s: Session) -> dict[str, Any]:
    return {
        "session_id": s.session_id,
        "tenant_id": tenant_of(s.session_id),
        "user_id": s.user_id,
        "project_id": s.project_id,
        "title": s.title,
        "system_prompt": s.system_prompt,
        "tools_json": _dumps([[t.name, t.description, t.parameters_json] for t in s.tools]),
        "model": s.model,
        "policy_json": _policy_json(s.policy),
        "pinned_state": s.pinned_state,
        "labels_json": _dumps(dict(s.labels)),
        "last_seq": s.last_seq,
        "context_tokens": s.context_tokens,
        "revision": s.revision,
        "consecutive_failures": s.consecutive_failures,
        "create_time_us": s.create_time_us,
        "update_time_us": s.update_time_us,
        "delete_time_us": s.delete_time_us,
        "calibration_json": calibration_json(s.estimate_ratio, s.estimate_samples),
    }


def calibration_json(ratio: float, samples: int) -> str:
    return _dumps({"n": samples, "r": ratio})


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


def settings_json(s: Session) -> str:
    """The replay-relevant settings of a session revision."""
    values = session_row_values(s)
    return _dumps({k: values[k] for k in SETTINGS_FIELDS})


def session_with_settings(base: Session, settings: str) -> Session:
    """``base`` with the settings of a stored revision ("{}" keeps base's)."""
    values = json.loads(settings)
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
        tools=tuple(
            ToolDefinition(name, sys.intern(description), sys.intern(parameters))
            for name, description, parameters in json.loads(row.tools_json)
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
        **_calibration(getattr(row, "calibration_json", "")),
    )


def _calibration(text: str) -> dict[str, Any]:
    if not text:
        return {}
    value = json.loads(text)
    return {"estimate_ratio": float(value["r"]), "estimate_samples": int(value["n"])}


def checkpoint_details(c: Checkpoint) -> str:
    return _dumps(
        {
            "turn_prefix_summary": c.turn_prefix_summary,
            "split_turn": c.split_turn,
            "read_files": list(c.read_files),
            "modified_files": list(c.modified_files),
            "summarizer": c.summarizer,
            "trigger": c.trigger,
        }
    )


def checkpoint_row_values(c: Checkpoint) -> dict[str, Any]:
    return {
        "compaction_id": c.compaction_id,
        "session_id": c.session_id,
        "summary": c.summary,
        "first_kept_seq": c.first_kept_seq,
        "tokens_before": c.tokens_before,
        "tokens_after": c.tokens_after,
        "at_seq": c.at_seq,
        "superseded_at_seq": 0,
        "details_json": checkpoint_details(c),
        "created_at": c.create_time_us,
    }


def checkpoint_from_row(row: CompactionRow | Any) -> Checkpoint:
    d = json.loads(row.details_json or "{}")
    return Checkpoint(
        compaction_id=row.compaction_id,
        session_id=row.session_id,
        summary=row.summary,
        first_kept_seq=row.first_kept_seq,
        tokens_before=row.tokens_before,
        create_time_us=row.created_at,
        turn_prefix_summary=d.get("turn_prefix_summary", ""),
        tokens_after=row.tokens_after,
        split_turn=d.get("split_turn", False),
        read_files=tuple(d.get("read_files", ())),
        modified_files=tuple(d.get("modified_files", ())),
        summarizer=d.get("summarizer", ""),
        trigger=d.get("trigger", 1),
        at_seq=row.at_seq,
        superseded=row.superseded_at_seq != 0,
    )
