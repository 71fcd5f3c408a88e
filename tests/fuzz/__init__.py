"""Hostile-input tests: fuzzed requests against real server processes."""
