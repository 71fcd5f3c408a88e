"""The usage ledger of each session.

* ``sessions.usage_json``: what providers reported for the session, per source
  and model (core.usage_ledger), as a JSON array; NULL while nothing was
  reported. A compaction's own summariser usage is in its ``details_json``.

Revision ID: 0013
Revises: 0012
"""

import sqlalchemy as sa
from alembic import op

from ctxwarden.store.models import long_text

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("sessions") as batch:
        batch.add_column(sa.Column("usage_json", long_text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("sessions") as batch:
        batch.drop_column("usage_json")
