"""Compaction: where to cut, what to summarise, and how the summary is asked for."""
