"""Use cases: the hot-session cache in front of the repository.

The service owns consistency: it plans a change on the in-memory session
(core), writes it (store), and only then installs it in memory.
"""

from ctxwarden.service.manager import AppendResult, RollbackResult, SessionManager

__all__ = ["AppendResult", "RollbackResult", "SessionManager"]
