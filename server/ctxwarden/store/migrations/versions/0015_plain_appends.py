"""Which writes of a session were plain appends, so a replica whose copy is
stale can read only what was appended since instead of the whole kept history.

* ``sessions.plain_run_start``, ``sessions.plain_version``: set by the group
  commit's UPDATE of an append (see models.SessionRow); 0 for every existing
  session, so its next catch-up is a full restore, as before.

Revision ID: 0015
Revises: 0014
"""

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None

COLUMNS = ("plain_run_start", "plain_version")


def upgrade() -> None:
    for name in COLUMNS:
        op.add_column(
            "sessions", sa.Column(name, sa.BigInteger(), nullable=False, server_default="0")
        )


def downgrade() -> None:
    with op.batch_alter_table("sessions") as batch:
        for name in reversed(COLUMNS):
            batch.drop_column(name)
