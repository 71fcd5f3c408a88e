"""Examples the whole-API model test found, replayed as plain tests with its checks."""

from __future__ import annotations

import subprocess
import uuid
from pathlib import Path

import grpc
import pytest
from google.protobuf import field_mask_pb2

from ctxwarden.v1 import context_service_pb2 as pb
from ctxwarden.v1 import context_service_pb2_grpc as pb_grpc
from ctxwarden.v1 import message_pb2 as m
from ctxwarden.v1 import session_pb2 as ses
from ctxwarden_client import Client
from tests.model import checks
from tests.model.cache import R, expected, input_tokens
from tests.support.builders import assistant, user
from tests.support.server import CLI, ServerProcess


def test_a_settings_update_that_leaves_the_input_keeps_its_cache_prefix(
    server_target: str,
) -> None:
    """UpdateSession (labels, title) seals the view's fingerprints anew: the ledger
    reported VIEW_CHANGE with only the head shared although every byte of the input
    was the same (found with create, call_tools, update_labels)."""
    sid = f"reg-{uuid.uuid4().hex[:12]}"
    with grpc.insecure_channel(server_target) as channel:
        stub = pb_grpc.ContextServiceStub(channel)
        stub.CreateSession(
            pb.CreateSessionRequest(
                session_id=sid,
                session=ses.Session(system_prompt="Model test.", labels={"team": "red"}),
            )
        )
        calls = [("call_1", "read", {"path": "a.py"}), ("call_2", "read", {"path": "b.py"})]
        stub.AppendMessages(
            pb.AppendMessagesRequest(
                session_id=sid, messages=[user("go"), assistant("calling", calls=calls)]
            )
        )

        def build(fmt: pb.ModelInputFormat.ValueType) -> pb.ModelInput:
            req = pb.BuildModelInputRequest(
                session_id=sid, format=fmt, report_cache_prefix=True, view=pb.MODEL_INPUT_VIEW_FULL
            )
            return stub.BuildModelInput(req)

        formats = [pb.MODEL_INPUT_FORMAT_NATIVE, *checks.RENDERED.values()]
        before = {fmt: build(fmt) for fmt in formats}
        for paths, session in (
            (["labels"], ses.Session(session_id=sid, labels={"team": "blue"})),
            (["title"], ses.Session(session_id=sid, title="renamed")),
        ):
            mask = field_mask_pb2.FieldMask(paths=paths)
            stub.UpdateSession(pb.UpdateSessionRequest(session=session, update_mask=mask))
            for fmt in formats:
                mi = build(fmt)
                assert checks.normalized(mi) == checks.normalized(before[fmt]), paths
                want = expected(before[fmt], mi, fmt == pb.MODEL_INPUT_FORMAT_NATIVE)
                assert want.reason == R.CACHE_BREAK_REASON_UNSPECIFIED
                got = mi.cache_prefix
                assert (got.break_reason, got.shared_tokens) == (want.reason, input_tokens(mi)), (
                    paths,
                    fmt,
                    got,
                )
                before[fmt] = mi


@pytest.mark.parametrize("backend_url", ["sqlite"], indirect=True)  # two CLI runs: one backend
def test_an_imported_fork_replays_as_the_fork(server: ServerProcess, tmp_path: Path) -> None:
    """A session starts with its tenant's and model's calibration (here 4.0, after
    reported usage); a fork replays its inherited seqs with it, and so does an import of
    the source, but an import of the fork replays them uncalibrated (ratio 1.0; with an
    estimating tokenizer fewer total tokens too). Found by the model test
    (--hypothesis-seed=6 and 8, 6 examples of 60 steps): an import of a fork, replayed
    at seq 1."""
    run = uuid.uuid4().hex[:8]
    model = f"gpt-4o-{run}"  # a calibration of this test's own
    with grpc.insecure_channel(server.target) as channel:
        stub = pb_grpc.ContextServiceStub(channel)

        def create(sid: str) -> None:
            session = ses.Session(system_prompt="Model test.", model=model)
            stub.CreateSession(pb.CreateSessionRequest(session_id=sid, session=session))

        def append(sid: str, *msgs: m.Message) -> None:
            stub.AppendMessages(pb.AppendMessagesRequest(session_id=sid, messages=msgs))

        def replay(sid: str) -> pb.TokenBreakdown:
            req = pb.BuildModelInputRequest(session_id=sid, as_of_seq=1)
            return stub.BuildModelInput(req).tokens

        create(f"cal-{run}")
        for i in range(3):
            answer = assistant(f"answer {i}")
            answer.usage.CopyFrom(m.Usage(input_tokens=400, output_tokens=9))
            append(f"cal-{run}", user(f"question {i}"), answer)
        source = f"src-{run}"
        create(source)
        append(source, user("x"), assistant("y"))
        fork = stub.ForkSession(pb.ForkSessionRequest(session_id=source, at_seq=3)).session_id
        append(fork, user("z"))
        assert replay(fork).estimate_error_ratio == replay(source).estimate_error_ratio > 1
        imported = _exported_and_imported(server, fork, f"imp-{run}", tmp_path)
        assert replay(imported) == replay(fork)


