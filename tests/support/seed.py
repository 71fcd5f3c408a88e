"""Seed a long session through the store layer, as AppendMessages writes it.

Appending 100,000 messages over gRPC takes minutes; a test about what the
server does with a long history need not pay for it. The seeder runs the
service layer in-process on the server's database: the session is created by
CreateSession's code, each batch is planned by the same ``plan_append`` the
server's append runs (seqs, message IDs, token counts, calibration, the
session row after it) and written by the same store writer, one batch per
transaction. The rows are those an AppendMessages of each batch writes, so a
server that never saw the session restores it like any other.

The planned batches hold no session key, so they are made once per process
and written again for each session (message IDs are unique per session).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from ctxwarden.api.convert import message_from_pb
from ctxwarden.core.append import AppendPlan
from ctxwarden.core.session import Session
from ctxwarden.service.manager import SessionManager
from ctxwarden.util import ids
from ctxwarden.v1 import message_pb2 as m
from tests.support.inproc import replica


@dataclass
class History:
    """A session's messages, made by ``message(seq)`` for seq 1..count."""

    count: int
    message: Callable[[int], m.Message]
    batch: int = 1000
    _plans: list[AppendPlan] | None = None

    def batches(self) -> list[list[m.Message]]:
        return [
            [self.message(seq) for seq in range(first, min(first + self.batch, self.count + 1))]
            for first in range(1, self.count + 1, self.batch)
        ]


async def _write(
    manager: SessionManager, sid: str, plans: Sequence[AppendPlan] | None, history: History
) -> list[AppendPlan]:
    """Append ``history`` to session ``sid``: plan it unless ``plans`` are given."""
    store = manager.store
    ctx = await manager.runtime.context(sid)
    made: list[AppendPlan] = []
    batches = (
        plans
        if plans is not None
        else (
            ctx.plan_append(
                [message_from_pb(p, f"messages[{i}]") for i, p in enumerate(batch)],
                now_us=ids.now_us(),
                new_message_id=iter(ids.new_id, None),
            )
            for batch in history.batches()
        )
    )
    for plan in batches:
        session = replace(
            plan.session,
            session_id=sid,
            version=ctx.session.version + 1,
            create_time_us=ctx.session.create_time_us,
        )
        plan = replace(plan, session=session)
        op = store.messages.encode_append(
            session, expected_version=ctx.session.version, messages=plan.new, record=None
        )
        await store.messages.append(op)
        ctx.apply_append(plan)
        made.append(plan)
    return made


async def seed_session(url: str, sid: str, session: Session, history: History) -> None:
    """Create session ``sid`` (fields of ``session``) on ``url`` and append ``history``."""
    async with replica(url) as manager:
        await manager.create_session(session, sid, None)
        history._plans = await _write(manager, sid, history._plans, history)
