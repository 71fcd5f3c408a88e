"""A pi file with a tree of branches: ``import --from pi`` makes the active branch
the session and every other branch a fork, sharing the stored rows up to its
branch point as ForkSession does, in one transaction.

pi's own ``SessionManager`` writes the tree (``pi_sessions.mjs``, scenario
``tree``): branches off the main line before, right before and after a
compaction, branches off other branches (forks of forks) before and after a
branch's own compaction, a compaction at a branch point, branch summaries and a
second root. For every leaf, pi's context (the file opened and branched to the
leaf) equals ``BuildModelInput`` of the leaf's session or fork.
"""

from __future__ import annotations

import asyncio
import json
import secrets
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select

from ctxwarden.store.engine import make_engine
from ctxwarden.store.tables import M
from ctxwarden_client import Client, NotFoundError, assistant, user
from ctxwarden_client.v1 import context_service_pb2 as pb
from tests.parity.test_pi_cut_parity import node as node
from tests.parity.test_pi_sessions import ctxwarden_llm, pi_llm, run_pi
from tests.support.server import ServerProcess
from tests.transfer.support import cli

LINEAGE = {
    # fork (the mark of its leaf): (the mark of its parent's leaf, parent_seq)
    "early": ("main", 8),
    "beforeCompaction": ("main", 15),  # its own copy of seq 16, before the compaction
    "afterCompaction": ("main", 16),
    "late": ("main", 24),
    "offLate": ("late", 28),
    "ownCompaction": ("main", 20),
    "afterForkCompaction": ("ownCompaction", 28),
    "beforeForkCompaction": ("ownCompaction", 24),
    "compactionAtBranchPoint": ("main", 28),
    "newRoot": ("main", 0),
    "offRoot": ("main", 1),
}
"""Each turn is 4 entries; the compactions take no seq."""


