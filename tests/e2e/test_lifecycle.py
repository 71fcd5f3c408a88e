"""ArchiveSession / UnarchiveSession end to end: writes refused, reads served from
the database, ListSessions' filter, and the same bytes after unarchiving."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from typing import Any

import grpc
from google.protobuf import field_mask_pb2

from ctxwarden.v1 import context_service_pb2 as pb
from ctxwarden.v1 import session_pb2 as ses
from tests.e2e.conftest import Stub
from tests.support.builders import assistant, result, user
from tests.support.errors import expect_error

FAILED = grpc.StatusCode.FAILED_PRECONDITION
CHAT = pb.MODEL_INPUT_FORMAT_OPENAI_CHAT


def _session(stub: Stub, user_id: str = "") -> str:
    sid = f"lc-{uuid.uuid4().hex[:12]}"
    stub.CreateSession(
        pb.CreateSessionRequest(
            session_id=sid,
            session=ses.Session(
                system_prompt="You are terse.",
                model="gpt-4o",
                user_id=user_id,
                policy=ses.ContextPolicy(keep_recent_tokens=20),
            ),
        )
    )
    stub.AppendMessages(
        pb.AppendMessagesRequest(
            session_id=sid,
            messages=[
                user("read a.txt " * 20),
                assistant("reading", [("c1", "read", {"path": "a.txt"})]),
                result("c1", "line\n" * 300, name="read"),
                user("and now? " * 20),
                assistant("done " * 20),
            ],
        )
    )
    return sid


def _input(stub: Stub, sid: str, fmt: int = 0) -> bytes:
    mi = stub.BuildModelInput(pb.BuildModelInputRequest(session_id=sid, format=fmt))  # type: ignore[arg-type]
    return mi.SerializeToString(deterministic=True)


def test_archived_session_refuses_every_write_until_unarchived(stub: Stub) -> None:
    sid = _session(stub)
    plan = stub.PrepareCompaction(pb.PrepareCompactionRequest(session_id=sid))
    native, chat = _input(stub, sid), _input(stub, sid, CHAT)

    archived = stub.ArchiveSession(pb.ArchiveSessionRequest(session_id=sid))
    assert archived.HasField("archive_time") and archived.archive_time.seconds > 0
    again = stub.ArchiveSession(pb.ArchiveSessionRequest(session_id=sid))
    assert again.archive_time == archived.archive_time  # idempotent: unchanged

    writes: list[tuple[Callable[..., Any], Any]] = [
        (stub.AppendMessages, pb.AppendMessagesRequest(session_id=sid, messages=[user("x")])),
        (
            stub.AppendModelOutput,
            pb.AppendModelOutputRequest(
                session_id=sid,
                format=CHAT,
                items_json=json.dumps([{"role": "user", "content": "hi"}]),
            ),
        ),
        (stub.RollbackTurn, pb.RollbackTurnRequest(session_id=sid, to_seq=1)),
        (stub.PrepareCompaction, pb.PrepareCompactionRequest(session_id=sid)),
        (
            stub.CommitCompaction,
            pb.CommitCompactionRequest(session_id=sid, plan_id=plan.plan_id, summary="s"),
        ),
        (
            stub.UpdateSession,
            pb.UpdateSessionRequest(
                session=ses.Session(session_id=sid, title="new"),
                update_mask=field_mask_pb2.FieldMask(paths=["title"]),
            ),
        ),
    ]
    for method, request in writes:
        err = expect_error(FAILED, "SESSION_ARCHIVED", method, request)
        assert "UnarchiveSession" in err.details() and sid in err.details()
    stream = stub.StreamMessages(
        iter([pb.AppendMessagesRequest(session_id=sid, messages=[user("y")])])
    )
    expect_error(FAILED, "SESSION_ARCHIVED", lambda: list(stream))

    # Reads are served, from the database, with what was stored before.
    got = stub.GetSession(pb.GetSessionRequest(session_id=sid))
    assert got.last_seq == 5 and got.archive_time == archived.archive_time
    history = stub.ListMessages(pb.ListMessagesRequest(session_id=sid))
    assert [x.seq for x in history.messages] == [1, 2, 3, 4, 5]
    assert _input(stub, sid) == native and _input(stub, sid, CHAT) == chat
    tool = stub.GetToolOutput(pb.GetToolOutputRequest(session_id=sid, seq=3, limit=10))
    assert tool.content == "line\nline\n" and tool.total_lines == 300
    assert stub.ListCompactions(pb.ListCompactionsRequest(session_id=sid)).compactions == []

    back = stub.UnarchiveSession(pb.UnarchiveSessionRequest(session_id=sid))
    assert not back.HasField("archive_time") and back.last_seq == 5
    assert stub.UnarchiveSession(pb.UnarchiveSessionRequest(session_id=sid)) == back
    # Restored after unarchiving: the same bytes, and writable again.
    assert _input(stub, sid) == native and _input(stub, sid, CHAT) == chat
    out = stub.AppendMessages(pb.AppendMessagesRequest(session_id=sid, messages=[user("more")]))
    assert out.last_seq == 6


def test_list_sessions_leaves_archived_out_unless_asked(stub: Stub) -> None:
    owner = f"u-{uuid.uuid4().hex[:8]}"
    sids = [_session(stub, owner) for _ in range(3)]
    stub.ArchiveSession(pb.ArchiveSessionRequest(session_id=sids[1]))

    def listed(show: bool, page_size: int = 1) -> list[str]:
        out, token = [], ""
        while True:
            page = stub.ListSessions(
                pb.ListSessionsRequest(
                    user_id=owner, show_archived=show, page_size=page_size, page_token=token
                )
            )
            out += [s.session_id for s in page.sessions]
            token = page.next_page_token
            if not token:
                return out

    assert listed(False) == [sids[2], sids[0]]
    assert listed(True) == [sids[2], sids[1], sids[0]]
    first = stub.ListSessions(pb.ListSessionsRequest(user_id=owner, page_size=1))
    expect_error(  # a page token is bound to the filter
        grpc.StatusCode.INVALID_ARGUMENT,
        "INVALID_PAGE_TOKEN",
        stub.ListSessions,
        pb.ListSessionsRequest(
            user_id=owner, page_size=1, page_token=first.next_page_token, show_archived=True
        ),
    )


def test_archive_of_missing_or_deleted_session_is_not_found(stub: Stub) -> None:
    missing = f"lc-missing-{uuid.uuid4().hex[:8]}"
    for method, request in (
        (stub.ArchiveSession, pb.ArchiveSessionRequest(session_id=missing)),
        (stub.UnarchiveSession, pb.UnarchiveSessionRequest(session_id=missing)),
    ):
        expect_error(grpc.StatusCode.NOT_FOUND, "SESSION_NOT_FOUND", method, request)
    sid = _session(stub)
    stub.ArchiveSession(pb.ArchiveSessionRequest(session_id=sid))
    stub.DeleteSession(pb.DeleteSessionRequest(session_id=sid))  # deleting an archived one works
    expect_error(
        grpc.StatusCode.NOT_FOUND,
        "SESSION_NOT_FOUND",
        stub.UnarchiveSession,
        pb.UnarchiveSessionRequest(session_id=sid),
    )
    expect_error(
        grpc.StatusCode.INVALID_ARGUMENT,
        "INVALID_SESSION_ID",
        stub.ArchiveSession,
        pb.ArchiveSessionRequest(session_id="bad id!"),
    )
