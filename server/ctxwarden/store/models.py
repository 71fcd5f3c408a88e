"""SQLAlchemy table models.

Times are integer microseconds since the epoch (identical on SQLite and
MySQL, no time zone or precision surprises). IDs are ASCII with binary
collation on MySQL (collation "C" on PostgreSQL), so keys stay small,
case-sensitive and ordered by their bytes on every backend.
"""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Double,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    SmallInteger,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.dialects import mysql, postgresql
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column
from sqlalchemy.types import TypeEngine


def ascii_id(length: int) -> TypeEngine[str]:
    return (
        String(length)
        .with_variant(
            mysql.VARCHAR(length, charset="ascii", collation="ascii_bin"), "mysql", "mariadb"
        )
        .with_variant(postgresql.VARCHAR(length, collation="C"), "postgresql")
    )


def long_text() -> TypeEngine[str]:
    return Text().with_variant(mysql.LONGTEXT(charset="utf8mb4"), "mysql", "mariadb")


def long_blob() -> TypeEngine[bytes]:
    return LargeBinary().with_variant(mysql.LONGBLOB(), "mysql", "mariadb")


def text_col(length: int) -> TypeEngine[str]:
    return (
        String(length)
        .with_variant(
            mysql.VARCHAR(length, charset="utf8mb4", collation="utf8mb4_bin"), "mysql", "mariadb"
        )
        .with_variant(postgresql.VARCHAR(length, collation="C"), "postgresql")
    )


SESSION_KEY_LENGTH = 400
"""Internal session keys: ``TENANT~`` (up to 65) + a client session ID (up to 255),
and a deleted incarnation's key (that + ``#`` + its delete time, see
store/sessions.py). ASCII, so every key stays far within MariaDB's index limit."""


class Base(DeclarativeBase):
    metadata = MetaData(
        naming_convention={
            "ix": "ix_%(table_name)s_%(column_0_name)s",
            "uq": "uq_%(table_name)s_%(column_0_name)s",
            "pk": "pk_%(table_name)s",
        }
    )


class SessionRow(Base):
    __tablename__ = "sessions"

    session_id: Mapped[str] = mapped_column(ascii_id(SESSION_KEY_LENGTH), primary_key=True)
    tenant_id: Mapped[str] = mapped_column(ascii_id(64), default="", server_default="")
    user_id: Mapped[str] = mapped_column(text_col(128), default="")
    project_id: Mapped[str] = mapped_column(text_col(128), default="")
    title: Mapped[str] = mapped_column(long_text(), default="")
    system_prompt: Mapped[str] = mapped_column(long_text(), default="")
    tools_json: Mapped[str] = mapped_column(long_text(), default="[]")
    model: Mapped[str] = mapped_column(text_col(128), default="")
    policy_json: Mapped[str] = mapped_column(long_text(), default="{}")
    pinned_state: Mapped[str] = mapped_column(long_text(), default="")
    labels_json: Mapped[str] = mapped_column(long_text(), default="{}")
    last_seq: Mapped[int] = mapped_column(BigInteger, default=0)
    context_tokens: Mapped[int] = mapped_column(BigInteger, default=0)
    revision: Mapped[int] = mapped_column(Integer, default=1)
    consecutive_failures: Mapped[int] = mapped_column(Integer, default=0)
    create_time_us: Mapped[int] = mapped_column(BigInteger)
    update_time_us: Mapped[int] = mapped_column(BigInteger)
    delete_time_us: Mapped[int] = mapped_column(BigInteger, default=0)
    archive_time_us: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")
    """When the session was archived (0: not archived; see ArchiveSession)."""
    compaction_id: Mapped[str] = mapped_column(ascii_id(64), default="", server_default="")
    """The checkpoint in effect ("" before the first compaction)."""
    stored_bytes: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")
    """Approximate content bytes of every message stored (for per-tenant quotas)."""
    calibration_json: Mapped[str] = mapped_column(
        ascii_id(64), default='{"n":0,"r":1.0}', server_default='{"n":0,"r":1.0}'
    )
    """Reported/estimated token ratio and sample count (core.calibration)."""
    state_json: Mapped[str | None] = mapped_column(long_text(), nullable=True)
    """The session's JSON object state (NULL: empty)."""
    memory_json: Mapped[str | None] = mapped_column(long_text(), nullable=True)
    """The session's frozen memory block (codec.memory_json; NULL: none)."""
    usage_json: Mapped[str | None] = mapped_column(long_text(), nullable=True)
    """The session's usage ledger (core.usage_ledger; NULL: nothing reported)."""
    version: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")
    """Advanced by every change of the session (append, rollback, settings,
    compaction, delete); every write compares-and-sets it, and replicas compare
    their in-memory copy with it before serving."""
    plain_run_start: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")
    """Every write of the session from this version on was a plain append (new
    messages and the progress columns, nothing else): valid while
    ``plain_version == version``. Set by the group commit's UPDATE only, before
    ``plain_version`` (MySQL assigns left to right); no other write touches
    either, so any other write ends the run (store/restore.py, load_tail)."""
    plain_version: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")
    """The version the last plain append wrote."""
    parent_key: Mapped[str] = mapped_column(
        ascii_id(SESSION_KEY_LENGTH), default="", server_default=""
    )
    """A fork's parent: the internal key of the session it reads its first
    messages from ("" for a session that is no fork; see store/lineage.py)."""
    parent_seq: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")
    """The last seq a fork reads from its parent (lowered when a rollback in the
    fork reaches into what it inherited: those rows are then copied)."""
    fork_seq: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")
    """The seq a fork was made at: it sees its parent's rows as they were just
    before that seq (never changes)."""

    __table_args__ = (
        Index("ix_sessions_parent", "parent_key"),
        Index("ix_sessions_list", "tenant_id", "delete_time_us", "create_time_us", "session_id"),
        Index("ix_sessions_user", "tenant_id", "user_id", "create_time_us"),
        Index("ix_sessions_project", "tenant_id", "project_id", "create_time_us"),
        Index("ix_sessions_archived", "tenant_id", "archive_time_us"),
    )


