"""``ctxwarden export`` / ``import``: a session moved to another database, another
tenant or another ID builds the same model input, in every format and in every
replay, and keeps every stored message and checkpoint; a failed import leaves
nothing behind."""

from __future__ import annotations

import json
import secrets
from pathlib import Path

import pytest

from ctxwarden_client import Client, NotFoundError
from ctxwarden_client.v1 import context_service_pb2 as pb
from tests.support.server import ServerProcess
from tests.transfer.support import (
    api_keys,
    bearer,
    build_rich_session,
    cli,
    fresh_database,
    history,
    model_inputs,
    started,
)


def _sid(prefix: str) -> str:
    return f"{prefix}-{secrets.token_hex(4)}"


def _export(url: str, sid: str, path: Path, *extra: str) -> None:
    cli("export", sid, "--database-url", url, "-o", str(path), *extra)


def own_settings(c: Client, sid: str) -> bytes:
    """GetSession without user_state and project_state: those are shared by every session
    of the same user or project (other tests' sessions included) and are not exported."""
    session = c.get_session(sid)
    session.ClearField("user_state")
    session.ClearField("project_state")
    return session.SerializeToString(deterministic=True)


def _lines_without_time(path: Path) -> list[str]:
    import gzip

    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as f:
        lines = f.read().splitlines()
    head = json.loads(lines[0])
    head.pop("exported_time")
    return [json.dumps(head), *lines[1:]]


def test_round_trip_into_another_database(
    server: ServerProcess, backend_url: str, tmp_path: Path
) -> None:
    sid = _sid("rt")
    with Client(server.target) as c:
        build_rich_session(c, sid)
        before = model_inputs(c, sid)
        stored = history(c, sid)
        session = own_settings(c, sid)
    exported = tmp_path / "session.jsonl"
    _export(backend_url, sid, exported)
    records = [json.loads(line) for line in exported.read_text(encoding="utf-8").splitlines()]
    assert records[0]["format"] == "ctxwarden.session" and records[0]["version"] == 2
    kinds = [r.get("type") for r in records[1:]]
    assert kinds[0] == "session" and kinds[-1] == "end"
    assert {"revision", "checkpoint", "message"} <= set(kinds)
    states = {r["state"] for r in records if r.get("type") == "message"}
    assert states == {"active", "rolled_back"}
    assert any(r.get("visibility") == "history_only" for r in records)
    assert any(r.get("superseded_at_seq") for r in records if r.get("type") == "checkpoint")

    with fresh_database(backend_url, tmp_path) as target:
        out = cli("import", str(exported), "--database-url", target)
        assert f"imported {sid}:" in out.stdout
        proc = started(target, tmp_path)
        try:
            with Client(proc.target) as c:
                after = model_inputs(c, sid)
                assert history(c, sid) == stored
                assert own_settings(c, sid) == session
        finally:
            proc.stop()
        assert after.keys() == before.keys()
        differ = [k for k in before if before[k] != after[k]]
        assert not differ, f"model inputs differ after import: {differ}"
        again = tmp_path / "again.jsonl.gz"
        _export(target, sid, again)
        assert _lines_without_time(again) == _lines_without_time(exported)


def _without_token(inputs: dict[str, bytes]) -> dict[str, bytes]:
    out = {}
    for k, v in inputs.items():
        mi = pb.ModelInput.FromString(v)
        mi.resume_token = ""
        out[k] = mi.SerializeToString(deterministic=True)
    return out


