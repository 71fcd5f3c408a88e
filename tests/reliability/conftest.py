"""Reliability tests: real servers under simulated-agent load, with faults injected.

Everything runs on loopback and is bounded in time. ``CTXWARDEN_LOAD_SECONDS``
sets the length of the steady-load test (default 60 s on MySQL, 15 s on SQLite).
The MariaDB restart test stops and starts a private MariaDB server the suite runs
itself (tests/support/mariadb.py), never the shared one; leave it out with
``-m "not db_outage"``.
"""
