"""The operator commands of ``ctxwarden``: what each one does once parsed.

A module a command (or a family): ``admin`` (sessions, context, compact, rollback,
over gRPC, with the client in ``client``), ``usage``, ``health`` (the probe),
``config_check``, ``database`` (purge, migrate). The parser that reaches them is
:mod:`ctxwarden.cli.parser`.
"""