class SessionLabelRow(Base):
    """One label of a session: ``sessions.labels_json`` as rows, written in the
    same transaction, so the console finds sessions by exact label equality.

    Matched by digest (store/labels.py: SHA-256 of the UTF-8 text, hex):
    equal digests are equal texts on every backend, whatever their length,
    case or trailing spaces (MySQL's utf8mb4_bin compares 'a' and 'a ' as
    equal), and the index stays small. A purge removes the rows with the
    session; the foreign key cascades where it is enforced."""

    __tablename__ = "session_labels"

    session_id: Mapped[str] = mapped_column(
        ascii_id(SESSION_KEY_LENGTH),
        ForeignKey(
            "sessions.session_id",
            name="fk_session_labels_session",
            ondelete="CASCADE",
            onupdate="CASCADE",
        ),
        primary_key=True,
    )
    key_digest: Mapped[str] = mapped_column(ascii_id(64), primary_key=True)
    tenant_id: Mapped[str] = mapped_column(ascii_id(64))
    value_digest: Mapped[str] = mapped_column(ascii_id(64))
    label_key: Mapped[str] = mapped_column(long_text())
    label_value: Mapped[str] = mapped_column(long_text())

    __table_args__ = (
        Index("ix_session_labels_search", "tenant_id", "key_digest", "value_digest", "session_id"),
    )


class MessageRow(Base):
    __tablename__ = "messages"

    session_id: Mapped[str] = mapped_column(ascii_id(SESSION_KEY_LENGTH), primary_key=True)
    seq: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)
    message_id: Mapped[str] = mapped_column(ascii_id(128))
    role: Mapped[int] = mapped_column(SmallInteger)
    state: Mapped[int] = mapped_column(SmallInteger)
    stop_reason: Mapped[int] = mapped_column(SmallInteger, default=0)
    token_count: Mapped[int] = mapped_column(Integer, default=0)
    create_time_us: Mapped[int] = mapped_column(BigInteger)
    counted_with: Mapped[str] = mapped_column(ascii_id(64), default="", server_default="")
    """The tokenizer spec that computed token_count."""
    rolled_back_at_seq: Mapped[int] = mapped_column(BigInteger, default=0)
    """The session's last_seq when the message was rolled back (0 while active)."""
    body: Mapped[str | None] = mapped_column(long_text(), nullable=True)
    """Legacy JSON body of rows written before schema 0006 (NULL since)."""
    data: Mapped[bytes | None] = mapped_column(long_blob(), nullable=True)
    """MessagePack: content blocks and the remaining message fields (no escaping,
    so the stored size is the content's size)."""
    calib_ratio: Mapped[float | None] = mapped_column(Double(), nullable=True)
    calib_samples: Mapped[int | None] = mapped_column(Integer, nullable=True)
    """The session's calibration as this message left it (NULL: unchanged)."""

    __table_args__ = (UniqueConstraint("session_id", "message_id", name="uq_messages_message_id"),)


