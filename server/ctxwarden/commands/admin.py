"""Operator commands over gRPC: sessions list/show, context, compact, rollback.

They talk to a running server like any client (same auth), so they work
against a sidecar or a shared service alike.
"""

from __future__ import annotations

import json
import sys
from typing import Any, TextIO

import grpc
from google.protobuf import json_format

from ctxwarden.commands.client import Admin, table
from ctxwarden.commands.usage import print_usage
from ctxwarden.v1 import context_service_pb2 as pb
from ctxwarden.v1 import message_pb2 as m
from ctxwarden.v1 import session_pb2 as ses

FORMATS = {
    "native": pb.MODEL_INPUT_FORMAT_NATIVE,
    "openai-chat": pb.MODEL_INPUT_FORMAT_OPENAI_CHAT,
    "openai-responses": pb.MODEL_INPUT_FORMAT_OPENAI_RESPONSES,
    "anthropic": pb.MODEL_INPUT_FORMAT_ANTHROPIC_MESSAGES,
    "anthropic-messages": pb.MODEL_INPUT_FORMAT_ANTHROPIC_MESSAGES,
    "gemini": pb.MODEL_INPUT_FORMAT_GEMINI,
}
ROLES = {m.ROLE_USER: "user", m.ROLE_ASSISTANT: "assistant", m.ROLE_TOOL_RESULT: "tool"}


def _preview(msg: Any, width: int = 60) -> str:
    parts = []
    for block in msg.content:
        kind = block.WhichOneof("block")
        if kind == "text":
            parts.append(block.text.text)
        elif kind == "tool_call":
            parts.append(f"{block.tool_call.name}({block.tool_call.arguments_json})")
        elif kind == "thinking":
            parts.append("[thinking]")
        elif kind == "image":
            parts.append("[image]")
    text = " ".join(parts).replace("\n", " ") or (
        msg.error_message and f"[error] {msg.error_message}"
    )
    return text if len(text) <= width else text[: width - 1] + "…"


def anchors_lost(report: pb.CompactionLossReport) -> str:
    """A loss report in one cell: "2 of 31 lost (constraint 1, file_path 1)",
    "0 of 31 lost", or "-" when the checkpoint has none."""
    total = sum(c.total for c in report.categories)
    if not total:
        return "-"
    lost = [c for c in report.categories if c.lost]
    text = f"{sum(c.lost for c in lost)} of {total} lost"
    if lost:
        parts = (f"{_category(c.category)} {c.lost}" for c in lost)
        text += f" ({', '.join(parts)})"
    return text


def _category(value: int) -> str:
    return ses.AnchorCategory.Name(value).removeprefix("ANCHOR_CATEGORY_").lower()  # type: ignore[arg-type]


def list_sessions(admin: Admin, user_id: str, project_id: str, out: TextIO) -> None:
    rows = [
        (s.session_id, s.title or "-", s.model or "-", s.last_seq, s.context_tokens)
        for s in admin.sessions(user_id, project_id)
    ]
    table(rows, ("SESSION", "TITLE", "MODEL", "LAST SEQ", "CONTEXT TOKENS"), out)


