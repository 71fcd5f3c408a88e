"""Store-level failures, translated into domain errors by the service layer."""


class StoreError(Exception):
    pass


class ConcurrentWrite(StoreError):
    """Another writer changed the session first (compare-and-set failed)."""


class DuplicateKey(StoreError):
    """A unique key (message_id or request_id) already exists."""
