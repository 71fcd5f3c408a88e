"""Exporting a fork writes its whole effective history (what it shares with its
source included) and its lineage; imported elsewhere, it builds the same model
input, now and in every replay, before its fork point too (with the source's
settings, memory and checkpoints of then, which the import lists among its own)."""

from __future__ import annotations

import json
import secrets
from pathlib import Path

from ctxwarden_client import Client, assistant, user
from ctxwarden_client.v1 import context_service_pb2 as pb
from tests.support.server import ServerProcess
from tests.transfer.support import (
    build_rich_session,
    cli,
    fresh_database,
    history,
    model_inputs,
    started,
)


def test_an_exported_fork_carries_its_history_and_lineage(
    server: ServerProcess, backend_url: str, tmp_path: Path
) -> None:
    src = f"fsrc-{secrets.token_hex(4)}"
    with Client(server.target) as c:
        build_rich_session(c, src)
        at = c.get_session(src).last_seq - 3
        fork = c.fork_session(src, at).session_id
        c.append_messages(fork, [user("only in the fork"), assistant("yes")])
        c.rollback_turn(fork, to_seq=at - 2)  # reaches into what it inherited
        c.append_messages(fork, [user("again"), assistant("ok")])
        before = model_inputs(c, fork)
        stored = history(c, fork)
        session = c.get_session(fork)
        older = {  # the source's, from before the fork point
            x.compaction_id for x in c.list_compactions(src) if x.at_seq < at - 1
        }
    exported = tmp_path / "fork.jsonl"
    cli("export", fork, "--database-url", backend_url, "-o", str(exported))
    records = [json.loads(line) for line in exported.read_text(encoding="utf-8").splitlines()]
    assert records[1]["lineage"] == {
        "parent_session_id": src,
        "parent_seq": at - 2,
        "fork_seq": at,
    }
    seqs = [r["seq"] for r in records if r.get("type") == "message"]
    assert seqs == list(range(1, session.last_seq + 1))
    with fresh_database(backend_url, tmp_path) as target:
        cli("import", str(exported), "--database-url", target)
        proc = started(target, tmp_path)
        try:
            with Client(proc.target) as c:
                after = model_inputs(c, fork)
                messages, compactions = history(c, fork)
                listed = list(c.list_compactions(fork))
                imported = c.get_session(fork)
        finally:
            proc.stop()
    assert imported.parent_session_id == "" and imported.last_seq == session.last_seq
    assert messages == stored[0]
    assert set(stored[1]) <= set(compactions)  # the fork's own, as they were
    extra = {
        x.compaction_id: x
        for x in listed
        if x.SerializeToString(deterministic=True) not in stored[1]
    }
    assert extra and set(extra) <= older
    assert all(x.superseded for x in extra.values())  # from the fork point on, its own apply
    assert len(before) > 5
    inherited = [k for k in before if k.startswith("as_of_seq ") and int(k.split()[1]) < at]
    assert [k for k in before if k not in inherited and before[k] != after[k]] == []
    # Before the fork point the fork replays its source: the same input, but for the
    # resume token, which names the source's settings revision (the import numbers the
    # inherited ones up to 0).
    assert [k for k in inherited if _untokened(before[k]) != _untokened(after[k])] == []


def _untokened(data: bytes) -> bytes:
    mi = pb.ModelInput.FromString(data)
    mi.resume_token = ""
    return mi.SerializeToString(deterministic=True)