class CompactionRow(Base):
    __tablename__ = "compactions"

    compaction_id: Mapped[str] = mapped_column(ascii_id(64), primary_key=True)
    session_id: Mapped[str] = mapped_column(ascii_id(SESSION_KEY_LENGTH))
    summary: Mapped[str] = mapped_column(long_text())
    first_kept_seq: Mapped[int] = mapped_column(BigInteger)
    tokens_before: Mapped[int] = mapped_column(BigInteger)
    tokens_after: Mapped[int] = mapped_column(BigInteger, default=0)
    at_seq: Mapped[int] = mapped_column(BigInteger, default=0)
    """The session's last_seq when the checkpoint was made."""
    superseded_at_seq: Mapped[int] = mapped_column(BigInteger, default=0)
    """Non-zero once a rollback invalidated the checkpoint."""
    details_json: Mapped[str] = mapped_column(long_text(), default="{}")
    created_at: Mapped[int] = mapped_column(BigInteger)
    """Microseconds since the epoch."""
    origin_id: Mapped[str] = mapped_column(ascii_id(64), default="", server_default="")
    """A fork's copy of the checkpoint it inherited shows the original's ID
    ("" for a session's own checkpoints)."""
    loss_report_json: Mapped[str | None] = mapped_column(long_text(), nullable=True)
    """The checkpoint's loss report (core.anchor_report; NULL: made before loss reports)."""

    __table_args__ = (Index("ix_compactions_session", "session_id", "created_at"),)


class RequestRow(Base):
    """Outcome of an idempotent request, keyed by typed columns (never a pattern):
    the session it changed ("" for CreateSession), its tenant, the method and the
    client's request_id."""

    __tablename__ = "request_records"

    session_id: Mapped[str] = mapped_column(ascii_id(SESSION_KEY_LENGTH), primary_key=True)
    tenant_id: Mapped[str] = mapped_column(ascii_id(64), primary_key=True)
    method: Mapped[str] = mapped_column(ascii_id(32), primary_key=True)
    request_id: Mapped[str] = mapped_column(ascii_id(128), primary_key=True)
    request_hash: Mapped[str] = mapped_column(ascii_id(64))
    outcome: Mapped[bytes] = mapped_column(long_blob())
    create_time_us: Mapped[int] = mapped_column(BigInteger)

    __table_args__ = (Index("ix_request_records_time", "tenant_id", "create_time_us"),)


class CompactionPlanRow(Base):
    """A compaction planned by PrepareCompaction, waiting for the agent's summary."""

    __tablename__ = "compaction_plans"

    plan_id: Mapped[str] = mapped_column(ascii_id(64), primary_key=True)
    session_id: Mapped[str] = mapped_column(ascii_id(SESSION_KEY_LENGTH))
    payload: Mapped[str] = mapped_column(long_text())
    expire_time_us: Mapped[int] = mapped_column(BigInteger)
    committed_compaction_id: Mapped[str] = mapped_column(ascii_id(64), default="")
    create_time_us: Mapped[int] = mapped_column(BigInteger)

    __table_args__ = (Index("ix_compaction_plans_session", "session_id"),)


