"""Export and import carry a session's frozen memory block and its history
(issue #25, defect 9): imported into a database that holds none of the
memories, the session builds the same model input, native and rendered, now
and in every replay; an export file of version 1 (no memory records) still
imports."""

from __future__ import annotations

import json
import secrets
from pathlib import Path

from ctxwarden_client import Client, assistant, session_pb2, user
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

RENDERED = pb.MODEL_INPUT_FORMAT_OPENAI_CHAT


def _turn(c: Client, sid: str, i: int) -> None:
    c.append_messages(sid, [user(f"question {i} " * 30), assistant(f"answer {i} " * 30)])


def _session_with_memory(c: Client, sid: str) -> None:
    """A block at creation, a refresh, a compaction that selects it again."""
    u = f"mu-{secrets.token_hex(4)}"
    c.create_memory("The user is called Sam.", user_id=u, pinned=True)
    policy = session_pb2.ContextPolicy(memory_max_tokens=300, keep_recent_tokens=80)
    c.create_session(session_id=sid, user_id=u, model="gpt-4o", policy=policy)
    for i in range(3):
        _turn(c, sid, i)
    c.create_memory("The user deploys on Fridays.", user_id=u)
    c.build_model_input(sid, refresh_memory=True)
    for i in range(3, 6):
        _turn(c, sid, i)
    c.create_memory("The user writes Go.", user_id=u)
    plan = c.prepare_compaction(sid)
    prefix = "The turn so far." if plan.split_turn else ""
    c.commit_compaction(sid, plan.plan_id, "Summary.", turn_prefix_summary=prefix)
    _turn(c, sid, 6)


def _rendered_replays(c: Client, sid: str) -> dict[int, str]:
    last = c.get_session(sid).last_seq
    return {
        k: c.build_model_input(sid, as_of_seq=k, format=RENDERED).rendered_json
        for k in range(1, last + 2)
    }


def test_the_memory_block_and_its_history_survive_export_and_import(
    server: ServerProcess, backend_url: str, tmp_path: Path
) -> None:
    sid = f"mt-{secrets.token_hex(4)}"
    with Client(server.target) as c:
        _session_with_memory(c, sid)
        before = model_inputs(c, sid)
        rendered = _rendered_replays(c, sid)
        stored = history(c, sid)
        blocks = {c.build_model_input(sid, as_of_seq=k).memory_block for k in rendered}
    assert len(blocks) == 3 and all(blocks)  # created, refreshed, compacted
    exported = tmp_path / "session.jsonl"
    cli("export", sid, "--database-url", backend_url, "-o", str(exported))
    with fresh_database(backend_url, tmp_path) as target:
        cli("import", str(exported), "--database-url", target)
        proc = started(target, tmp_path)
        try:
            with Client(proc.target) as c:
                after = model_inputs(c, sid)
                assert _rendered_replays(c, sid) == rendered
                assert history(c, sid) == stored
        finally:
            proc.stop()
        again = tmp_path / "again.jsonl"
        cli("export", sid, "--database-url", target, "-o", str(again))
        assert again.read_text().splitlines()[1:] == exported.read_text().splitlines()[1:]
    assert after.keys() == before.keys()
    assert [k for k in before if before[k] != after[k]] == []
    records = [json.loads(line) for line in exported.read_text(encoding="utf-8").splitlines()]
    assert records[0]["version"] == 2
    assert records[1]["memory"]["text"] and records[1]["memory"]["memory_ids"]
    kinds = [r.get("type") for r in records[1:]]
    assert kinds.count("memory_block") == 3 and records[-1]["memory_blocks"] == 3


def _as_version_1(path: Path, out: Path) -> None:
    """The file as version 1 wrote it: no memory records, no memory counts."""
    lines = []
    for line in path.read_text(encoding="utf-8").splitlines():
        record = json.loads(line)
        if record.get("format"):
            record["version"] = 1
            record["records"] = ["session", "revision*", "checkpoint*", "message*", "end"]
        if record.get("type") == "memory_block":
            continue
        record.pop("memory", None)
        record.pop("memory_blocks", None)
        lines.append(json.dumps(record, ensure_ascii=False, separators=(",", ":")))
    out.write_text("\n".join(lines) + "\n", encoding="utf-8")


def test_a_version_1_file_still_imports(
    server: ServerProcess, backend_url: str, tmp_path: Path
) -> None:
    sid = f"v1-{secrets.token_hex(4)}"
    with Client(server.target) as c:
        build_rich_session(c, sid, turns=6)
        before = model_inputs(c, sid)
    exported, old = tmp_path / "v2.jsonl", tmp_path / "v1.jsonl"
    cli("export", sid, "--database-url", backend_url, "-o", str(exported))
    _as_version_1(exported, old)
    with fresh_database(backend_url, tmp_path) as target:
        out = cli("import", str(old), "--database-url", target)
        assert f"imported {sid}:" in out.stdout
        proc = started(target, tmp_path)
        try:
            with Client(proc.target) as c:
                assert model_inputs(c, sid) == before
        finally:
            proc.stop()
