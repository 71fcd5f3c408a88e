"""The mapped tables as SQLAlchemy Core ``Table`` objects, for query building.

One short name each, used by every store module (``S.c.session_id`` ...).
"""

from __future__ import annotations

from typing import cast

from sqlalchemy import Table

from ctxwarden.store.models import (
    CompactionPlanRow,
    CompactionRow,
    MemoryBlockRow,
    MemoryRow,
    MessageRow,
    ProjectStateRow,
    RequestRow,
    SessionLabelRow,
    SessionRevisionRow,
    SessionRow,
    TenantRow,
    UserStateRow,
)

S = cast(Table, SessionRow.__table__)
"""sessions"""
M = cast(Table, MessageRow.__table__)
"""messages"""
C = cast(Table, CompactionRow.__table__)
"""compactions (checkpoints)"""
P = cast(Table, CompactionPlanRow.__table__)
"""compaction_plans"""
V = cast(Table, SessionRevisionRow.__table__)
"""session_revisions"""
R = cast(Table, RequestRow.__table__)
"""request_records (idempotency)"""
T = cast(Table, TenantRow.__table__)
"""tenants (quota counters)"""
US = cast(Table, UserStateRow.__table__)
"""user_states (state shared by a user's sessions in a project)"""
PS = cast(Table, ProjectStateRow.__table__)
"""project_states (state shared by a project's sessions)"""
MM = cast(Table, MemoryRow.__table__)
"""memories (long-term memory)"""
MB = cast(Table, MemoryBlockRow.__table__)
"""memory_blocks (every memory block of a session, for replay)"""
SL = cast(Table, SessionLabelRow.__table__)
"""session_labels (a session's labels as rows, for search)"""
