"""The history of each session's memory block (exact replay).

* ``memory_blocks``: every block a session carried, keyed by the session and
  the seq from which it applies (its last_seq + 1 when it was selected).
  Existing sessions with a block get one row, from seq 1, holding the block they
  carry now: what they carried before the upgrade was not recorded.

Revision ID: 0011
Revises: 0010
"""

import sqlalchemy as sa
from alembic import op

from ctxwarden.store.migrations.common import MYSQL
from ctxwarden.store.models import SESSION_KEY_LENGTH, ascii_id, long_text

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "memory_blocks",
        sa.Column("session_id", ascii_id(SESSION_KEY_LENGTH), nullable=False),
        sa.Column("from_seq", sa.BigInteger(), nullable=False, autoincrement=False),
        sa.Column("memory_json", long_text(), nullable=True),
        sa.Column("create_time_us", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("session_id", "from_seq", name="pk_memory_blocks"),
        **MYSQL,
    )
    op.execute(
        "INSERT INTO memory_blocks (session_id, from_seq, memory_json, create_time_us) "
        "SELECT session_id, 1, memory_json, update_time_us FROM sessions "
        "WHERE memory_json IS NOT NULL"
    )


def downgrade() -> None:
    op.drop_table("memory_blocks")
