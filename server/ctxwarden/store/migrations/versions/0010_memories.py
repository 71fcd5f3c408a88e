"""Long-term memory.

* ``memories``: durable facts of a tenant's users and projects, with an
  optional key unique in its scope (NULL without one).
* ``sessions.memory_json``: the session's frozen memory block (NULL: none).

Revision ID: 0010
Revises: 0007
"""

import sqlalchemy as sa
from alembic import op

from ctxwarden.store.migrations.common import MYSQL
from ctxwarden.store.models import SESSION_KEY_LENGTH, ascii_id, long_text, text_col

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("sessions") as batch:
        batch.add_column(sa.Column("memory_json", long_text(), nullable=True))
    op.create_table(
        "memories",
        sa.Column("tenant_id", ascii_id(64), nullable=False),
        sa.Column("memory_id", ascii_id(64), nullable=False),
        sa.Column("user_id", text_col(128), nullable=False),
        sa.Column("project_id", text_col(128), nullable=False),
        sa.Column("memory_key", text_col(128), nullable=True),
        sa.Column("text", long_text(), nullable=False),
        sa.Column("labels_json", long_text(), nullable=False),
        sa.Column("pinned", sa.SmallInteger(), nullable=False),
        sa.Column("state", sa.SmallInteger(), nullable=False),
        sa.Column("create_time_us", sa.BigInteger(), nullable=False),
        sa.Column("update_time_us", sa.BigInteger(), nullable=False),
        sa.Column("revision", sa.Integer(), nullable=False),
        sa.Column("source_session_id", ascii_id(SESSION_KEY_LENGTH), nullable=False),
        sa.PrimaryKeyConstraint("tenant_id", "memory_id", name="pk_memories"),
        sa.UniqueConstraint(
            "tenant_id", "user_id", "project_id", "memory_key", name="uq_memories_key"
        ),
        **MYSQL,
    )
    op.create_index("ix_memories_scope", "memories", ["tenant_id", "project_id", "user_id"])


def downgrade() -> None:
    op.drop_index("ix_memories_scope", table_name="memories")
    op.drop_table("memories")
    with op.batch_alter_table("sessions") as batch:
        batch.drop_column("memory_json")
