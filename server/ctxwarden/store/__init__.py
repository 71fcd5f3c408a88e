"""Persistence: SQLAlchemy models, the repository and Alembic migrations."""
