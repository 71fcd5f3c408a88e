"""Session labels as rows, for exact search (the console filtered with LIKE over
``labels_json``, a pattern over JSON text).

* ``session_labels``: one row per label of every session (deleted and retired
  incarnations too), keyed by the session and the key's digest, with the
  tenant, the value's digest and both texts; an index on (tenant, key digest,
  value digest, session). A digest is the SHA-256 (hex) of the text's UTF-8
  bytes, as store/labels.py computes it. The rows refer to their session
  (cascading on delete and on a key change where foreign keys are enforced).
* Backfilled from ``sessions.labels_json`` in batches of sessions; an entry that
  is not a string pair (never written by the server) gets no row.

Revision ID: 0014
Revises: 0013
"""

import hashlib
import json
from typing import Any

import sqlalchemy as sa
from alembic import op

from ctxwarden.store.migrations.common import MYSQL
from ctxwarden.store.models import SESSION_KEY_LENGTH, ascii_id, long_text

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None

BATCH = 500
"""Sessions read per backfill batch."""


def upgrade() -> None:
    op.create_table(
        "session_labels",
        sa.Column("session_id", ascii_id(SESSION_KEY_LENGTH), nullable=False),
        sa.Column("key_digest", ascii_id(64), nullable=False),
        sa.Column("tenant_id", ascii_id(64), nullable=False),
        sa.Column("value_digest", ascii_id(64), nullable=False),
        sa.Column("label_key", long_text(), nullable=False),
        sa.Column("label_value", long_text(), nullable=False),
        sa.PrimaryKeyConstraint("session_id", "key_digest", name="pk_session_labels"),
        sa.ForeignKeyConstraint(
            ["session_id"],
            ["sessions.session_id"],
            name="fk_session_labels_session",
            ondelete="CASCADE",
            onupdate="CASCADE",
        ),
        **MYSQL,
    )
    op.create_index(
        "ix_session_labels_search",
        "session_labels",
        ["tenant_id", "key_digest", "value_digest", "session_id"],
    )
    _backfill(op.get_bind())


def downgrade() -> None:
    op.drop_index("ix_session_labels_search", table_name="session_labels")
    op.drop_table("session_labels")


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def _backfill(conn: sa.Connection) -> None:
    sessions = sa.table(
        "sessions", sa.column("session_id"), sa.column("tenant_id"), sa.column("labels_json")
    )
    labels = sa.table(
        "session_labels",
        *(
            sa.column(c)
            for c in (
                "session_id",
                "key_digest",
                "tenant_id",
                "value_digest",
                "label_key",
                "label_value",
            )
        ),
    )
    after = ""
    while True:
        rows = conn.execute(
            sa.select(sessions.c.session_id, sessions.c.tenant_id, sessions.c.labels_json)
            .where(sessions.c.session_id > after, sessions.c.labels_json != "{}")
            .order_by(sessions.c.session_id)
            .limit(BATCH)
        ).all()
        if not rows:
            return
        batch = [label for r in rows for label in _rows(r)]
        if batch:
            conn.execute(labels.insert(), batch)
        after = str(rows[-1].session_id)


def _rows(row: Any) -> list[dict[str, str]]:
    try:
        decoded = json.loads(row.labels_json or "{}")
    except ValueError:
        return []
    if not isinstance(decoded, dict):
        return []
    return [
        {
            "session_id": str(row.session_id),
            "key_digest": _digest(key),
            "tenant_id": str(row.tenant_id),
            "value_digest": _digest(value),
            "label_key": key,
            "label_value": value,
        }
        for key, value in sorted(decoded.items())
        if isinstance(key, str) and isinstance(value, str)
    ]
