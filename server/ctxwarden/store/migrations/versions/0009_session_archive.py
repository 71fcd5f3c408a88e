"""Session archive and retention.

* ``sessions.archive_time_us``: when ArchiveSession archived the session (0: not
  archived), indexed with the tenant for the retention rule that purges archived
  sessions.
* ``request_records``: an index on (tenant_id, create_time_us) for the rule that
  purges idempotency records after some hours.

Revision ID: 0009
Revises: 0007
"""

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("sessions") as batch:
        batch.add_column(
            sa.Column("archive_time_us", sa.BigInteger(), nullable=False, server_default="0")
        )
        batch.create_index("ix_sessions_archived", ["tenant_id", "archive_time_us"])
    with op.batch_alter_table("request_records") as batch:
        batch.create_index("ix_request_records_time", ["tenant_id", "create_time_us"])


def downgrade() -> None:
    with op.batch_alter_table("request_records") as batch:
        batch.drop_index("ix_request_records_time")
    with op.batch_alter_table("sessions") as batch:
        batch.drop_index("ix_sessions_archived")
        batch.drop_column("archive_time_us")
