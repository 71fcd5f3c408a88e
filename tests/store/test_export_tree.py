"""export_tree: a session's records, then each live fork's (forks of forks too,
also those of a deleted fork), each after the session it forks from, in one read."""

from __future__ import annotations

from typing import Any

from sqlalchemy import update

from ctxwarden.core.tenancy import scoped_id
from ctxwarden.store.engine import make_engine
from ctxwarden.store.tables import S
from ctxwarden.store.transfer import export_records, export_tree, import_sessions
from ctxwarden.transfer.pi_import import pi_sessions, read_pi
from ctxwarden.transfer.run import incoming_of
from ctxwarden.util import ids
from tests.store.test_import_sessions import _pi_file


def _by_session(records: list[dict[str, Any]]) -> list[tuple[str, list[dict[str, Any]]]]:
    out: list[tuple[str, list[dict[str, Any]]]] = []
    for r in records:
        if r["type"] == "session":
            out.append((str(r["session_id"]), []))
        out[-1][1].append(r)
    return out


async def test_forks_follow_their_parents_and_a_deleted_fork_is_passed_through(
    backend_url: str,
) -> None:
    tenant = f"t{ids.new_id().lower()}"
    sessions = pi_sessions(read_pi(_pi_file()), "s")  # s; s.a4 (of s); s.u5 (of s.a4); s.u6
    engine = make_engine(backend_url)
    try:
        await import_sessions(engine, incoming_of(tenant, sessions))
        tree = _by_session([r async for r in export_tree(engine, scoped_id(tenant, "s"))])
        assert [name for name, _ in tree] == ["s", "s.a4", "s.u6", "s.u5"]
        for name, records in tree:  # each exactly what its own export holds without replays
            key = scoped_id(tenant, name)
            alone = [r async for r in export_records(engine, key, replays=False)]
            assert records == alone, name
            # With them (a native file), a fork also carries its ancestors' settings.
            whole = [r async for r in export_records(engine, key)]
            assert [r for r in whole if r["type"] == "revision" and r["revision"] < 1] == [
                r for r in whole if r not in alone
            ]
            assert (name == "s") == (len(whole) == len(alone)), name
        async with engine.begin() as conn:
            deleted = S.c.session_id == scoped_id(tenant, "s.a4")
            await conn.execute(update(S).where(deleted).values(delete_time_us=1))
        tree = _by_session([r async for r in export_tree(engine, scoped_id(tenant, "s"))])
        assert [name for name, _ in tree] == ["s", "s.u6", "s.u5"]
        # A fork's own tree: itself and its forks only.
        fork = [r async for r in export_tree(engine, scoped_id(tenant, "s.u6"))]
        assert [name for name, _ in _by_session(fork)] == ["s.u6"]
    finally:
        await engine.dispose()
