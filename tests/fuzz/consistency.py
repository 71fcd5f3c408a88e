"""Invariants of the stored state, read straight from the database.

Table and column names come from the store's own models, so a schema change
that these checks do not follow fails loudly instead of passing silently.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from typing import Any

import grpc
from sqlalchemy import create_engine, func, select

from ctxwarden.store.codec import message_from_row
from ctxwarden.store.tables import C, M, P, S, V
from ctxwarden.store.urls import sync_url
from ctxwarden.v1 import context_service_pb2 as pb
from ctxwarden.v1 import context_service_pb2_grpc as pb_grpc

ACTIVE, ROLLED_BACK = 1, 2
ROLE_ASSISTANT, ROLE_TOOL_RESULT = 2, 3


def database_problems(url: str, since_us: int) -> list[str]:
    """Everything wrong with sessions created at or after ``since_us`` (empty: consistent)."""
    engine = create_engine(sync_url(url))
    try:
        with engine.connect() as conn:
            sessions = {
                r.session_id: r
                for r in conn.execute(select(S).where(S.c.create_time_us >= since_us)).all()
            }
            ids = list(sessions)
            messages: dict[str, list[Any]] = defaultdict(list)
            checkpoints: dict[str, list[Any]] = defaultdict(list)
            revisions: dict[str, list[int]] = defaultdict(list)
            plans: list[str] = []
            for chunk in (ids[i : i + 200] for i in range(0, len(ids), 200)):
                for r in conn.execute(
                    select(M).where(M.c.session_id.in_(chunk)).order_by(M.c.session_id, M.c.seq)
                ).all():
                    messages[r.session_id].append(r)
                for r in conn.execute(select(C).where(C.c.session_id.in_(chunk))).all():
                    checkpoints[r.session_id].append(r)
                for r in conn.execute(
                    select(V.c.session_id, V.c.revision).where(V.c.session_id.in_(chunk))
                ).all():
                    revisions[r.session_id].append(int(r.revision))
            known = select(S.c.session_id)
            plans = [
                str(r.session_id)
                for r in conn.execute(
                    select(P.c.session_id).where(P.c.session_id.not_in(known)).limit(5)
                ).all()
            ]
            orphans = conn.execute(
                select(func.count()).select_from(M).where(M.c.session_id.not_in(known))
            ).scalar_one()
    finally:
        engine.dispose()
    problems: list[str] = []
    if orphans:
        problems.append(f"{orphans} message rows belong to no session")
    if plans:
        problems.append(f"compaction plans of missing sessions: {plans}")
    for sid, s in sessions.items():
        problems += [
            f"session {sid!r}: {p}"
            for p in _session_problems(s, messages[sid], checkpoints[sid], revisions[sid])
        ]
    return problems


def _session_problems(
    s: Any, rows: list[Any], checkpoints: list[Any], revisions: list[int]
) -> list[str]:
    out: list[str] = []
    last = int(s.last_seq)
    # A fork's rows up to parent_seq are its ancestors' (shared, store.lineage).
    first = int(s.parent_seq) + 1 if s.parent_key else 1
    seqs = [int(r.seq) for r in rows]
    if seqs != list(range(first, last + 1)):
        gaps = sorted(set(range(first, last + 1)) - set(seqs))[:10]
        extra = sorted(x for x in seqs if not first <= x <= last)[:10]
        out.append(
            f"message seqs are not {first}..last_seq={last}: {len(seqs)} rows, max "
            f"{max(seqs, default=0)}, missing {gaps}, out of range {extra}"
        )
    if s.context_tokens < 0:
        out.append(f"context_tokens {s.context_tokens} < 0")
    if s.consecutive_failures < 0:
        out.append(f"consecutive_failures {s.consecutive_failures} < 0")
    if sorted(revisions) != list(range(1, int(s.revision) + 1)):
        out.append(f"settings revisions {sorted(revisions)[:20]} are not 1..{s.revision}")
    for name in ("tools_json", "policy_json", "labels_json", "calibration_json"):
        try:
            json.loads(getattr(s, name))
        except ValueError as exc:
            out.append(f"{name} is not JSON: {exc}")
    calibration = json.loads(s.calibration_json)
    if not (math.isfinite(calibration["r"]) and calibration["r"] > 0 and calibration["n"] >= 0):
        out.append(f"calibration_json {s.calibration_json} is out of range")
    message_ids: set[str] = set()
    for r in rows:
        where = f"seq {r.seq}"
        if r.state not in (ACTIVE, ROLLED_BACK):
            out.append(f"{where}: state {r.state}")
        if r.role not in (1, 2, 3):
            out.append(f"{where}: role {r.role}")
        if not 0 <= r.stop_reason <= 5:
            out.append(f"{where}: stop_reason {r.stop_reason}")
        if r.token_count < 0:
            out.append(f"{where}: token_count {r.token_count}")
        if not r.message_id or r.message_id in message_ids:
            out.append(f"{where}: message_id {r.message_id!r} is empty or repeated")
        message_ids.add(r.message_id)
        if r.state == ACTIVE and r.rolled_back_at_seq != 0:
            out.append(f"{where}: active but rolled_back_at_seq={r.rolled_back_at_seq}")
        if r.state == ROLLED_BACK and not r.seq <= r.rolled_back_at_seq <= last:
            out.append(f"{where}: rolled back at seq {r.rolled_back_at_seq} (last_seq {last})")
        try:
            message = message_from_row(r)
        except (ValueError, KeyError, TypeError, IndexError) as exc:
            out.append(f"{where}: body cannot be decoded: {exc}")
            continue
        # A tool result whose call is not active (rolled back, compacted away, never
        # made) is stored as sent: the view leaves it out. Every result has its call ID.
        if r.role == ROLE_TOOL_RESULT and not message.tool_call_id and not message.history_only:
            out.append(f"{where}: tool result without a tool_call_id")
    live = [c for c in checkpoints if c.superseded_at_seq == 0]
    for c in checkpoints:
        where = f"checkpoint {c.compaction_id}"
        if not 1 <= c.first_kept_seq <= c.at_seq + 1:
            out.append(f"{where}: first_kept_seq {c.first_kept_seq} outside 1..{c.at_seq + 1}")
        if c.at_seq > last:
            out.append(f"{where}: at_seq {c.at_seq} > last_seq {last}")
        if c.superseded_at_seq and not c.at_seq <= c.superseded_at_seq <= last:
            out.append(f"{where}: superseded at {c.superseded_at_seq} (last_seq {last})")
        if min(c.tokens_before, c.tokens_after) < 0:
            out.append(f"{where}: negative token counts")
        try:
            json.loads(c.details_json)
        except ValueError as exc:
            out.append(f"{where}: details_json is not JSON: {exc}")
    newest = max(live, key=lambda c: (c.created_at, c.compaction_id), default=None)
    expected = newest.compaction_id if newest is not None else ""
    # A fork's copy of an inherited checkpoint is named by the original's ID.
    shown = (newest.origin_id or expected) if newest is not None else ""
    if s.compaction_id not in (expected, shown):
        out.append(
            f"current checkpoint {s.compaction_id!r} is not the newest valid one {expected!r}"
        )
    return out


def api_problems(
    channel: grpc.Channel, url: str, since_us: int, *, timeout: float = 30
) -> tuple[list[str], dict[str, bytes]]:
    """Read every live session through the API; also returns each BuildModelInput's bytes."""
    engine = create_engine(sync_url(url))
    try:
        with engine.connect() as conn:
            rows = conn.execute(
                select(S.c.session_id, S.c.last_seq).where(
                    S.c.create_time_us >= since_us, S.c.delete_time_us == 0, S.c.tenant_id == ""
                )
            ).all()
    finally:
        engine.dispose()
    stub = pb_grpc.ContextServiceStub(channel)
    build: grpc.UnaryUnaryMultiCallable[bytes, bytes] = channel.unary_unary(
        "/ctxwarden.v1.ContextService/BuildModelInput",
        request_serializer=None,
        response_deserializer=None,
    )
    problems: list[str] = []
    inputs: dict[str, bytes] = {}
    for sid, last_seq in rows:
        try:
            session = stub.GetSession(pb.GetSessionRequest(session_id=sid), timeout=timeout)
            raw: bytes = build(
                pb.BuildModelInputRequest(session_id=sid).SerializeToString(), timeout=timeout
            )
            model_input = pb.ModelInput.FromString(raw)
            listed = 0
            token = ""
            while True:
                page = stub.ListMessages(
                    pb.ListMessagesRequest(
                        session_id=sid, page_size=1000, page_token=token, include_rolled_back=True
                    ),
                    timeout=timeout,
                )
                listed += len(page.messages)
                token = page.next_page_token
                if not token:
                    break
            stub.ListCompactions(pb.ListCompactionsRequest(session_id=sid), timeout=timeout)
        except grpc.RpcError as err:
            problems.append(f"session {sid!r}: {err.code()} {err.details()}")
            continue
        if not session.last_seq == model_input.last_seq == listed == last_seq:
            problems.append(
                f"session {sid!r}: last_seq {last_seq} in the database, GetSession "
                f"{session.last_seq}, BuildModelInput {model_input.last_seq}, "
                f"ListMessages {listed} rows"
            )
        inputs[sid] = raw
    return problems, inputs