@pytest.mark.parametrize("backend_url", ["sqlite"], indirect=True)  # two CLI runs: one backend
def test_an_imported_fork_of_a_fork_replays_every_seq_as_the_fork(
    server: ServerProcess, tmp_path: Path
) -> None:
    """The settings and memory blocks each inherited seq replays with travel with a
    fork's file: the source changes its system prompt twice and refreshes its memory
    block, a fork of it changes the prompt once more, and a fork of that fork is
    exported; its import replays every seq as the fork does (before: the seqs before its
    fork point replayed with its current settings, "four" at seq 1, and no block)."""
    run = uuid.uuid4().hex[:8]
    owner = f"mu-{run}"
    with Client(server.target) as c:

        def append(sid: str, *texts: str) -> None:
            c.append_messages(
                sid, [user(t) if i % 2 == 0 else assistant(t) for i, t in enumerate(texts)]
            )

        def prompt(sid: str, text: str) -> None:
            c.update_session(ses.Session(session_id=sid, system_prompt=text), ["system_prompt"])

        def replays(sid: str, last: int) -> list[bytes]:
            return [
                checks.normalized(c.build_model_input(sid, as_of_seq=k)) for k in range(1, last + 2)
            ]

        c.create_memory("The user is called Sam.", user_id=owner, pinned=True)
        source = f"src-{run}"
        policy = ses.ContextPolicy(memory_max_tokens=300)
        c.create_session(session_id=source, system_prompt="one", user_id=owner, policy=policy)
        append(source, "a", "b")
        prompt(source, "two")  # at seq 2
        c.create_memory("The user deploys on Fridays.", user_id=owner, pinned=True)
        c.build_model_input(source, refresh_memory=True)  # a block from seq 3 on
        append(source, "c", "d")
        prompt(source, "three")  # at seq 4
        append(source, "e", "f")
        first = c.fork_session(source, 6).session_id
        prompt(first, "four")  # the fork's own, at seq 5
        append(first, "g", "h")
        second = c.fork_session(first, 8).session_id
        append(second, "i")
        expected = replays(second, 8)
    assert len(set(expected)) == len(expected)  # every seq replays differently
    imported = _exported_and_imported(server, second, f"imp-{run}", tmp_path)
    with Client(server.target) as c:
        got = replays(imported, 8)
    for k, (want, have) in enumerate(zip(expected, got, strict=True), start=1):
        assert have == want, f"replay at {k}:\n{checks.diff(want, have)}"


@pytest.mark.parametrize("backend_url", ["sqlite"], indirect=True)  # two CLI runs: one backend
def test_an_imported_fork_replays_between_two_compactions_of_its_source(
    server: ServerProcess, tmp_path: Path
) -> None:
    """The source compacts twice, then is forked at its end; replayed between the two
    compactions, the fork shows the first summary, and so does its import (before: all
    the messages, seqs 7 to 12 of 15 differed; the file held only the checkpoint in force
    at the fork point)."""
    run = uuid.uuid4().hex[:8]
    source = f"src-{run}"
    with Client(server.target) as c:

        def turn(i: int) -> None:
            c.append_messages(source, [user(f"question {i} " * 30), assistant(f"answer {i} " * 30)])

        def compact() -> None:
            plan = c.prepare_compaction(source)
            prefix = "The turn so far." if plan.split_turn else ""
            c.commit_compaction(source, plan.plan_id, "Summary.", turn_prefix_summary=prefix)

        policy = ses.ContextPolicy(keep_recent_tokens=80)
        c.create_session(session_id=source, system_prompt="p", policy=policy)
        for i in range(6):
            turn(i)
            if i in (2, 5):
                compact()
        turn(6)
        last = c.get_session(source).last_seq
        fork = c.fork_session(source, last + 1).session_id
        expected = [
            checks.normalized(c.build_model_input(fork, as_of_seq=k)) for k in range(1, last + 2)
        ]
    imported = _exported_and_imported(server, fork, f"imp-{run}", tmp_path)
    with Client(server.target) as c:
        got = [
            checks.normalized(c.build_model_input(imported, as_of_seq=k))
            for k in range(1, last + 2)
        ]
    assert [k for k, (a, b) in enumerate(zip(expected, got, strict=True), 1) if a != b] == []
    # A pi file has no replays: the source's older checkpoints stay out of it, and are
    # not counted as superseded ones left out (they are not).
    pi = subprocess.run(
        [
            *CLI,
            "export",
            fork,
            "--database-url",
            server.database_url,
            "--to",
            "pi",
            "-o",
            str(tmp_path / "pi"),
        ],
        check=True,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "0 superseded checkpoints left out" in pi.stdout + pi.stderr


def _exported_and_imported(server: ServerProcess, sid: str, new_sid: str, tmp_path: Path) -> str:
    """``ctxwarden export`` of ``sid`` and ``import`` of the file as ``new_sid``."""
    path = tmp_path / f"{sid}.json"
    url = server.database_url
    for args in (
        ["export", sid, "--database-url", url, "-o", str(path)],
        ["import", str(path), "--database-url", url, "--session-id", new_sid],
    ):
        subprocess.run([*CLI, *args], check=True, capture_output=True, timeout=120)
    return new_sid
