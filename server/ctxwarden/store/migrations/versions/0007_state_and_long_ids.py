"""Session state, user and project state, longer session IDs.

* ``sessions.state_json``: the session's JSON object state (NULL: empty).
* ``user_states`` / ``project_states``: JSON object states shared by the
  sessions of one (tenant, project, user) and of one (tenant, project).
* Session keys widen to 400 ASCII characters: client IDs of up to 255
  characters behind a ``TENANT~`` prefix, and the keys that deleted
  incarnations are moved to when their ID is used again.

Revision ID: 0007
Revises: 0006
"""

import sqlalchemy as sa
from alembic import op

from ctxwarden.store.migrations.common import MYSQL
from ctxwarden.store.models import ascii_id, long_text, text_col

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

TABLES = (
    "sessions",
    "messages",
    "compactions",
    "compaction_plans",
    "session_revisions",
    "request_records",
)


def _widen(old: int, new: int) -> None:
    for table in TABLES:
        with op.batch_alter_table(table) as batch:
            batch.alter_column(
                "session_id",
                type_=ascii_id(new),
                existing_type=ascii_id(old),
                existing_nullable=False,
            )


def upgrade() -> None:
    _widen(200, 400)
    with op.batch_alter_table("sessions") as batch:
        batch.add_column(sa.Column("state_json", long_text(), nullable=True))
    op.create_table(
        "user_states",
        sa.Column("tenant_id", ascii_id(64), nullable=False),
        sa.Column("project_id", text_col(128), nullable=False),
        sa.Column("user_id", text_col(128), nullable=False),
        sa.Column("state_json", long_text(), nullable=False),
        sa.Column("update_time_us", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("tenant_id", "project_id", "user_id", name="pk_user_states"),
        **MYSQL,
    )
    op.create_table(
        "project_states",
        sa.Column("tenant_id", ascii_id(64), nullable=False),
        sa.Column("project_id", text_col(128), nullable=False),
        sa.Column("state_json", long_text(), nullable=False),
        sa.Column("update_time_us", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("tenant_id", "project_id", name="pk_project_states"),
        **MYSQL,
    )


def downgrade() -> None:
    op.drop_table("project_states")
    op.drop_table("user_states")
    with op.batch_alter_table("sessions") as batch:
        batch.drop_column("state_json")
    _widen(400, 200)
