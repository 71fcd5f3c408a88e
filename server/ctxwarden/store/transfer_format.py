"""Stored rows <-> the records of a session export (``ctxwarden export``).

A record is a JSON object with a ``type``: ``session``, ``revision``,
``memory_block``, ``checkpoint`` or ``message``. Each holds every column of one
stored row, with the encoded columns decoded (settings and bodies as JSON
fields, bytes as base64), so that a record turns back into exactly the row it
came from: an import writes the same values and the session builds the same
model input. Keys (the tenant-scoped session key) are not part of a record; the
importer chooses them.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from typing import Any

import msgpack

from ctxwarden.core import messages as msg
from ctxwarden.core.tenancy import tenant_of, visible_id
from ctxwarden.store.codec import message_from_row, message_row_values

Record = dict[str, Any]


def compact_json(value: Any) -> str:
    """How the store encodes its JSON columns (compact, keys sorted)."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), sort_keys=True)


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.b64decode(text.encode("ascii"), validate=True)


# -- sessions ----------------------------------------------------------------

_SESSION_PLAIN = (
    "user_id",
    "project_id",
    "title",
    "system_prompt",
    "model",
    "pinned_state",
    "last_seq",
    "context_tokens",
    "revision",
    "consecutive_failures",
    "create_time_us",
    "update_time_us",
    "compaction_id",
    "stored_bytes",
    "version",
)


def session_record(row: Mapping[str, Any]) -> Record:
    calibration = json.loads(row["calibration_json"])
    state = row.get("state_json")
    return {
        "type": "session",
        "session_id": visible_id(row["session_id"]),
        "tenant": tenant_of(row["session_id"]),
        **{k: row[k] for k in _SESSION_PLAIN},
        "tools": [
            {"name": n, "description": d, "parameters_json": p}
            for n, d, p in json.loads(row["tools_json"])
        ],
        "policy": json.loads(row["policy_json"]),
        "labels": json.loads(row["labels_json"]),
        "calibration": {"ratio": calibration["r"], "samples": calibration["n"]},
        "state": json.loads(state) if state else {},
        **_memory(row.get("memory_json")),
        **_lineage(row),
        # The usage ledger (an optional key: only when something was reported).
        **({"usage": json.loads(row["usage_json"])} if row.get("usage_json") else {}),
    }


def _memory(value: str | None) -> Record:
    """The frozen memory block (only when the session has one: a session
    without exports as before)."""
    if not value:
        return {}
    block = json.loads(value)
    return {"memory": {"text": block["text"], "memory_ids": list(block["ids"])}}


def _memory_json(memory: Mapping[str, Any] | None) -> str | None:
    """A record's memory block as the store holds it (None: no block)."""
    if not memory or not memory.get("text"):
        return None
    return compact_json({"text": memory["text"], "ids": list(memory["memory_ids"])})


def _lineage(row: Mapping[str, Any]) -> Record:
    """A fork's lineage (where it was forked from; the file holds its whole
    history, so an import is a session of its own that only records this)."""
    parent = str(row.get("parent_key") or "")
    if not parent:
        return {}
    return {
        "lineage": {
            "parent_session_id": visible_id(parent).split("#", 1)[0],
            "parent_seq": int(row["parent_seq"]),
            "fork_seq": int(row["fork_seq"]),
        }
    }


def session_row(record: Mapping[str, Any], key: str) -> dict[str, Any]:
    calibration = record["calibration"]
    state = record.get("state") or {}
    return {
        "session_id": key,
        "tenant_id": tenant_of(key),
        **{k: record[k] for k in _SESSION_PLAIN},
        "tools_json": compact_json(
            [[t["name"], t["description"], t["parameters_json"]] for t in record["tools"]]
        ),
        "policy_json": compact_json(record["policy"]),
        "labels_json": compact_json(record["labels"]),
        "calibration_json": compact_json({"n": calibration["samples"], "r": calibration["ratio"]}),
        "state_json": compact_json(state) if state else None,
        "memory_json": _memory_json(record.get("memory")),
        "usage_json": compact_json(record["usage"]) if record.get("usage") else None,
        "delete_time_us": 0,
    }


# -- settings revisions ------------------------------------------------------


def revision_record(row: Mapping[str, Any]) -> Record:
    data = row["settings"]
    settings = msgpack.unpackb(data, raw=False) if data is not None else None
    if settings is None:
        settings = json.loads(row["settings_json"] or "{}")
    return {
        "type": "revision",
        "revision": row["revision"],
        "at_seq": row["at_seq"],
        "create_time_us": row["create_time_us"],
        "settings": settings,
    }