class SessionRevisionRow(Base):
    """Every version of a session's settings, for exact replay of past inputs."""

    __tablename__ = "session_revisions"

    session_id: Mapped[str] = mapped_column(ascii_id(SESSION_KEY_LENGTH), primary_key=True)
    revision: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    at_seq: Mapped[int] = mapped_column(BigInteger)
    """The session's last_seq when this revision was made."""
    settings_json: Mapped[str | None] = mapped_column(long_text(), nullable=True)
    """Legacy JSON settings of revisions written before schema 0006 (NULL since)."""
    settings: Mapped[bytes | None] = mapped_column(long_blob(), nullable=True)
    """MessagePack of the replay-relevant settings."""
    create_time_us: Mapped[int] = mapped_column(BigInteger)


class MemoryBlockRow(Base):
    """Every memory block a session carried, for exact replay: the block in force
    just before message k was appended is the row with the greatest ``from_seq``
    <= k (none: no block). Written in the transaction that changes the block."""

    __tablename__ = "memory_blocks"

    session_id: Mapped[str] = mapped_column(ascii_id(SESSION_KEY_LENGTH), primary_key=True)
    from_seq: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)
    """The session's last_seq + 1 when the block was selected (a later change at the
    same last_seq replaces the row)."""
    memory_json: Mapped[str | None] = mapped_column(long_text(), nullable=True)
    """The block as sessions.memory_json holds it (NULL: an empty block)."""
    create_time_us: Mapped[int] = mapped_column(BigInteger)


class TenantRow(Base):
    """Per-tenant counters that quotas compare-and-add atomically."""

    __tablename__ = "tenants"

    tenant_id: Mapped[str] = mapped_column(ascii_id(64), primary_key=True)
    sessions: Mapped[int] = mapped_column(BigInteger, default=0)
    """Live (not deleted) sessions."""
    stored_bytes: Mapped[int] = mapped_column(BigInteger, default=0)
    """Stored bytes of the live sessions (messages, settings revisions,
    checkpoints, idempotency records)."""


class UserStateRow(Base):
    """The JSON object state shared by the sessions of one (tenant, project, user)."""

    __tablename__ = "user_states"

    tenant_id: Mapped[str] = mapped_column(ascii_id(64), primary_key=True)
    project_id: Mapped[str] = mapped_column(text_col(128), primary_key=True)
    user_id: Mapped[str] = mapped_column(text_col(128), primary_key=True)
    state_json: Mapped[str] = mapped_column(long_text())
    update_time_us: Mapped[int] = mapped_column(BigInteger)


class ProjectStateRow(Base):
    """The JSON object state shared by the sessions of one (tenant, project)."""

    __tablename__ = "project_states"

    tenant_id: Mapped[str] = mapped_column(ascii_id(64), primary_key=True)
    project_id: Mapped[str] = mapped_column(text_col(128), primary_key=True)
    state_json: Mapped[str] = mapped_column(long_text())
    update_time_us: Mapped[int] = mapped_column(BigInteger)


class MemoryRow(Base):
    """A long-term memory of a tenant's user or project (core.memory)."""

    __tablename__ = "memories"

    tenant_id: Mapped[str] = mapped_column(ascii_id(64), primary_key=True)
    memory_id: Mapped[str] = mapped_column(ascii_id(64), primary_key=True)
    user_id: Mapped[str] = mapped_column(text_col(128), default="")
    project_id: Mapped[str] = mapped_column(text_col(128), default="")
    memory_key: Mapped[str | None] = mapped_column(text_col(128), nullable=True)
    """NULL without a key (unique indexes let NULLs repeat on every dialect)."""
    text: Mapped[str] = mapped_column(long_text())
    labels_json: Mapped[str] = mapped_column(long_text(), default="{}")
    pinned: Mapped[int] = mapped_column(SmallInteger, default=0)
    state: Mapped[int] = mapped_column(SmallInteger)
    create_time_us: Mapped[int] = mapped_column(BigInteger)
    update_time_us: Mapped[int] = mapped_column(BigInteger)
    revision: Mapped[int] = mapped_column(Integer, default=1)
    source_session_id: Mapped[str] = mapped_column(ascii_id(SESSION_KEY_LENGTH), default="")

    __table_args__ = (
        UniqueConstraint(
            "tenant_id", "user_id", "project_id", "memory_key", name="uq_memories_key"
        ),
        Index("ix_memories_scope", "tenant_id", "project_id", "user_id"),
    )
