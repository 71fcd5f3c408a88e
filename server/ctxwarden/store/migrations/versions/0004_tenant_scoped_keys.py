"""Tenant-scoped session keys: widen session_id columns (TENANT~ID) and request scopes.

Revision ID: 0004
Revises: 0003
"""

from alembic import op

from ctxwarden.store.models import ascii_id

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

TABLES = ("sessions", "messages", "compactions", "compaction_plans", "session_revisions")


def upgrade() -> None:
    for table in TABLES:
        with op.batch_alter_table(table) as batch:
            batch.alter_column(
                "session_id",
                type_=ascii_id(200),
                existing_type=ascii_id(128),
                existing_nullable=False,
            )
    with op.batch_alter_table("request_log") as batch:
        batch.alter_column(
            "scope", type_=ascii_id(255), existing_type=ascii_id(200), existing_nullable=False
        )


def downgrade() -> None:
    with op.batch_alter_table("request_log") as batch:
        batch.alter_column(
            "scope", type_=ascii_id(200), existing_type=ascii_id(255), existing_nullable=False
        )
    for table in TABLES:
        with op.batch_alter_table(table) as batch:
            batch.alter_column(
                "session_id",
                type_=ascii_id(128),
                existing_type=ascii_id(200),
                existing_nullable=False,
            )
