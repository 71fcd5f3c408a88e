"""Session labels as rows (``session_labels``): written with the session row in
its transaction, matched by digest (see models.SessionLabelRow)."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

from sqlalchemy import Select, insert, select
from sqlalchemy.ext.asyncio import AsyncConnection

from ctxwarden.core.tenancy import tenant_of
from ctxwarden.store.tables import SL


def digest(text: str) -> str:
    """SHA-256 (hex) of ``text``'s UTF-8 bytes: what a label is matched by."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def label_rows(session_id: str, labels: Mapping[str, str]) -> list[dict[str, Any]]:
    """The ``session_labels`` rows of a session's labels."""
    tenant = tenant_of(session_id)
    return [
        {
            "session_id": session_id,
            "key_digest": digest(key),
            "tenant_id": tenant,
            "value_digest": digest(value),
            "label_key": key,
            "label_value": value,
        }
        for key, value in sorted(labels.items())
    ]


async def write_labels(
    conn: AsyncConnection, session_id: str, labels: Mapping[str, str], *, replace: bool
) -> None:
    """Store the session's labels (``replace``: instead of the ones it had)."""
    if replace:
        await conn.execute(SL.delete().where(SL.c.session_id == session_id))
    rows = label_rows(session_id, labels)
    if rows:
        await conn.execute(insert(SL), rows)


def labelled(tenant: str, key: str, value: str | None) -> Select[tuple[str]]:
    """The keys of the tenant's sessions with label ``key`` (equal to ``value``
    unless it is None): exact equality, never a pattern."""
    q = select(SL.c.session_id).where(SL.c.tenant_id == tenant, SL.c.key_digest == digest(key))
    if value is not None:
        q = q.where(SL.c.value_digest == digest(value))
    return q


def checked_labels(labels: object) -> dict[str, str]:
    """An imported session's labels: an object of strings (ValueError otherwise)."""
    if not isinstance(labels, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in labels.items()
    ):
        raise ValueError("a session's labels must be an object of strings")
    return labels