def show_session(admin: Admin, session_id: str, out: TextIO) -> None:
    s = admin.call("GetSession", pb.GetSessionRequest(session_id=session_id))
    mi = admin.call("BuildModelInput", pb.BuildModelInputRequest(session_id=session_id))
    out.write(f"session {s.session_id}  model={s.model or '-'}  last_seq={s.last_seq}\n\n")
    in_view = {x.seq for x in mi.messages if x.seq}
    rows = []
    for msg in admin.history(session_id):
        where = (
            "context"
            if msg.seq in in_view
            else (
                "rolled back"
                if msg.state == m.MESSAGE_STATE_ROLLED_BACK
                else ("summarised" if msg.seq < mi.first_kept_seq else "omitted")
            )
        )
        rows.append((msg.seq, ROLES.get(msg.role, "?"), msg.token_count, where, _preview(msg)))
    out.write("History (everything stored) vs effective context:\n")
    table(rows, ("SEQ", "ROLE", "TOKENS", "STATUS", "CONTENT"), out)
    out.write("\nCheckpoints:\n")
    checkpoints = admin.call(
        "ListCompactions", pb.ListCompactionsRequest(session_id=session_id, page_size=100)
    ).compactions
    table(
        [
            (
                c.compaction_id,
                c.first_kept_seq,
                f"{c.tokens_before} -> {c.tokens_after}",
                c.summarizer,
                "superseded" if c.superseded else "valid",
                anchors_lost(c.loss_report),
            )
            for c in checkpoints
        ],
        ("COMPACTION", "FIRST KEPT", "TOKENS", "SUMMARIZER", "STATE", "ANCHORS"),
        out,
    )
    t = mi.tokens
    out.write("\nToken breakdown of the model input:\n")
    table(
        [
            ("system", t.system_tokens),
            ("tools", t.tools_tokens),
            ("summary", t.summary_tokens),
            ("messages", t.message_tokens),
            ("total", t.total_tokens),
            ("anchored (reported usage)", t.anchored_total_tokens),
            ("estimate error ratio", f"{t.estimate_error_ratio:.3f}"),
            ("context window", t.context_window),
            ("compaction threshold", t.compaction_threshold),
            ("compaction recommended", mi.compaction_recommended),
        ],
        ("PART", "TOKENS"),
        out,
    )
    if mi.notices:
        out.write("\nNotices:\n")
        table([(n.code, n.seq, n.detail) for n in mi.notices], ("CODE", "SEQ", "DETAIL"), out)


def print_context(admin: Admin, session_id: str, fmt: str, out: TextIO) -> None:
    mi = admin.call(
        "BuildModelInput", pb.BuildModelInputRequest(session_id=session_id, format=FORMATS[fmt])
    )
    if mi.rendered_json:
        out.write(json.dumps(json.loads(mi.rendered_json), indent=2, ensure_ascii=False) + "\n")
    else:
        out.write(json_format.MessageToJson(mi, indent=2) + "\n")


def compact(admin: Admin, session_id: str, instructions: str, out: TextIO) -> None:
    c = admin.call("Compact", pb.CompactRequest(session_id=session_id, instructions=instructions))
    out.write(
        f"compaction {c.compaction_id}: {c.tokens_before} -> {c.tokens_after} tokens, "
        f"first kept seq {c.first_kept_seq}, summariser {c.summarizer}\n"
        f"anchors: {anchors_lost(c.loss_report)}\n"
    )


def rollback(admin: Admin, session_id: str, to_seq: int | None, out: TextIO) -> None:
    req = pb.RollbackTurnRequest(session_id=session_id)
    if to_seq is not None:
        req.to_seq = to_seq
    r = admin.call("RollbackTurn", req)
    action = pb.RecoveryAction.Name(r.action)
    out.write(f"rolled back {list(r.rolled_back_seqs) or 'nothing'}; {action} ({r.reason})\n")


def run(args: Any, out: TextIO = sys.stdout) -> int:
    admin = Admin(args.target, args.api_key, args.timeout)
    try:
        if args.command == "sessions" and args.sessions_command == "list":
            list_sessions(admin, args.user_id, args.project_id, out)
        elif args.command == "sessions":
            show_session(admin, args.session_id, out)
        elif args.command == "context":
            print_context(admin, args.session_id, args.format, out)
        elif args.command == "compact":
            compact(admin, args.session_id, args.instructions, out)
        elif args.command == "rollback":
            rollback(admin, args.session_id, args.to_seq, out)
        elif args.command == "usage":
            print_usage(admin, args.session_id, args.json, out)
        return 0
    except grpc.RpcError as exc:
        print(f"ctxwarden: {exc.code().name}: {exc.details()}", file=sys.stderr)
        return 1
    finally:
        admin.close()
