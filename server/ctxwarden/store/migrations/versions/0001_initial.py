"""Initial schema: sessions, messages, compactions, request_log.

Revision ID: 0001
Revises:
"""

import sqlalchemy as sa
from alembic import op

from ctxwarden.store.migrations.common import MYSQL
from ctxwarden.store.models import ascii_id, long_blob, long_text, text_col

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Long only as a declaration is: the first schema, one table after another."""
    op.create_table(
        "sessions",
        sa.Column("session_id", ascii_id(128), nullable=False),
        sa.Column("tenant_id", ascii_id(64), nullable=False, server_default=""),
        sa.Column("user_id", text_col(128), nullable=False),
        sa.Column("project_id", text_col(128), nullable=False),
        sa.Column("title", long_text(), nullable=False),
        sa.Column("system_prompt", long_text(), nullable=False),
        sa.Column("tools_json", long_text(), nullable=False),
        sa.Column("model", text_col(128), nullable=False),
        sa.Column("policy_json", long_text(), nullable=False),
        sa.Column("pinned_state", long_text(), nullable=False),
        sa.Column("labels_json", long_text(), nullable=False),
        sa.Column("last_seq", sa.BigInteger(), nullable=False),
        sa.Column("context_tokens", sa.BigInteger(), nullable=False),
        sa.Column("revision", sa.Integer(), nullable=False),
        sa.Column("consecutive_failures", sa.Integer(), nullable=False),
        sa.Column("create_time_us", sa.BigInteger(), nullable=False),
        sa.Column("update_time_us", sa.BigInteger(), nullable=False),
        sa.Column("delete_time_us", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("session_id", name="pk_sessions"),
        **MYSQL,
    )
    op.create_index(
        "ix_sessions_list",
        "sessions",
        ["tenant_id", "delete_time_us", "create_time_us", "session_id"],
    )
    op.create_index("ix_sessions_user", "sessions", ["tenant_id", "user_id", "create_time_us"])
    op.create_index(
        "ix_sessions_project", "sessions", ["tenant_id", "project_id", "create_time_us"]
    )
    op.create_table(
        "messages",
        sa.Column("session_id", ascii_id(128), nullable=False),
        sa.Column("seq", sa.BigInteger(), nullable=False, autoincrement=False),
        sa.Column("message_id", ascii_id(128), nullable=False),
        sa.Column("role", sa.SmallInteger(), nullable=False),
        sa.Column("state", sa.SmallInteger(), nullable=False),
        sa.Column("stop_reason", sa.SmallInteger(), nullable=False),
        sa.Column("token_count", sa.Integer(), nullable=False),
        sa.Column("create_time_us", sa.BigInteger(), nullable=False),
        sa.Column("rolled_back_at_seq", sa.BigInteger(), nullable=False),
        sa.Column("body", long_text(), nullable=False),
        sa.PrimaryKeyConstraint("session_id", "seq", name="pk_messages"),
        sa.UniqueConstraint("session_id", "message_id", name="uq_messages_message_id"),
        **MYSQL,
    )
    op.create_table(
        "compactions",
        sa.Column("compaction_id", ascii_id(64), nullable=False),
        sa.Column("session_id", ascii_id(128), nullable=False),
        sa.Column("summary", long_text(), nullable=False),
        sa.Column("first_kept_seq", sa.BigInteger(), nullable=False),
        sa.Column("tokens_before", sa.BigInteger(), nullable=False),
        sa.Column("tokens_after", sa.BigInteger(), nullable=False),
        sa.Column("at_seq", sa.BigInteger(), nullable=False),
        sa.Column("superseded_at_seq", sa.BigInteger(), nullable=False),
        sa.Column("details_json", long_text(), nullable=False),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("compaction_id", name="pk_compactions"),
        **MYSQL,
    )
    op.create_index("ix_compactions_session", "compactions", ["session_id", "created_at"])
    op.create_table(
        "request_log",
        sa.Column("scope", ascii_id(200), nullable=False),
        sa.Column("request_id", ascii_id(128), nullable=False),
        sa.Column("request_hash", ascii_id(64), nullable=False),
        sa.Column("outcome", long_blob(), nullable=False),
        sa.Column("create_time_us", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("scope", "request_id", name="pk_request_log"),
        **MYSQL,
    )


def downgrade() -> None:
    op.drop_table("request_log")
    op.drop_index("ix_compactions_session", table_name="compactions")
    op.drop_table("compactions")
    op.drop_table("messages")
    op.drop_index("ix_sessions_project", table_name="sessions")
    op.drop_index("ix_sessions_user", table_name="sessions")
    op.drop_index("ix_sessions_list", table_name="sessions")
    op.drop_table("sessions")
