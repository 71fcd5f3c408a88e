"""Session lineage (forks).

* ``sessions.parent_key``: the internal key of the session a fork was made
  from ("" for a session that is no fork); ``sessions.parent_seq``: the last
  seq the fork reads from it; ``sessions.fork_seq``: the seq it was made at. Indexed, to list a session's forks and to keep
  purge from removing rows a fork still reads.
* ``compactions.origin_id``: the ID a fork's copy of an inherited checkpoint
  shows (the original's), "" for a session's own checkpoints.

Revision ID: 0008
Revises: 0007
"""

import sqlalchemy as sa
from alembic import op

from ctxwarden.store.models import SESSION_KEY_LENGTH, ascii_id

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("sessions") as batch:
        batch.add_column(
            sa.Column(
                "parent_key",
                ascii_id(SESSION_KEY_LENGTH),
                nullable=False,
                server_default="",
            )
        )
        batch.add_column(
            sa.Column("parent_seq", sa.BigInteger(), nullable=False, server_default="0")
        )
        batch.add_column(sa.Column("fork_seq", sa.BigInteger(), nullable=False, server_default="0"))
        batch.create_index("ix_sessions_parent", ["parent_key"])
    with op.batch_alter_table("compactions") as batch:
        batch.add_column(sa.Column("origin_id", ascii_id(64), nullable=False, server_default=""))


def downgrade() -> None:
    with op.batch_alter_table("compactions") as batch:
        batch.drop_column("origin_id")
    with op.batch_alter_table("sessions") as batch:
        batch.drop_index("ix_sessions_parent")
        batch.drop_column("fork_seq")
        batch.drop_column("parent_seq")
        batch.drop_column("parent_key")