def revision_row(record: Mapping[str, Any], key: str) -> dict[str, Any]:
    settings: bytes = msgpack.packb(dict(record["settings"]), use_bin_type=True)
    return {
        "session_id": key,
        "revision": record["revision"],
        "at_seq": record["at_seq"],
        "create_time_us": record["create_time_us"],
        "settings_json": None,
        "settings": settings,
    }


# -- memory blocks -----------------------------------------------------------


def memory_block_record(row: Mapping[str, Any]) -> Record:
    """A block of the session's history, in force from ``from_seq`` on (an
    empty block: ``text`` "")."""
    value = row["memory_json"]
    block = json.loads(value) if value else {"text": "", "ids": []}
    return {
        "type": "memory_block",
        "from_seq": row["from_seq"],
        "create_time_us": row["create_time_us"],
        "text": block["text"],
        "memory_ids": list(block["ids"]),
    }


def memory_block_row(record: Mapping[str, Any], key: str) -> dict[str, Any]:
    return {
        "session_id": key,
        "from_seq": int(record["from_seq"]),
        "create_time_us": int(record["create_time_us"]),
        "memory_json": _memory_json(record),
    }


# -- checkpoints -------------------------------------------------------------


def checkpoint_record(row: Mapping[str, Any]) -> Record:
    return {
        "type": "checkpoint",
        # A fork's copy of an inherited checkpoint shows the original's ID.
        "compaction_id": row.get("origin_id") or row["compaction_id"],
        "summary": row["summary"],
        "first_kept_seq": row["first_kept_seq"],
        "tokens_before": row["tokens_before"],
        "tokens_after": row["tokens_after"],
        "at_seq": row["at_seq"],
        "superseded_at_seq": row["superseded_at_seq"],
        "create_time_us": row["created_at"],
        "details": json.loads(row["details_json"] or "{}"),
        **_loss_report(row.get("loss_report_json")),
    }


def _loss_report(text: str | None) -> Record:
    """The checkpoint's loss report, when it has one (an optional key)."""
    return {"loss_report": json.loads(text)} if text else {}


def checkpoint_row(record: Mapping[str, Any], key: str, compaction_id: str) -> dict[str, Any]:
    return {
        "compaction_id": compaction_id,
        "session_id": key,
        "summary": record["summary"],
        "first_kept_seq": record["first_kept_seq"],
        "tokens_before": record["tokens_before"],
        "tokens_after": record["tokens_after"],
        "at_seq": record["at_seq"],
        "superseded_at_seq": record["superseded_at_seq"],
        "created_at": record["create_time_us"],
        "details_json": compact_json(record["details"]),
        "loss_report_json": (
            compact_json(record["loss_report"]) if record.get("loss_report") else None
        ),
    }


# -- messages ----------------------------------------------------------------

ROLES = {
    msg.Role.USER: "user",
    msg.Role.ASSISTANT: "assistant",
    msg.Role.TOOL_RESULT: "tool_result",
}
STATES = {msg.MessageState.ACTIVE: "active", msg.MessageState.ROLLED_BACK: "rolled_back"}
VISIBILITIES = {msg.Visibility.MODEL: "model", msg.Visibility.HISTORY_ONLY: "history_only"}
STOP_REASONS = {
    msg.StopReason.UNSPECIFIED: "",
    msg.StopReason.STOP: "stop",
    msg.StopReason.LENGTH: "length",
    msg.StopReason.TOOL_USE: "tool_use",
    msg.StopReason.ERROR: "error",
    msg.StopReason.ABORTED: "aborted",
}


def _inverse(mapping: Mapping[Any, str]) -> dict[str, Any]:
    return {v: k for k, v in mapping.items()}


_ROLE_OF, _STATE_OF = _inverse(ROLES), _inverse(STATES)
_VISIBILITY_OF, _STOP_OF = _inverse(VISIBILITIES), _inverse(STOP_REASONS)


def block_record(b: msg.ContentBlock) -> Record:
    if b.kind is msg.ContentKind.TEXT:
        return {"type": "text", "text": b.text}
    if b.kind is msg.ContentKind.IMAGE:
        return {"type": "image", "mime_type": b.mime_type, "data": _b64(b.data)}
    if b.kind is msg.ContentKind.THINKING:
        return {
            "type": "thinking",
            "thinking": b.text,
            "signature": b.signature,
            "redacted": b.redacted,
        }
    if b.kind is msg.ContentKind.PROVIDER:
        return {"type": "provider", "family": b.family, "json": b.provider_json}
    return {
        "type": "tool_call",
        "id": b.tool_call_id,
        "name": b.tool_name,
        "arguments_json": b.arguments_json,
    }


