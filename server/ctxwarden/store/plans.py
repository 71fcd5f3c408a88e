"""Compaction plans: the terms a PrepareCompaction handed out, until committed or expired."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import Any

from sqlalchemy import insert, select
from sqlalchemy.ext.asyncio import AsyncEngine

from ctxwarden.core.compaction.terms import PlanTerms
from ctxwarden.core.session import CompactionTrigger
from ctxwarden.store.errors import boundary
from ctxwarden.store.gate import WriteGate
from ctxwarden.store.tables import P

_TUPLES = ("read_files", "modified_files", "chunk_seqs")


@dataclass(frozen=True, slots=True)
class StoredPlan:
    plan_id: str
    session_id: str
    terms: PlanTerms
    expire_time_us: int
    committed_compaction_id: str
    """Set once a commit used the plan (a retried commit returns that checkpoint)."""


def terms_json(terms: PlanTerms) -> str:
    values: dict[str, Any] = dataclasses.asdict(terms)
    for name in _TUPLES:
        values[name] = list(values[name])
    values["trigger"] = int(terms.trigger)
    return json.dumps(values, separators=(",", ":"))


def terms_from_json(text: str) -> PlanTerms:
    values: dict[str, Any] = json.loads(text)
    for name in _TUPLES:
        if name in values:  # plans stored before chunked compaction have no chunk_seqs
            values[name] = tuple(values[name])
    values["trigger"] = CompactionTrigger(values["trigger"])
    return PlanTerms(**values)


class PlanRepository:
    def __init__(self, engine: AsyncEngine, gate: WriteGate) -> None:
        self.engine = engine
        self.gate = gate

    @boundary
    async def save(self, plan: StoredPlan, now_us: int) -> None:
        async with self.gate.begin() as conn:
            await conn.execute(
                insert(P).values(
                    plan_id=plan.plan_id,
                    session_id=plan.session_id,
                    payload=terms_json(plan.terms),
                    expire_time_us=plan.expire_time_us,
                    committed_compaction_id=plan.committed_compaction_id,
                    create_time_us=now_us,
                )
            )

    @boundary
    async def get(self, plan_id: str) -> StoredPlan | None:
        async with self.engine.connect() as conn:
            row = (await conn.execute(select(P).where(P.c.plan_id == plan_id))).first()
        if row is None:
            return None
        return StoredPlan(
            plan_id=row.plan_id,
            session_id=row.session_id,
            terms=terms_from_json(row.payload),
            expire_time_us=row.expire_time_us,
            committed_compaction_id=row.committed_compaction_id,
        )