def test_import_into_another_tenant(
    server: ServerProcess, backend_url: str, tmp_path: Path
) -> None:
    sid = _sid("tenant")
    with Client(server.target) as c:
        build_rich_session(c, sid, turns=10)
        before = model_inputs(c, sid)
        stored = history(c, sid)
    exported = tmp_path / "session.jsonl"
    _export(backend_url, sid, exported)
    with fresh_database(backend_url, tmp_path) as target:
        cli("import", str(exported), "--database-url", target, "--tenant", "acme")
        keys = api_keys(tmp_path / "keys", {"acme": "key-acme", "other": "key-other"})
        proc = started(target, tmp_path, ["--api-keys-file", str(keys)])
        try:
            with Client(proc.target, metadata=bearer("key-acme")) as c:
                # The resume token names the session's internal (tenant-scoped) key;
                # everything the model sees is the same bytes.
                assert _without_token(model_inputs(c, sid)) == _without_token(before)
                assert history(c, sid) == stored
            with (
                Client(proc.target, metadata=bearer("key-other")) as c,
                pytest.raises(NotFoundError),
            ):
                c.get_session(sid)
        finally:
            proc.stop()
        # Exported from the tenant, it is the same file again.
        back = tmp_path / "back.jsonl"
        _export(target, sid, back, "--tenant", "acme")
        lines, original = _lines_without_time(back), _lines_without_time(exported)
        assert json.loads(lines[0])["source"] == {"session_id": sid, "tenant": "acme"}
        moved = json.loads(original[1])
        moved["tenant"] = "acme"
        assert json.loads(lines[1]) == moved
        assert lines[2:] == original[2:]


def test_copy_in_the_same_database_gets_new_checkpoint_ids(
    server: ServerProcess, backend_url: str, tmp_path: Path
) -> None:
    sid, copy = _sid("orig"), _sid("copy")
    with Client(server.target) as c:
        build_rich_session(c, sid, turns=8)
        exported = tmp_path / "session.jsonl"
        _export(backend_url, sid, exported)
        out = cli("import", str(exported), "--database-url", backend_url, "--session-id", copy)
        assert "checkpoint IDs taken, renamed" in out.stdout
        original = c.build_model_input(sid)
        copied = c.build_model_input(copy)
        originals = {x.compaction_id for x in c.list_compactions(sid)}
        copies = {x.compaction_id for x in c.list_compactions(copy)}
        assert originals and not originals & copies
        assert copied.compaction_id in copies
        # The same input but for the IDs that name the session and its checkpoint.
        copied.session_id, copied.compaction_id = original.session_id, original.compaction_id
        copied.messages[0].metadata["ctxwarden.summary"] = original.compaction_id
        copied.resume_token = original.resume_token
        assert copied == original
        history_a, _ = history(c, sid)
        history_b, _ = history(c, copy)
        assert history_a == history_b


def test_failed_imports_leave_no_session(
    server: ServerProcess, backend_url: str, tmp_path: Path
) -> None:
    sid = _sid("atomic")
    with Client(server.target) as c:
        build_rich_session(c, sid, turns=6)
        exported = tmp_path / "session.jsonl"
        _export(backend_url, sid, exported)
        lines = exported.read_text(encoding="utf-8").splitlines(keepends=True)
        broken = {
            "truncated": lines[:-1],  # no trailer
            "cut in a message": [*lines[:-3], lines[-3][:40] + "\n", *lines[-2:]],
            "a count off": [*lines[:-3], *lines[-2:]],
            "not an export": ['{"type":"session","id":"x"}\n'],
        }
        for n, (name, content) in enumerate(broken.items()):
            target = f"{sid}-{n}"
            path = tmp_path / f"broken-{n}.jsonl"
            path.write_text("".join(content), encoding="utf-8")
            proc = cli(
                "import",
                str(path),
                "--database-url",
                backend_url,
                "--session-id",
                target,
                check=False,
            )
            assert proc.returncode == 1, name
            assert "nothing imported" in proc.stderr, name
            with pytest.raises(NotFoundError):
                c.get_session(target)
        # A live session of that ID: refused, the session unchanged.
        before = c.build_model_input(sid).SerializeToString(deterministic=True)
        proc = cli("import", str(exported), "--database-url", backend_url, check=False)
        assert proc.returncode == 1 and "exists" in proc.stderr
        assert c.build_model_input(sid).SerializeToString(deterministic=True) == before
        # A deleted one moves out of the way, as on CreateSession (its checkpoints
        # stay stored, so the import's get new IDs).
        messages, _ = history(c, sid)
        c.delete_session(sid)
        out = cli("import", str(exported), "--database-url", backend_url)
        assert "renamed" in out.stdout
        assert history(c, sid)[0] == messages
