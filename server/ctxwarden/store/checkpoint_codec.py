"""Compaction checkpoints <-> row values (details in one JSON column, whose
optional keys are written only when set, so older rows read the same)."""

from __future__ import annotations

import json
from typing import Any

from ctxwarden.core.anchor_report import report_dumps, report_loads
from ctxwarden.core.messages import Usage
from ctxwarden.core.session import Checkpoint, CompactionTrigger
from ctxwarden.core.usage_ledger import TokenTotals
from ctxwarden.store.codec import compact_json
from ctxwarden.store.models import CompactionRow


def checkpoint_details(c: Checkpoint) -> str:
    d: dict[str, Any] = {
        "turn_prefix_summary": c.turn_prefix_summary,
        "split_turn": c.split_turn,
        "read_files": list(c.read_files),
        "modified_files": list(c.modified_files),
        "summarizer": c.summarizer,
        "trigger": c.trigger,
    }
    if c.tool_results_cleared_through:  # layered clearing (core.clearing)
        d["tool_results_cleared_through"] = c.tool_results_cleared_through
        d["tool_results_cleared"] = c.tool_results_cleared
        d["tool_result_tokens_cleared"] = c.tool_result_tokens_cleared
    if c.proposed_memory_ids:  # memories stored from durable facts (core.memory)
        d["memories"] = list(c.proposed_memory_ids)
    if c.memory_tokens:
        d["memory_tokens"] = c.memory_tokens
    if c.preserved_anchors:  # policy.preserve_lost_anchors (core.anchor_report)
        d["preserved_anchors"] = c.preserved_anchors
    if c.summarizer_usage is not None:  # the usage ledger (core.usage_ledger)
        d["summarizer_usage"] = TokenTotals.of(c.summarizer_usage).counts()[1:]
    return compact_json(d)


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
        "loss_report_json": report_dumps(c.loss_report) if c.loss_report else None,
    }


def checkpoint_bytes(values: dict[str, Any]) -> int:
    """What a stored checkpoint row costs."""
    report = values.get("loss_report_json") or ""
    return (
        len(values["summary"].encode())
        + len(values["details_json"].encode())
        + len(report.encode())
        + 128
    )


def checkpoint_from_row(row: CompactionRow | Any) -> Checkpoint:
    d = json.loads(row.details_json or "{}")
    return Checkpoint(
        compaction_id=getattr(row, "origin_id", "") or row.compaction_id,
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
        trigger=CompactionTrigger(d.get("trigger", CompactionTrigger.MANUAL)),
        at_seq=row.at_seq,
        superseded=row.superseded_at_seq != 0,
        tool_results_cleared_through=d.get("tool_results_cleared_through", 0),
        tool_results_cleared=d.get("tool_results_cleared", 0),
        tool_result_tokens_cleared=d.get("tool_result_tokens_cleared", 0),
        proposed_memory_ids=tuple(d.get("memories", ())),
        memory_tokens=int(d.get("memory_tokens", 0)),
        preserved_anchors=d.get("preserved_anchors", ""),
        loss_report=report_loads(getattr(row, "loss_report_json", None)),
        summarizer_usage=_usage(d.get("summarizer_usage")),
    )


def _usage(counts: list[int] | None) -> Usage | None:
    """A checkpoint's summariser usage as details_json holds it: input, cache
    read, cache write, output, reasoning."""
    if counts is None:
        return None
    return TokenTotals(1, *counts).as_usage()
