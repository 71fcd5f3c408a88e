"""Store-level failures, translated into domain errors by the service layer."""


class StoreError(Exception):
    pass


class ConcurrentWrite(StoreError):
    """Another writer changed the session first (compare-and-set failed)."""


class DuplicateKey(StoreError):
    """A unique key (message_id or request_id) already exists."""


class TooLarge(StoreError):
    """A value is larger than the store accepts (nothing was written)."""

    def __init__(self, field: str, size: int, limit: int) -> None:
        super().__init__(f"{field} is {size:,} bytes stored; the limit is {limit:,}")
        self.field, self.size, self.limit = field, size, limit


class QuotaExceeded(StoreError):
    """A tenant quota would be crossed (nothing was written)."""

    def __init__(self, quota: str, used: int, limit: int) -> None:
        super().__init__(f"tenant quota {quota}: {used:,} used of {limit:,}")
        self.quota, self.used, self.limit = quota, used, limit


class StoreUnavailable(StoreError):
    """The database could not be reached, or did not answer in time. Safe to retry;
    for a commit that was in flight the outcome is unknown."""


class StoreRejected(StoreError):
    """The database refused a write for good (retrying the same write cannot help)."""
