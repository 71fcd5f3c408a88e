"""A model-based test of the whole API: hypothesis drives every RPC at random against real
servers, interleaved, and checks the reference model (``reference.Ref``) after every step.

Rules (``rules_*.py``; written examples in ``test_scenarios.py``): plain, streamed and
idempotently retried appends, ``AppendModelOutput`` in all four formats, tool calls answered
in any order, failed turns, rollbacks (plain and ``to_seq``), agent-side, server and
background compactions (eager and cache-aware sessions, on either replica:
``background.py``) with layered clearing, forks of forks, ``state_delta``, history-only
messages, memory writes and refreshes, archive/unarchive, label updates, a new tokenizer or
model (every kept message counted anew) and the console's label search, export -> import,
delete and purge, restarts of every replica, the database ending every replica's
connections; every BuildModelInput with or without ``report_cache_prefix``. Invariants
(``checks.py``, ``cache_model.py``): no orphan tool call or result in the view or any
rendering; no failed, rolled-back or history-only message in the view; replay at every seq
equals what was returned then; a fork equals its source's replay at the fork point and never
leaks either way; what a provider sent survives rendering back to it; export -> import and
restart are byte-identical; every acknowledged append is stored exactly once; the tenant
quota holds (a refused append leaves no trace); the usage ledger is the sum of the usage of
the messages stored, unchanged by a retry; every live input's cache report is the prefix it
shares with the replica's previous input of its format (exactly as computed from the two
inputs), the stable-prefix promise holds across appends, a shrunk prefix is explained by
what the model did in between, and GetUsage's cache ledger is the sum of the builds' reports
less what the docs say a dropped copy loses; a label search finds exactly the sessions the
reference's filter does."""

from __future__ import annotations

from tests.model.base import STATS
from tests.model.rules_context import ContextRules
from tests.model.rules_messages import MessageRules
from tests.model.rules_sessions import SessionRules

__all__ = ["STATS", "WholeApi"]


class WholeApi(SessionRules, MessageRules, ContextRules):
    """Every rule of ``rules_*.py`` over one ``Base``."""
