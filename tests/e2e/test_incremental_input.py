"""Incremental BuildModelInput: resume_token in, only the new messages out."""

from __future__ import annotations

from google.protobuf import field_mask_pb2

import ctxwarden_client as cw
from ctxwarden.v1 import context_service_pb2 as pb
from ctxwarden.v1 import session_pb2 as ses
from tests.e2e.conftest import NewSession, Stub
from tests.e2e.test_messages import append
from tests.support.builders import assistant, result, user


def build(stub: Stub, sid: str, token: str = "") -> pb.ModelInput:
    return stub.BuildModelInput(pb.BuildModelInputRequest(session_id=sid, resume_token=token))


def merged(held: pb.ModelInput, delta: pb.ModelInput) -> pb.ModelInput:
    out = pb.ModelInput()
    out.CopyFrom(delta)
    del out.messages[:]
    out.messages.extend(held.messages[: delta.messages_offset])
    out.messages.extend(delta.messages)
    out.messages_offset = 0
    return out


def test_only_new_messages_are_sent_and_the_merge_is_exact(
    stub: Stub, new_session: NewSession
) -> None:
    sid = new_session(system_prompt="Be brief.").session_id
    append(stub, sid, user("read two files"), assistant("ok", [("a", "read", {"path": "x"})]))
    first = build(stub, sid)
    assert first.messages_offset == 0 and first.resume_token
    # The open call is answered by a synthetic result, which is not stable.
    assert [m.seq for m in first.messages] == [1, 2, 0]
    held = first
    steps = [
        (result("a", "contents of x"),),
        (assistant("and y", [("b", "read", {"path": "y"})]),),
        (result("b", "contents of y"), assistant("done")),
        (user("thanks"),),
    ]
    for msgs in steps:
        append(stub, sid, *msgs)
        delta = build(stub, sid, held.resume_token)
        full = build(stub, sid)
        assert delta.messages_offset > 0
        assert len(delta.messages) < len(full.messages)
        assert merged(held, delta) == full
        assert delta.ByteSize() < full.ByteSize()
        held = full
    # Nothing new: nothing but the header is sent.
    again = build(stub, sid, held.resume_token)
    assert list(again.messages) == [] and again.messages_offset == len(held.messages)


def test_a_rollback_keeps_what_it_did_not_touch(stub: Stub, new_session: NewSession) -> None:
    sid = new_session().session_id
    append(stub, sid, user("hi"), assistant("hello"))
    early = build(stub, sid)
    append(stub, sid, user("more"), assistant("sure"))
    late = build(stub, sid)
    stub.RollbackTurn(pb.RollbackTurnRequest(session_id=sid, to_seq=3))
    full = build(stub, sid)
    assert [m.seq for m in full.messages] == [1, 2, 3]
    # The first two messages are unchanged: a client holding them keeps them.
    kept = build(stub, sid, early.resume_token)
    assert kept.messages_offset == 2 and [m.seq for m in kept.messages] == [3]
    # The fourth message is gone: a client holding it gets the whole input.
    redo = build(stub, sid, late.resume_token)
    assert redo.messages_offset == 0 and redo == full


def test_a_rollback_or_new_settings_start_over(stub: Stub, new_session: NewSession) -> None:
    s = new_session(system_prompt="one")
    sid = s.session_id
    append(stub, sid, user("hi"), assistant("hello"), user("more"))
    token = build(stub, sid).resume_token
    stub.RollbackTurn(pb.RollbackTurnRequest(session_id=sid, to_seq=0))
    after = build(stub, sid, token)
    assert after.messages_offset == 0 and list(after.messages) == []
    append(stub, sid, user("hi again"))
    token = build(stub, sid).resume_token
    stub.UpdateSession(
        pb.UpdateSessionRequest(
            session=ses.Session(session_id=sid, system_prompt="two"),
            update_mask=field_mask_pb2.FieldMask(paths=["system_prompt"]),
        )
    )
    changed = build(stub, sid, token)
    assert changed.messages_offset == 0 and changed.system_prompt == "two"
    assert [m.seq for m in changed.messages] == [4]


def test_foreign_or_garbage_tokens_get_the_whole_input(stub: Stub, new_session: NewSession) -> None:
    a = new_session().session_id
    b = new_session().session_id
    append(stub, a, user("in a"))
    append(stub, b, user("in b"), assistant("reply in b"))
    token_a = build(stub, a).resume_token
    full_b = build(stub, b)
    tokens = (token_a, "garbage", ".", "x.99999999999999999999", full_b.resume_token + "0")
    for token in (*tokens, "1.0000000000000000", "99.ffffffffffffffff", "-1.00"):
        got = build(stub, b, token)
        assert got.messages_offset == 0 and got == full_b, token


def test_stubbing_policies_are_not_resumable(stub: Stub, new_session: NewSession) -> None:
    sid = new_session(policy=ses.ContextPolicy(keep_tool_results=1)).session_id
    append(stub, sid, user("go"), assistant(calls=[("a", "read", {})]), result("a", "A" * 50))
    mi = build(stub, sid)
    assert mi.resume_token == ""
    assert build(stub, sid, "anything").messages_offset == 0


def test_python_client_incremental_equals_full(server_target: str, new_session: NewSession) -> None:
    sid = new_session(system_prompt="sp").session_id
    with cw.Client(server_target) as client:
        offsets: list[int] = []
        merge = client._inputs.merge

        def recording(
            session_id: str, received: cw.context_service_pb2.ModelInput
        ) -> cw.context_service_pb2.ModelInput:
            offsets.append(received.messages_offset)  # what the server sent
            return merge(session_id, received)

        client._inputs.merge = recording  # type: ignore[method-assign]
        for i in range(6):
            client.append_messages(sid, [cw.user(f"q{i}"), cw.assistant(f"a{i}")])
            inc = client.build_model_input(sid, incremental=True)
            full = client.build_model_input(sid)
            assert inc.messages_offset == 0
            assert inc == full
        # Every call after the first was answered with only the new messages.
        assert offsets == [0, 2, 4, 6, 8, 10]
