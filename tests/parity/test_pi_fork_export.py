"""``export --to pi`` of a session with forks: one pi file, each fork a branch.

The session is made through the API: forks before and after a compaction, a
fork of a fork, a fork of a fork that was deleted, a fork whose parent rolled
back the messages it shares (the fork still sees them), a fork at the session's
end that adds messages (its branch hangs off the session's last entry) and one
that adds nothing (pi has no leaf for it). pi's own ``SessionManager`` opens the
exported file: at the file's last entry it builds the session's context, and
branched to each fork's leaf it builds that fork's, as ``BuildModelInput``
gives them. Imported back (``import --from pi``) every fork's model input is
the same again.
"""

from __future__ import annotations

import json
import secrets
from pathlib import Path

from ctxwarden_client import Client, assistant, user
from ctxwarden_client.v1 import context_service_pb2 as pb
from tests.parity.test_pi_cut_parity import node as node
from tests.parity.test_pi_sessions import ctxwarden_llm, pi_llm, run_pi
from tests.support.server import ServerProcess
from tests.transfer.support import cli


def _turns(c: Client, sid: str, name: str, first: int, count: int) -> None:
    for i in range(first, first + count):
        question = user(f"{name} question {i} " * 12)
        c.append_messages(sid, [question, assistant(f"{name} answer {i}")])


def _compact(c: Client, sid: str, summary: str) -> None:
    plan = c.prepare_compaction(sid, keep_recent_tokens=120)
    prefix = "The turn so far." if plan.split_turn else ""
    c.commit_compaction(sid, plan.plan_id, summary, turn_prefix_summary=prefix)


def _build(c: Client, sid: str) -> dict[str, str]:
    """The sessions, by name (each fork made with ForkSession; see the module doc)."""
    ids = {"main": sid}

    def fork(name: str, of: str, at_seq: int = 0) -> str:
        ids[name] = c.fork_session(ids[of], at_seq, new_session_id=f"{sid}-{name}").session_id
        return ids[name]

    c.create_session(session_id=sid, system_prompt="Be brief.", model="gpt-4o")
    _turns(c, sid, "main", 0, 4)
    _turns(c, fork("early", "main", at_seq=5), "early", 0, 2)
    _turns(c, sid, "main", 4, 4)
    _compact(c, sid, "Questions 0-5 of main were answered.")
    _turns(c, fork("afterCompaction", "main"), "after", 0, 3)
    _compact(c, ids["afterCompaction"], "The fork answered its own questions.")
    _turns(c, fork("forkOfFork", "afterCompaction"), "ff", 0, 1)
    _turns(c, ids["afterCompaction"], "after", 3, 1)
    _turns(c, fork("deleted", "main"), "deleted", 0, 1)
    _turns(c, fork("ofDeleted", "deleted"), "of-deleted", 0, 1)
    c.delete_session(ids["deleted"])
    del ids["deleted"]
    _turns(c, sid, "main", 8, 2)
    last = c.get_session(sid).last_seq
    _turns(c, fork("sharesRolledBack", "main"), "shares", 0, 1)
    c.rollback_turn(sid, to_seq=last - 2)  # main drops its last turn; the fork keeps it
    _turns(c, sid, "main", 10, 2)
    fork("nothingOwn", "main")
    _turns(c, fork("atTheEnd", "main"), "end", 0, 1)
    return ids


def test_forks_are_written_as_pi_branches(
    node: str, server: ServerProcess, backend_url: str, tmp_path: Path
) -> None:
    sid = f"pi-forks-{secrets.token_hex(3)}"
    with Client(server.target) as c:
        ids = _build(c, sid)
        expected = {
            name: ctxwarden_llm(c.build_model_input(key, view=pb.MODEL_INPUT_VIEW_FULL))
            for name, key in ids.items()
        }
    path = tmp_path / "forks.jsonl"
    out = cli("export", sid, "--database-url", backend_url, "--to", "pi", "-o", str(path))
    lines = out.stderr.strip().splitlines()
    assert f"{len(ids) - 2} forks as branches" in lines[0], out.stderr
    leaves = dict(line.split(": leaf ") for line in lines[1:] if ": leaf " in line)
    leaves = {k.removeprefix("  fork "): v for k, v in leaves.items()}
    assert set(leaves) == {key for name, key in ids.items() if name not in ("main", "nothingOwn")}
    assert f"  fork {ids['nothingOwn']}: no branch of its own" in out.stderr

    [opened] = run_pi(node, "context", str(path))
    # pi opens the file at the session, and has one more leaf per fork with a branch.
    assert pi_llm(opened["llm"]) == expected["main"]
    by_leaf = {leaf["id"]: pi_llm(leaf["llm"]) for leaf in opened["leaves"]}
    # The session's last entry has a child (the branch of the fork at the end).
    assert set(by_leaf) == set(leaves.values())
    names = {key: name for name, key in ids.items()}
    for key, leaf in leaves.items():
        assert by_leaf[leaf] == expected[names[key]], names[key]

    # Shared, not repeated: one entry per checkpoint, each message once (the fork
    # that still sees main's rolled-back turn holds that turn itself).
    entries = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()[1:]]
    assert len({e["id"] for e in entries}) == len(entries)
    assert sum(e["type"] == "compaction" for e in entries) == 2
    texts = [json.dumps(e["message"]["content"]) for e in entries if e["type"] == "message"]
    assert len(texts) == len(set(texts))
    assert any("main question 9 " in t for t in texts)
    # The branch of the fork at the end hangs off the session's last entry, written last.
    assert entries[-1]["id"] == opened["leaf"]
    assert any(e["parentId"] == opened["leaf"] for e in entries[:-1])

    # Back into ctxwarden: the session and each fork give the same model input again.
    again = f"pi-back-{secrets.token_hex(3)}"
    cli("import", "--from", "pi", str(path), "--database-url", backend_url, "--session-id", again)
    with Client(server.target) as c:
        got = c.build_model_input(again, view=pb.MODEL_INPUT_VIEW_FULL)
        assert ctxwarden_llm(got) == expected["main"]
        for key, leaf in leaves.items():
            mi = c.build_model_input(f"{again}.{leaf}", view=pb.MODEL_INPUT_VIEW_FULL)
            assert ctxwarden_llm(mi) == expected[names[key]], names[key]


def test_no_forks_writes_the_session_alone(
    node: str, server: ServerProcess, backend_url: str, tmp_path: Path
) -> None:
    sid = f"pi-alone-{secrets.token_hex(3)}"
    with Client(server.target) as c:
        c.create_session(session_id=sid, system_prompt="Be brief.")
        _turns(c, sid, "main", 0, 3)
        _turns(c, c.fork_session(sid, 3).session_id, "fork", 0, 2)
        expected = ctxwarden_llm(c.build_model_input(sid, view=pb.MODEL_INPUT_VIEW_FULL))
    path = tmp_path / "alone.jsonl"
    out = cli(
        "export", sid, "--database-url", backend_url, "--to", "pi", "--no-forks", "-o", str(path)
    )
    assert "0 forks as branches" in out.stderr
    [opened] = run_pi(node, "context", str(path))
    assert [pi_llm(leaf["llm"]) for leaf in opened["leaves"]] == [expected]