@pytest.fixture(scope="module")
def tree(node: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    written = run_pi(node, "write", str(tmp_path_factory.mktemp("pi")))
    [scenario] = [s for s in written if s["name"] == "tree"]
    assert set(scenario["marks"]) == {*LINEAGE, "main", "c1"}
    return scenario


def _ids(sid: str, marks: dict[str, str]) -> dict[str, str]:
    """Mark -> the session ID its leaf's branch is imported as."""
    out = {name: f"{sid}.{leaf}" for name, leaf in marks.items() if name in LINEAGE}
    return {**out, "main": sid}


def _own_rows(url: str, keys: list[str]) -> dict[str, int]:
    """The message rows stored under each key."""

    async def count() -> dict[str, int]:
        engine = make_engine(url)
        try:
            async with engine.connect() as conn:
                query = (
                    select(M.c.session_id, func.count())
                    .where(M.c.session_id.in_(keys))
                    .group_by(M.c.session_id)
                )
                return {str(r[0]): int(r[1]) for r in await conn.execute(query)}
        finally:
            await engine.dispose()

    return asyncio.run(count())


def _import(path: str, url: str, sid: str, check: bool = True) -> Any:
    return cli(
        "import", "--from", "pi", path, "--database-url", url, "--session-id", sid, check=check
    )


def test_every_branch_becomes_a_fork_with_pis_context(
    tree: dict[str, Any], server: ServerProcess, backend_url: str
) -> None:
    sid = f"pitree-{secrets.token_hex(3)}"
    out = _import(tree["file"], backend_url, sid)
    ids = _ids(sid, tree["marks"])
    assert f"; {len(LINEAGE)} forks from other branches" in out.stdout
    # Each fork after the session it forks from; the last branch of the file last.
    assert out.stdout.strip().splitlines()[-1].startswith(f"  fork {ids['offRoot']} ")
    by_leaf = {leaf["id"]: leaf["llm"] for leaf in tree["leaves"]}
    assert set(by_leaf) == {tree["marks"][m] for m in (*LINEAGE, "main")}
    with Client(server.target) as c:
        # pi's context for every leaf.
        for name, session_id in ids.items():
            mi = c.build_model_input(session_id, view=pb.MODEL_INPUT_VIEW_FULL)
            assert ctxwarden_llm(mi) == pi_llm(by_leaf[tree["marks"][name]]), name
        sessions = {name: c.get_session(session_id) for name, session_id in ids.items()}
        assert sessions["main"].parent_session_id == ""
        for name, (parent, parent_seq) in LINEAGE.items():
            got = sessions[name]
            assert (got.parent_session_id, got.parent_seq) == (ids[parent], parent_seq), name
        children = {
            name: {s.session_id for s in c.list_sessions(parent_session_id=ids[name])}
            for name in ("main", "late", "ownCompaction")
        }
        assert children == {
            parent: {ids[f] for f, (p, _) in LINEAGE.items() if p == parent} for parent in children
        }
        # A fork inherits the checkpoint in force at its branch point (the original's ID).
        compactions = {
            name: [x.compaction_id for x in c.list_compactions(session_id)]
            for name, session_id in ids.items()
        }
        [c1] = compactions["main"]
        assert compactions["early"] == compactions["beforeCompaction"] == []
        assert compactions["afterCompaction"] == compactions["late"] == [c1]
        assert compactions["offLate"] == compactions["beforeForkCompaction"] == [c1]
        c2, inherited = compactions["ownCompaction"]
        assert inherited == c1 and compactions["afterForkCompaction"] == [c2]
        assert compactions["compactionAtBranchPoint"][1:] == [c1]
        # Shared, not copied: a fork stores the rows after its branch point only.
        rows = _own_rows(backend_url, [*ids.values()])
        for name, session_id in ids.items():
            s = sessions[name]
            assert rows.get(session_id, 0) == s.last_seq - s.parent_seq, name
        # A fork of a fork goes its own way like any fork; its parents do not change.
        fork, before = ids["offLate"], c.build_model_input(ids["late"])
        seen = len(c.build_model_input(fork).messages)
        c.append_messages(fork, [user("one more"), assistant("done")])
        assert len(c.build_model_input(fork).messages) == seen + 2
        assert c.build_model_input(ids["late"]) == before


def test_a_fork_off_the_entry_before_a_compaction_never_falls_back_to_it(
    tree: dict[str, Any], server: ServerProcess, backend_url: str
) -> None:
    """A rewind in a fork may fall back to a checkpoint it inherited; the branch
    that leaves the main line just before the compaction never had that one."""
    sid = f"pitree-{secrets.token_hex(3)}"
    _import(tree["file"], backend_url, sid)
    fork = _ids(sid, tree["marks"])["beforeCompaction"]
    with Client(server.target) as c:
        before = c.build_model_input(fork)
        last = c.get_session(fork).last_seq
        c.append_messages(fork, [user("more " * 200), assistant("ok " * 200), user("and?")])
        plan = c.prepare_compaction(fork, keep_recent_tokens=50)
        prefix = "The turn so far." if plan.split_turn else ""
        c.commit_compaction(fork, plan.plan_id, "Everything so far.", turn_prefix_summary=prefix)
        assert c.build_model_input(fork).summary
        c.rollback_turn(fork, to_seq=last)
        after = c.build_model_input(fork)
    assert not after.summary and after.messages == before.messages


def _corrupt_leaf(tree: dict[str, Any], mark: str, path: Path) -> str:
    """A copy of the file with the leaf's message holding a block pi does not have."""
    leaf = tree["marks"][mark]
    lines = Path(tree["file"]).read_text(encoding="utf-8").splitlines()
    for n, line in enumerate(lines):
        entry = json.loads(line)
        if entry.get("id") == leaf:
            entry["message"]["content"] = [{"type": "video", "url": "x"}]
            lines[n] = json.dumps(entry)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return str(path)


@pytest.mark.parametrize("failure", ["fork ID taken", "invalid entry on a branch"])
def test_a_failed_import_leaves_no_session_and_no_fork(
    tree: dict[str, Any], server: ServerProcess, backend_url: str, tmp_path: Path, failure: str
) -> None:
    """The branch written last fails: the session and every fork before it roll back."""
    sid = f"pitree-{secrets.token_hex(3)}"
    ids = _ids(sid, tree["marks"])
    taken = ids["offRoot"]
    path = tree["file"]
    with Client(server.target) as c:
        if failure == "fork ID taken":
            c.create_session(session_id=taken, system_prompt="already here")
        else:
            path = _corrupt_leaf(tree, "offRoot", tmp_path / "corrupt.jsonl")
        out = _import(path, backend_url, sid, check=False)
        assert out.returncode == 1 and "nothing imported" in out.stderr, out.stderr
        # It failed on the last fork, after the others were written (see the first test).
        if failure == "fork ID taken":
            assert f"session {taken!r} exists" in out.stderr
        else:
            assert "ValueError: pi content block of type 'video'" in out.stderr
        for name, session_id in ids.items():
            if failure == "fork ID taken" and session_id == taken:
                assert c.get_session(taken).system_prompt == "already here"
                continue
            with pytest.raises(NotFoundError):
                c.get_session(session_id)
            assert list(c.list_sessions(parent_session_id=session_id)) == [], name
    assert set(_own_rows(backend_url, [*ids.values()])) == set()
    if failure == "invalid entry on a branch":
        _import(tree["file"], backend_url, sid)  # nothing was left in the way