def block_from_record(r: Mapping[str, Any]) -> msg.ContentBlock:
    kind = r["type"]
    if kind == "text":
        return msg.ContentBlock.of_text(r["text"])
    if kind == "image":
        return msg.ContentBlock(
            msg.ContentKind.IMAGE, mime_type=r["mime_type"], data=_unb64(r["data"])
        )
    if kind == "thinking":
        return msg.ContentBlock(
            msg.ContentKind.THINKING,
            text=r["thinking"],
            signature=r["signature"],
            redacted=r["redacted"],
        )
    if kind == "provider":
        return msg.ContentBlock.of_provider(r["family"], r["json"])
    if kind == "tool_call":
        return msg.ContentBlock.of_tool_call(r["id"], r["name"], r["arguments_json"])
    raise ValueError(f"unknown content block type {kind!r}")


_USAGE = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens")


def usage_record(u: msg.Usage) -> Record:
    """A usage as a record; ``reasoning_tokens`` only when reported (format 2
    files written before it was counted read back the same)."""
    out: Record = {**{k: getattr(u, k) for k in _USAGE}, "total_tokens": u.total_tokens}
    if u.reasoning_tokens:
        out["reasoning_tokens"] = u.reasoning_tokens
    return out


def usage_of(u: Mapping[str, Any]) -> msg.Usage:
    return msg.Usage(
        int(u["input_tokens"]),
        int(u["output_tokens"]),
        int(u["cache_read_tokens"]),
        int(u["cache_write_tokens"]),
        int(u["total_tokens"]),
        int(u.get("reasoning_tokens", 0)),
    )


def message_record_of(m: msg.Message, rolled_back_at_seq: int = 0) -> Record:
    """The record of a message (the domain value plus the row's rollback seq)."""
    u = m.usage
    return {
        "type": "message",
        "seq": m.seq,
        "message_id": m.message_id,
        "role": ROLES[m.role],
        "state": STATES[m.state],
        "visibility": VISIBILITIES[m.visibility],
        "content": [block_record(b) for b in m.content],
        "stop_reason": STOP_REASONS[m.stop_reason],
        "usage": None if u is None else usage_record(u),
        "model": m.model,
        "provider": m.provider,
        "error_message": m.error_message,
        "tool_call_id": m.tool_call_id,
        "tool_name": m.tool_name,
        "is_error": m.is_error,
        "metadata": dict(m.metadata),
        "token_count": m.token_count,
        "counted_with": m.counted_with,
        "create_time_us": m.create_time_us,
        "rolled_back_at_seq": rolled_back_at_seq,
        "calibration": None if m.calibration is None else list(m.calibration),
    }


def message_record(row: Any) -> Record:
    return message_record_of(message_from_row(row), int(row.rolled_back_at_seq))


def message_of(r: Mapping[str, Any]) -> msg.Message:
    """The domain message of a record."""
    u = r.get("usage")
    calib = r.get("calibration")
    return msg.Message(
        role=_ROLE_OF[r["role"]],
        content=tuple(block_from_record(b) for b in r["content"]),
        seq=int(r["seq"]),
        message_id=r["message_id"],
        stop_reason=_STOP_OF[r.get("stop_reason", "")],
        usage=None if u is None else usage_of(u),
        model=r.get("model", ""),
        provider=r.get("provider", ""),
        error_message=r.get("error_message", ""),
        tool_call_id=r.get("tool_call_id", ""),
        tool_name=r.get("tool_name", ""),
        is_error=bool(r.get("is_error", False)),
        state=_STATE_OF[r.get("state", "active")],
        token_count=int(r.get("token_count", 0)),
        counted_with=r.get("counted_with", ""),
        create_time_us=int(r["create_time_us"]),
        metadata=r.get("metadata") or msg.EMPTY_METADATA,
        calibration=None if calib is None else (float(calib[0]), int(calib[1])),
        visibility=_VISIBILITY_OF[r.get("visibility", "model")],
    )


def message_row(record: Mapping[str, Any], key: str) -> dict[str, Any]:
    values = message_row_values(key, message_of(record))
    values["rolled_back_at_seq"] = int(record.get("rolled_back_at_seq", 0))
    return values
