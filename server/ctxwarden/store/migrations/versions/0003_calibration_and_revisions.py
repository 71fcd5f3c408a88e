"""Token calibration, per-message tokenizer, and the settings history for exact replay.

Revision ID: 0003
Revises: 0002
"""

import sqlalchemy as sa
from alembic import op

from ctxwarden.store.migrations.common import MYSQL
from ctxwarden.store.models import ascii_id, long_text

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column(
        "sessions",
        sa.Column(
            "calibration_json", ascii_id(64), nullable=False, server_default='{"n":0,"r":1.0}'
        ),
    )
    op.add_column(
        "messages",
        sa.Column("counted_with", ascii_id(64), nullable=False, server_default=""),
    )
    op.create_table(
        "session_revisions",
        sa.Column("session_id", ascii_id(128), nullable=False),
        sa.Column("revision", sa.Integer(), nullable=False, autoincrement=False),
        sa.Column("at_seq", sa.BigInteger(), nullable=False),
        sa.Column("settings_json", long_text(), nullable=False),
        sa.Column("create_time_us", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("session_id", "revision", name="pk_session_revisions"),
        **MYSQL,
    )
    # Sessions created before this revision get their current settings as
    # revision history (replay before that point is approximate).
    op.execute(
        "INSERT INTO session_revisions (session_id, revision, at_seq, settings_json, "
        "create_time_us) SELECT session_id, revision, 0, '{}', create_time_us FROM sessions"
    )


def downgrade() -> None:
    op.drop_table("session_revisions")
    with op.batch_alter_table("messages") as batch:
        batch.drop_column("counted_with")
    with op.batch_alter_table("sessions") as batch:
        batch.drop_column("calibration_json")
