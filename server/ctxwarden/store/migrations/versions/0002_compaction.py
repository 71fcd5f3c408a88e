"""Compaction: the session's current checkpoint and agent-side plans.

Revision ID: 0002
Revises: 0001
"""

import sqlalchemy as sa
from alembic import op

from ctxwarden.store.migrations.common import MYSQL
from ctxwarden.store.models import ascii_id, long_text

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column(
        "sessions",
        sa.Column("compaction_id", ascii_id(64), nullable=False, server_default=""),
    )
    op.create_table(
        "compaction_plans",
        sa.Column("plan_id", ascii_id(64), nullable=False),
        sa.Column("session_id", ascii_id(128), nullable=False),
        sa.Column("payload", long_text(), nullable=False),
        sa.Column("expire_time_us", sa.BigInteger(), nullable=False),
        sa.Column("committed_compaction_id", ascii_id(64), nullable=False),
        sa.Column("create_time_us", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("plan_id", name="pk_compaction_plans"),
        **MYSQL,
    )
    op.create_index("ix_compaction_plans_session", "compaction_plans", ["session_id"])


def downgrade() -> None:
    op.drop_index("ix_compaction_plans_session", table_name="compaction_plans")
    op.drop_table("compaction_plans")
    with op.batch_alter_table("sessions") as batch:
        batch.drop_column("compaction_id")
