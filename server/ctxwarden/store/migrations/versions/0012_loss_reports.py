"""Loss reports of compaction checkpoints.

* ``compactions.loss_report_json``: what the compacted span held and where it
  survives (core.anchor_report), as a JSON object; NULL for checkpoints made
  before loss reports (they show none).

Revision ID: 0012
Revises: 0011
"""

import sqlalchemy as sa
from alembic import op

from ctxwarden.store.models import long_text

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("compactions") as batch:
        batch.add_column(sa.Column("loss_report_json", long_text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("compactions") as batch:
        batch.drop_column("loss_report_json")
