"""Session versions, typed idempotency keys, calibration columns, MessagePack bodies.

* ``sessions.version``: advanced by every change; every write compares-and-sets it.
* ``request_records`` replaces ``request_log``: the scope string ``Method/session``
  becomes typed columns (session_id, tenant_id, method), so purging a session's
  records is an equality match, never a pattern.
* ``messages.calib_ratio`` / ``calib_samples``: what replay reads back, as columns
  (it was found with a pattern over the JSON body), backfilled from the bodies.
* ``tenants``: per-tenant session count and stored bytes, which quotas
  compare-and-add in the same transaction as the write (backfilled).
* ``messages.data`` and ``session_revisions.settings``: MessagePack instead of
  JSON (no escaping); old rows keep their JSON, which stays readable.

Revision ID: 0006
Revises: 0005
"""

import json

import sqlalchemy as sa
from alembic import op

from ctxwarden.store.migrations.common import MYSQL
from ctxwarden.store.models import ascii_id, long_blob, long_text

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

BATCH = 2000


def _split_scope(scope: str) -> tuple[str, str, str]:
    """(method, session_id, tenant_id) of a legacy scope string."""
    method, _, rest = scope.partition("/")
    if method == "CreateSession":
        return method, "", rest
    tenant = rest.split("~", 1)[0] if "~" in rest else ""
    return method, rest, tenant


def upgrade() -> None:
    op.add_column(
        "sessions", sa.Column("version", sa.BigInteger(), nullable=False, server_default="0")
    )
    with op.batch_alter_table("messages") as batch:
        batch.alter_column("body", existing_type=long_text(), nullable=True)
        batch.add_column(sa.Column("data", long_blob(), nullable=True))
        batch.add_column(sa.Column("calib_ratio", sa.Double(), nullable=True))
        batch.add_column(sa.Column("calib_samples", sa.Integer(), nullable=True))
    with op.batch_alter_table("session_revisions") as batch:
        batch.alter_column("settings_json", existing_type=long_text(), nullable=True)
        batch.add_column(sa.Column("settings", long_blob(), nullable=True))
    op.create_table(
        "request_records",
        sa.Column("session_id", ascii_id(200), nullable=False),
        sa.Column("tenant_id", ascii_id(64), nullable=False),
        sa.Column("method", ascii_id(32), nullable=False),
        sa.Column("request_id", ascii_id(128), nullable=False),
        sa.Column("request_hash", ascii_id(64), nullable=False),
        sa.Column("outcome", long_blob(), nullable=False),
        sa.Column("create_time_us", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint(
            "session_id", "tenant_id", "method", "request_id", name="pk_request_records"
        ),
        **MYSQL,
    )
    op.create_table(
        "tenants",
        sa.Column("tenant_id", ascii_id(64), nullable=False),
        sa.Column("sessions", sa.BigInteger(), nullable=False),
        sa.Column("stored_bytes", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("tenant_id", name="pk_tenants"),
        **MYSQL,
    )
    op.execute(
        "INSERT INTO tenants (tenant_id, sessions, stored_bytes) SELECT tenant_id, COUNT(*), "
        "COALESCE(SUM(stored_bytes), 0) FROM sessions WHERE delete_time_us = 0 GROUP BY tenant_id"
    )
    conn = op.get_bind()
    _copy_requests(conn)
    op.drop_table("request_log")
    _backfill_calibration(conn)


def _copy_requests(conn: sa.Connection) -> None:
    old = sa.table(
        "request_log",
        sa.column("scope"),
        sa.column("request_id"),
        sa.column("request_hash"),
        sa.column("outcome"),
        sa.column("create_time_us"),
    )
    new = sa.table(
        "request_records",
        sa.column("session_id"),
        sa.column("tenant_id"),
        sa.column("method"),
        sa.column("request_id"),
        sa.column("request_hash"),
        sa.column("outcome"),
        sa.column("create_time_us"),
    )
    rows = []
    for r in conn.execute(sa.select(old)).all():
        method, session_id, tenant = _split_scope(str(r.scope))
        rows.append(
            {
                "session_id": session_id,
                "tenant_id": tenant,
                "method": method[:32],
                "request_id": r.request_id,
                "request_hash": r.request_hash,
                "outcome": r.outcome,
                "create_time_us": r.create_time_us,
            }
        )
        if len(rows) >= BATCH:
            conn.execute(sa.insert(new), rows)
            rows = []
    if rows:
        conn.execute(sa.insert(new), rows)


def _backfill_calibration(conn: sa.Connection) -> None:
    """Walk every message by primary key (no pattern over the bodies)."""
    m = sa.table(
        "messages",
        sa.column("session_id"),
        sa.column("seq"),
        sa.column("body"),
        sa.column("calib_ratio"),
        sa.column("calib_samples"),
    )
    after: tuple[str, int] = ("", -1)
    while True:
        rows = conn.execute(
            sa.select(m.c.session_id, m.c.seq, m.c.body)
            .where(
                sa.or_(
                    m.c.session_id > after[0],
                    sa.and_(m.c.session_id == after[0], m.c.seq > after[1]),
                )
            )
            .order_by(m.c.session_id, m.c.seq)
            .limit(BATCH)
        ).all()
        if not rows:
            return
        for r in rows:
            calib = json.loads(r.body).get("calib") if r.body else None
            if isinstance(calib, list) and len(calib) == 2:
                conn.execute(
                    sa.update(m)
                    .where(m.c.session_id == r.session_id, m.c.seq == r.seq)
                    .values(calib_ratio=float(calib[0]), calib_samples=int(calib[1]))
                )
        after = (str(rows[-1].session_id), int(rows[-1].seq))


def downgrade() -> None:
    raise NotImplementedError("schema 0006 cannot be downgraded (bodies are MessagePack)")
