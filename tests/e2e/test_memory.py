"""Long-term memory end to end, on both backends: CRUD, upsert by key, filters and
pages, tenancy, the session's memory block (cold start, budget, order, freeze,
refresh, compaction, prefix stability, restart) and memory_write modes."""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf import field_mask_pb2

from ctxwarden.v1 import context_service_pb2 as pb
from ctxwarden.v1 import context_service_pb2_grpc as pb_grpc
from ctxwarden.v1 import memory_pb2 as mem
from ctxwarden.v1 import session_pb2 as ses
from tests.e2e.conftest import Stub
from tests.e2e.test_compaction import turns
from tests.e2e.test_messages import append
from tests.e2e.test_summarizers import history_request, openai_args, serving
from tests.summarizers.conftest import fake_openai  # noqa: F401
from tests.summarizers.fake_providers import FakeProvider
from tests.support.builders import user
from tests.support.errors import expect_error
from tests.support.server import ServerProcess

INVALID = grpc.StatusCode.INVALID_ARGUMENT
FORMATS = (
    pb.MODEL_INPUT_FORMAT_OPENAI_CHAT,
    pb.MODEL_INPUT_FORMAT_OPENAI_RESPONSES,
    pb.MODEL_INPUT_FORMAT_ANTHROPIC_MESSAGES,
    pb.MODEL_INPUT_FORMAT_GEMINI,
)


