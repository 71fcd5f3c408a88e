"""The composition root: what runs once ``ctxwarden serve`` is parsed.

``server`` wires store, service and api into a gRPC server; ``console`` and
``lifecycle`` start the web console and the retention/idle-eviction schedule beside
it; ``workers``, ``workers_run`` and ``worker_link`` run ``serve --workers N``;
``database_errors`` turns a database that cannot be used into one line.
"""
