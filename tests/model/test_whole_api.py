"""The whole API, driven at random against real servers (``machine.WholeApi``).

Runs on SQLite, MariaDB and PostgreSQL with one server, and on MariaDB and PostgreSQL
with two replicas of one database. ``CTXWARDEN_MODEL_EXAMPLES`` sets the number of
examples (default 4) and ``CTXWARDEN_MODEL_STEPS`` the steps per example (default 45:
with 30, the fixed examples drew no export -> import and no idempotent retry once the
cache-ledger and label rules joined; with 45 they draw 2 and 6, and 9 label searches).
The examples are the same every run unless ``CTXWARDEN_MODEL_SEED`` is set (then
``--hypothesis-seed=N`` picks them)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis.stateful import run_state_machine_as_test

from tests.model.harness import Harness, running
from tests.model.machine import STATS, WholeApi

EXAMPLES = int(os.environ.get("CTXWARDEN_MODEL_EXAMPLES", "4"))
STEPS = int(os.environ.get("CTXWARDEN_MODEL_STEPS", "45"))


def _run(harness: Harness, tmp_path: Path) -> None:
    class Machine(WholeApi):
        pass

    Machine.harness = harness
    Machine.tmp = tmp_path
    STATS.clear()
    run_state_machine_as_test(
        Machine,
        settings=settings(
            max_examples=EXAMPLES,
            stateful_step_count=STEPS,
            deadline=None,
            derandomize=os.environ.get("CTXWARDEN_MODEL_SEED") is None,
            suppress_health_check=list(HealthCheck),
            # Every step is a round trip to real servers: shrinking a long example takes
            # longer than CI allows, so it is opt-in (CTXWARDEN_MODEL_SHRINK=1).
            phases=[Phase.explicit, Phase.reuse, Phase.generate]
            + ([Phase.shrink] if os.environ.get("CTXWARDEN_MODEL_SHRINK") else []),
        ),
    )
    print(f"\nwhole-API model: {dict(sorted(STATS.items()))}")


@pytest.fixture
def one_server(backend_url: str, tmp_path: Path) -> Iterator[Harness]:
    with running(backend_url, tmp_path) as harness:
        yield harness


def test_whole_api(one_server: Harness, tmp_path: Path) -> None:
    _run(one_server, tmp_path)


@pytest.mark.parametrize("backend_url", ["mysql", "postgres"], indirect=True)
def test_whole_api_on_two_replicas(backend_url: str, tmp_path: Path) -> None:
    with running(backend_url, tmp_path, replicas=2) as harness:
        _run(harness, tmp_path)