def uid(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def remember(stub: Stub, text: str, **fields: Any) -> mem.Memory:
    return stub.CreateMemory(mem.CreateMemoryRequest(memory=mem.Memory(text=text, **fields)))


def open_session(stub: Stub, user_id: str, project_id: str, **policy: Any) -> str:
    sid = uid("mem")
    stub.CreateSession(
        pb.CreateSessionRequest(
            session_id=sid,
            session=ses.Session(
                system_prompt="You are a careful agent.",
                model="gpt-4o",
                user_id=user_id,
                project_id=project_id,
                policy=ses.ContextPolicy(**policy),
            ),
        )
    )
    return sid


def build(stub: Stub, sid: str, **kw: Any) -> pb.ModelInput:
    return stub.BuildModelInput(pb.BuildModelInputRequest(session_id=sid, **kw))


def mask(*paths: str) -> field_mask_pb2.FieldMask:
    return field_mask_pb2.FieldMask(paths=list(paths))


# -- CRUD ---------------------------------------------------------------------------------


def test_create_get_update_delete(stub: Stub) -> None:
    u = uid("u")
    made = remember(stub, "prefers tabs", user_id=u, labels={"kind": "style"})
    assert made.memory_id and made.state == mem.MEMORY_STATE_ACTIVE and made.etag == '"1"'
    assert made.create_time.seconds > 0 and made.update_time == made.create_time
    got = stub.GetMemory(mem.GetMemoryRequest(memory_id=made.memory_id))
    assert got == made
    changed = stub.UpdateMemory(
        mem.UpdateMemoryRequest(
            memory=mem.Memory(memory_id=made.memory_id, text="prefers spaces", pinned=True),
            update_mask=mask("text", "pinned"),
            etag=made.etag,
        )
    )
    assert changed.text == "prefers spaces" and changed.pinned and changed.etag == '"2"'
    assert dict(changed.labels) == {"kind": "style"}  # not in the mask: kept
    expect_error(
        grpc.StatusCode.ABORTED,
        "ETAG_MISMATCH",
        stub.UpdateMemory,
        mem.UpdateMemoryRequest(
            memory=mem.Memory(memory_id=made.memory_id, text="x"),
            update_mask=mask("text"),
            etag=made.etag,
        ),
    )
    expect_error(
        INVALID,
        "INVALID_UPDATE_MASK",
        stub.UpdateMemory,
        mem.UpdateMemoryRequest(memory=changed, update_mask=mask("user_id")),
    )
    stub.DeleteMemory(mem.DeleteMemoryRequest(memory_id=made.memory_id))
    for call in (stub.GetMemory, stub.DeleteMemory):
        req: Any = (mem.GetMemoryRequest if call is stub.GetMemory else mem.DeleteMemoryRequest)(
            memory_id=made.memory_id
        )
        expect_error(grpc.StatusCode.NOT_FOUND, "MEMORY_NOT_FOUND", call, req)


def test_invalid_memories_are_refused(stub: Stub) -> None:
    expect_error(INVALID, "INVALID_MEMORY_SCOPE", remember, stub, "no scope")
    expect_error(INVALID, "MISSING_FIELD", remember, stub, "  ", user_id="u")
    expect_error(INVALID, "INVALID_KEY", remember, stub, "x", user_id="u", key="has space")
    expect_error(INVALID, "FIELD_TOO_LARGE", remember, stub, "x" * 20000, user_id="u")
    expect_error(INVALID, "INVALID_MEMORY_STATE", remember, stub, "x", user_id="u", state=7)
    expect_error(
        INVALID,
        "INVALID_MEMORY_STATE",
        stub.CreateSession,
        pb.CreateSessionRequest(session=ses.Session(policy=ses.ContextPolicy(memory_write=9))),  # type: ignore[arg-type]
    )


def test_a_key_makes_create_an_upsert(stub: Stub) -> None:
    u, p = uid("u"), uid("p")
    first = remember(stub, "editor: vim", user_id=u, project_id=p, key="editor")
    second = remember(stub, "editor: helix", user_id=u, project_id=p, key="editor", pinned=True)
    assert second.memory_id == first.memory_id and second.etag == '"2"'
    assert second.text == "editor: helix" and second.pinned
    assert second.create_time == first.create_time
    # The same key in another scope is another memory.
    other = remember(stub, "editor: emacs", user_id=u, key="editor")
    assert other.memory_id != first.memory_id
    listed = stub.ListMemories(mem.ListMemoriesRequest(user_id=u, key="editor")).memories
    assert sorted(m.text for m in listed) == ["editor: emacs", "editor: helix"]


def test_list_filters_and_pages(stub: Stub) -> None:
    u, p = uid("u"), uid("p")
    made = [
        remember(stub, f"fact {i}", user_id=u, project_id=p, labels={"n": str(i % 2)})
        for i in range(5)
    ]
    remember(stub, "proposed", user_id=u, project_id=p, state=mem.MEMORY_STATE_PROPOSED)
    seen: list[str] = []
    token = ""
    pages = 0
    while True:
        page = stub.ListMemories(
            mem.ListMemoriesRequest(
                user_id=u, state=mem.MEMORY_STATE_ACTIVE, page_size=2, page_token=token
            )
        )
        seen += [m.memory_id for m in page.memories]
        pages += 1
        token = page.next_page_token
        if not token:
            break
    assert seen == [m.memory_id for m in reversed(made)] and pages == 3  # newest first
    odd = stub.ListMemories(mem.ListMemoriesRequest(project_id=p, labels={"n": "1"})).memories
    assert [m.text for m in odd] == ["fact 3", "fact 1"]
    proposed = stub.ListMemories(
        mem.ListMemoriesRequest(project_id=p, state=mem.MEMORY_STATE_PROPOSED)
    ).memories
    assert [m.text for m in proposed] == ["proposed"]
    first = stub.ListMemories(mem.ListMemoriesRequest(user_id=u, page_size=1))
    expect_error(
        INVALID,
        "INVALID_PAGE_TOKEN",
        stub.ListMemories,
        mem.ListMemoriesRequest(user_id=u, project_id="other", page_token=first.next_page_token),
    )


# -- the memory block ------------------------------------------------------------------------


def test_cold_start_budget_and_order(stub: Stub) -> None:
    u, p = uid("u"), uid("p")
    old = remember(stub, "uses Python 3.11", project_id=p)
    pinned = remember(stub, "call me Sam", user_id=u, pinned=True)
    newest = remember(stub, "prefers short answers", user_id=u, project_id=p)
    remember(stub, "someone else's", user_id=uid("u"), project_id=p)
    remember(stub, "not yet", user_id=u, state=mem.MEMORY_STATE_PROPOSED)
    sid = open_session(stub, u, p, memory_max_tokens=500)
    first = build(stub, sid)
    assert list(first.memory_ids) == [pinned.memory_id, newest.memory_id, old.memory_id]
    head = first.messages[0]
    assert head.seq == 0 and head.metadata["ctxwarden.memory"] == "1"
    assert head.content[0].text.text == first.memory_block
    block = first.memory_block
    assert block.index("call me Sam") < block.index("prefers short") < block.index("Python 3.11")
    assert "someone else's" not in block and "not yet" not in block
    assert 0 < first.tokens.memory_tokens <= 500
    assert first.tokens.total_tokens == (
        first.tokens.system_tokens + first.tokens.tools_tokens + first.tokens.memory_tokens
    )
    # A small budget keeps the most relevant first.
    small = build(stub, open_session(stub, u, p, memory_max_tokens=first.tokens.memory_tokens - 1))
    assert list(small.memory_ids) == [pinned.memory_id, newest.memory_id]
    # Without opting in there is no block.
    plain = build(stub, open_session(stub, u, p))
    assert plain.memory_block == "" and not plain.memory_ids and plain.tokens.memory_tokens == 0
    assert [m.seq for m in plain.messages] == []


def test_block_is_frozen_until_refresh_and_keeps_the_prefix(stub: Stub) -> None:
    u, p = uid("u"), uid("p")
    remember(stub, "likes tea", user_id=u)
    sid = open_session(stub, u, p, memory_max_tokens=300)
    append(stub, sid, user("hello"))
    before = build(stub, sid)
    held = {f: build(stub, sid, format=f) for f in FORMATS}
    later = remember(stub, "likes coffee too", user_id=u)
    append(stub, sid, user("next question"))
    after = build(stub, sid)
    # Frozen: the new memory is not in it, and the input only grew at the end.
    assert after.memory_block == before.memory_block and "coffee" not in after.memory_block
    assert after.prefix_hash == before.prefix_hash
    assert list(after.messages[: len(before.messages)]) == list(before.messages)
    resumed = build(stub, sid, resume_token=before.resume_token)
    assert resumed.messages_offset == len(before.messages)
    for f, old in held.items():
        whole = build(stub, sid, format=f).rendered_json
        assert "likes tea" in whole and "coffee" not in whole and "next question" in whole
        part = build(stub, sid, format=f, resume_token=old.resume_token)
        # Only what follows the unchanged leading provider messages is sent again.
        assert part.rendered_prefix_bytes > 0, f
        prefix = old.rendered_json.encode()[: part.rendered_prefix_bytes]
        assert prefix.decode() + part.rendered_json == whole, f
    # An explicit refresh takes the new memory in, and the prefix changes.
    refreshed = build(stub, sid, refresh_memory=True)
    assert "likes coffee too" in refreshed.memory_block
    assert refreshed.memory_ids[0] == later.memory_id
    assert refreshed.prefix_hash != before.prefix_hash
    assert build(stub, sid, resume_token=after.resume_token).messages_offset == 0
    assert build(stub, sid) == build(stub, sid)
    session = stub.GetSession(pb.GetSessionRequest(session_id=sid))
    assert session.context_tokens == refreshed.tokens.total_tokens
    # A refresh that finds nothing new changes nothing.
    assert build(stub, sid, refresh_memory=True) == refreshed


def test_compaction_refreshes_the_block(stub: Stub) -> None:
    u, p = uid("u"), uid("p")
    remember(stub, "first fact", user_id=u)
    sid = open_session(stub, u, p, memory_max_tokens=300, keep_recent_tokens=60)
    turns(stub, sid, 6)
    remember(stub, "second fact", user_id=u)
    assert "second fact" not in build(stub, sid).memory_block
    plan = stub.PrepareCompaction(pb.PrepareCompactionRequest(session_id=sid))
    assert "Durable facts" not in plan.history_prompt.user  # memory_write is off
    done = stub.CommitCompaction(
        pb.CommitCompactionRequest(
            session_id=sid,
            plan_id=plan.plan_id,
            summary="## Goal\nx\n\n## Durable facts about the user/project\n- kept verbatim",
            turn_prefix_summary="PREFIX" if plan.split_turn else "",
        )
    )
    assert "kept verbatim" in done.summary and not done.proposed_memory_ids  # OFF: not read
    after = build(stub, sid)
    assert "second fact" in after.memory_block and "first fact" in after.memory_block
    assert done.memory_tokens == after.tokens.memory_tokens > 0
    meta = [list(m.metadata.keys()) for m in after.messages[:2]]
    assert meta == [["ctxwarden.memory"], ["ctxwarden.summary"]]
    assert after.tokens.total_tokens == done.tokens_after


@pytest.mark.parametrize("mode", [ses.MEMORY_WRITE_MODE_PROPOSE, ses.MEMORY_WRITE_MODE_AUTO])
def test_summaries_propose_memories(stub: Stub, mode: ses.MemoryWriteMode.ValueType) -> None:
    u, p = uid("u"), uid("p")
    sid = open_session(stub, u, p, memory_max_tokens=300, keep_recent_tokens=60, memory_write=mode)
    turns(stub, sid, 6)
    plan = stub.PrepareCompaction(pb.PrepareCompactionRequest(session_id=sid))
    assert "## Durable facts about the user/project" in plan.history_prompt.user
    summary = (
        "## Goal\nship\n\n## Durable facts about the user/project\n"
        "- [user] prefers British spelling\n- [project] deploys on Fridays\n\n## Next Steps\n1. go"
    )
    done = stub.CommitCompaction(
        pb.CommitCompactionRequest(
            session_id=sid,
            plan_id=plan.plan_id,
            summary=summary,
            turn_prefix_summary="PREFIX" if plan.split_turn else "",
        )
    )
    assert "Durable facts" not in done.summary and "## Next Steps" in done.summary
    assert len(done.proposed_memory_ids) == 2
    stored = [stub.GetMemory(mem.GetMemoryRequest(memory_id=i)) for i in done.proposed_memory_ids]
    assert [(m.text, m.user_id, m.project_id) for m in stored] == [
        ("prefers British spelling", u, p),
        ("deploys on Fridays", "", p),
    ]
    assert all(m.source_session_id == sid for m in stored)
    block = build(stub, sid).memory_block
    if mode == ses.MEMORY_WRITE_MODE_AUTO:
        assert all(m.state == mem.MEMORY_STATE_ACTIVE for m in stored)
        assert "prefers British spelling" in block and "deploys on Fridays" in block
    else:
        assert all(m.state == mem.MEMORY_STATE_PROPOSED for m in stored)
        assert block == ""
        # Approving one makes it reach sessions at their next refresh.
        stub.UpdateMemory(
            mem.UpdateMemoryRequest(
                memory=mem.Memory(memory_id=stored[1].memory_id, state=mem.MEMORY_STATE_ACTIVE),
                update_mask=mask("state"),
            )
        )
        assert "deploys on Fridays" in build(stub, sid, refresh_memory=True).memory_block


def test_explicit_proposed_memories_win_over_the_summary(stub: Stub) -> None:
    u, p = uid("u"), uid("p")
    sid = open_session(stub, u, p, keep_recent_tokens=60, memory_write=ses.MEMORY_WRITE_MODE_AUTO)
    turns(stub, sid, 6)
    plan = stub.PrepareCompaction(pb.PrepareCompactionRequest(session_id=sid))
    done = stub.CommitCompaction(
        pb.CommitCompactionRequest(
            session_id=sid,
            plan_id=plan.plan_id,
            summary="## Goal\nship\n\n## Durable facts about the user/project\n- ignored",
            turn_prefix_summary="PREFIX" if plan.split_turn else "",
            proposed_memories=[mem.ProposedMemory(text="uses tabs", key="indent")],
        )
    )
    (mid,) = done.proposed_memory_ids
    got = stub.GetMemory(mem.GetMemoryRequest(memory_id=mid))
    assert (got.text, got.key, got.user_id) == ("uses tabs", "indent", u)
    assert "- ignored" in done.summary  # the explicit list was used; the summary is kept


# -- tenancy and restart --------------------------------------------------------------------

KEY_A, KEY_B = "memory-tenant-a-key-" + "a" * 20, "memory-tenant-b-key-" + "b" * 20


@pytest.fixture
def two_tenants(backend_url: str, tmp_path: Path) -> Iterator[ServerProcess]:
    keys = tmp_path / "api-keys"
    keys.write_text(
        "".join(
            f"{t}:{hashlib.sha256(k.encode()).hexdigest()}\n"
            for t, k in (("mem-a", KEY_A), ("mem-b", KEY_B))
        )
    )
    server = ServerProcess(backend_url, log_dir=tmp_path, extra_args=["--api-keys-file", str(keys)])
    server.start()
    try:
        yield server
    finally:
        server.stop()


def test_tenants_never_see_each_others_memories(two_tenants: ServerProcess) -> None:
    a_md, b_md = (("authorization", f"Bearer {KEY_A}"),), (("authorization", f"Bearer {KEY_B}"),)
    with grpc.insecure_channel(two_tenants.target) as ch:
        stub = pb_grpc.ContextServiceStub(ch)
        u = uid("u")
        req = mem.CreateMemoryRequest(memory=mem.Memory(text="a's secret", user_id=u, key="k"))
        a = stub.CreateMemory(req, metadata=a_md)
        b = stub.CreateMemory(req, metadata=b_md)  # the same key in another tenant: no upsert
        assert a.memory_id != b.memory_id and b.etag == '"1"'
        get = mem.GetMemoryRequest(memory_id=a.memory_id)
        expect_error(
            grpc.StatusCode.NOT_FOUND, "MEMORY_NOT_FOUND", stub.GetMemory, get, metadata=b_md
        )
        delete = mem.DeleteMemoryRequest(memory_id=a.memory_id)
        expect_error(
            grpc.StatusCode.NOT_FOUND, "MEMORY_NOT_FOUND", stub.DeleteMemory, delete, metadata=b_md
        )
        listed = stub.ListMemories(mem.ListMemoriesRequest(user_id=u), metadata=b_md).memories
        assert [m.memory_id for m in listed] == [b.memory_id]
        session = ses.Session(user_id=u, policy=ses.ContextPolicy(memory_max_tokens=200))
        sid = stub.CreateSession(pb.CreateSessionRequest(session=session), metadata=b_md).session_id
        block = stub.BuildModelInput(
            pb.BuildModelInputRequest(session_id=sid), metadata=b_md
        ).memory_ids
        assert list(block) == [b.memory_id]


def test_restart_gives_the_same_block_and_bytes(backend_url: str, tmp_path: Path) -> None:
    server = ServerProcess(backend_url, log_dir=tmp_path)
    server.start()
    try:
        with grpc.insecure_channel(server.target) as ch:
            stub = pb_grpc.ContextServiceStub(ch)
            u = uid("u")
            remember(stub, "remember me", user_id=u)
            sid = open_session(stub, u, "", memory_max_tokens=200)
            append(stub, sid, user("hi"))
            remember(stub, "added after the session started", user_id=u)
            native = build(stub, sid).SerializeToString(deterministic=True)
            rendered = build(stub, sid, format=pb.MODEL_INPUT_FORMAT_ANTHROPIC_MESSAGES)
        server.restart()
        with grpc.insecure_channel(server.target) as ch:
            stub = pb_grpc.ContextServiceStub(ch)
            assert build(stub, sid).SerializeToString(deterministic=True) == native
            again = build(stub, sid, format=pb.MODEL_INPUT_FORMAT_ANTHROPIC_MESSAGES)
            assert again.rendered_json == rendered.rendered_json
            assert (
                "remember me"
                in json.loads(again.rendered_json)["messages"][0]["content"][0]["text"]
            )
    finally:
        server.stop()


def test_a_server_summariser_answer_is_read_for_durable_facts(
    backend_url: str,
    tmp_path: Path,
    fake_openai: FakeProvider,  # noqa: F811
) -> None:
    fake_openai.reply_text = (
        "## Goal\nShip.\n\n## Durable facts about the user/project\n- [project] CI runs on Linux"
    )
    with serving(backend_url, tmp_path, *openai_args(fake_openai)) as (_, stub):
        p = uid("p")
        sid = open_session(
            stub,
            uid("u"),
            p,
            memory_max_tokens=200,
            keep_recent_tokens=60,
            memory_write=ses.MEMORY_WRITE_MODE_AUTO,
        )
        turns(stub, sid, 5)
        done = stub.Compact(pb.CompactRequest(session_id=sid), timeout=60)
        prompt = history_request(fake_openai).body["messages"][1]["content"]
        assert "## Durable facts about the user/project" in prompt
        assert done.summary == "## Goal\nShip." and len(done.proposed_memory_ids) == 1
        (fact,) = stub.ListMemories(mem.ListMemoriesRequest(project_id=p)).memories
        assert (fact.text, fact.user_id, fact.memory_id) == (
            "CI runs on Linux",
            "",
            done.proposed_memory_ids[0],
        )
        assert "CI runs on Linux" in build(stub, sid).memory_block
