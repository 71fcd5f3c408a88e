"""The one map from store failures to domain errors."""

from __future__ import annotations

from ctxwarden.core.errors import InvalidArgument, ResourceExhausted, Unavailable
from ctxwarden.core.reasons import ErrorReason
from ctxwarden.core.state import too_large
from ctxwarden.store.errors import QuotaExceeded, StoreRejected, StoreUnavailable, TooLarge


def quota_error(exc: QuotaExceeded) -> ResourceExhausted:
    if exc.quota == "sessions":
        return ResourceExhausted(
            f"this tenant already has {exc.used} sessions, the quota is {exc.limit}; delete "
            "sessions you no longer need",
            reason=ErrorReason.SESSION_QUOTA_EXCEEDED,
            metadata={"quota": str(exc.limit)},
        )
    used = f"{exc.used:,} bytes" if exc.used >= 0 else "nearly all of it"
    return ResourceExhausted(
        f"this tenant's storage quota is {exc.limit:,} bytes and it stores {used}; this "
        "write would cross it. Delete (and purge) sessions you no longer need",
        reason=ErrorReason.STORAGE_QUOTA_EXCEEDED,
        metadata={"quota_bytes": str(exc.limit)},
    )


def store_error(exc: Exception) -> Exception:
    """The domain error for a store failure (the one map from store to domain)."""
    if isinstance(exc, (StoreUnavailable, TimeoutError)):
        return Unavailable(
            "the database is unavailable; retry shortly", reason=ErrorReason.DATABASE_UNAVAILABLE
        )
    if isinstance(exc, TooLarge) and exc.field.startswith("state_delta."):
        return too_large(exc.field, exc.size)
    if isinstance(exc, TooLarge):
        return InvalidArgument(
            f"{exc.field} is {exc.size:,} bytes as stored; the limit is {exc.limit:,} bytes",
            reason=ErrorReason.MESSAGE_TOO_LARGE,
            field=exc.field,
            metadata={"limit_bytes": str(exc.limit), "size_bytes": str(exc.size)},
        )
    if isinstance(exc, QuotaExceeded):
        return quota_error(exc)
    if isinstance(exc, StoreRejected):
        return InvalidArgument(
            f"the database refused to store this request: {str(exc)[:300]}",
            reason=ErrorReason.WRITE_REJECTED,
        )
    return exc
