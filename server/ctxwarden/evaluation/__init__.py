"""Offline evaluation of compaction (``ctxwarden eval compaction``)."""
