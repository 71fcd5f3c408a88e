"""A search of a tenant's sessions (the console's session list)."""

from __future__ import annotations

from dataclasses import dataclass

SESSION_SORTS = ("created", "updated", "seq", "tokens")
"""Creation time, last change, last seq, context tokens (ties: the session ID)."""
ARCHIVED_FILTERS = ("all", "live", "archived")
"""Every session, those not archived, the archived ones."""


@dataclass(frozen=True, slots=True)
class SessionQuery:
    tenant: str = ""
    user_id: str = ""
    project_id: str = ""
    label_key: str = ""
    label_value: str = ""
    """With ``label_key``: the label's exact value ("" with a key: any value)."""
    title: str = ""
    """A substring of the title (case-insensitive)."""
    sort: str = "created"
    descending: bool = True
    archived: str = "all"
    """One of ARCHIVED_FILTERS."""
    parent: str = ""
    """Only the forks of this session (its internal key; "" for any session)."""
