"""Written examples of the whole-API model test: the steps that bring one feature
together with the others, run every time with the model's own checks.

Hypothesis's fixed examples are a draw: a rule may not be drawn in them at all (a new
choice of a rule changes every later draw). What a feature must be driven through is
written here as steps, as a failing example is printed (``tests.model.replay``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.model.harness import Harness, running
from tests.model.replay import run_steps


def written(*steps: str) -> list[str]:
    """The steps with the invariant checks hypothesis runs after each, and its teardown."""
    return [x for step in steps for x in (step, "touched_session_holds()")] + ["teardown()"]


SETTINGS_RECOUNTED = written(
    "create_session(background='off', clearing=True, memory=True, team='red', tier='gold')",
    "append_one(n=0, kind='user', text='plan the change')",
    "call_tools(n=0, calls=2)",
    "answer_call(n=0, which=0, big=True)",
    "answer_call(n=0, which=1, big=False)",
    "append_one(n=0, kind='assistant', text='done with both')",
    "change_counting(n=0, what='tokenizer')",
    "fork(n=0, at=3)",
    "change_counting(n=0, what='model')",
    "stream(count=3, n=0)",
    "compact(n=0, keep=40, server=True)",
    "change_counting(n=1, what='tokenizer')",
    "restart(roll=0)",
    "export_import(n=0, roll=0)",
    "rollback(n=0, back=2, plain=False)",
    "change_counting(n=2, what='model')",
    "write_memory(n=0, text='prefers small diffs', pinned=True)",
    "refresh_memory(n=0)",
    "change_counting(n=0, what='tokenizer')",
)
"""A new tokenizer and a new model (every kept message counted anew) with tool calls,
forks before and after, a streamed run, a server compaction, a restart, export ->
import, a rollback to before a change and a memory refresh."""


ARCHIVED_SOURCE_PURGED = written(
    "create_session(background='off', clearing=False, memory=False, team='red', tier='gold')",
    "create_session(background='off', clearing=False, memory=False, team='red', tier='')",
    "append_one(n=0, kind='user', text='start here')",
    "append_one(n=0, kind='assistant', text='started')",
    "fork(n=0, at=2)",
    "delete_and_purge(archived=True, n=0, roll=0)",
    "search_labels(archived='archived', by='any tier', team='red', tier='', user=0)",
    "delete_and_purge(archived=False, n=2, roll=0)",
    "search_labels(archived='archived', by='run', team='red', tier='', user=0)",
    "delete_and_purge(archived=True, n=0, roll=0)",
    "search_labels(archived='all', by='run', team='red', tier='', user=0)",
)
"""An archived session past its purge rule stays (archived, found by the console's
search) while a fork reads from it, even in the purge that removes the fork, and goes
with the next one (found by a random example: the model took it for purged)."""

ABANDONED_STREAMS = written(
    "create_session(background='off', clearing=False, memory=True, team='blue', tier='')",
    "append_one(n=0, kind='user', text='look at the logs')",
    "append_one(n=0, kind='assistant', text='looking')",
    "abandon_stream(count=4, n=0, read=1)",
    "abandon_stream(count=3, n=0, read=0)",
    "fork(n=0, at=4)",
    "abandon_stream(count=2, n=1, read=2)",
    "compact(n=0, keep=20, server=True)",
    "abandon_stream(count=4, n=0, read=2)",
    "rollback(n=0, back=2, plain=True)",
    "restart(roll=0)",
    "abandon_stream(count=1, n=0, read=0)",
    "export_import(n=0, roll=0)",
    "stream(count=2, n=0)",
)
"""Clients that go away in the middle of a stream (after reading some answers or none),
with forks from among the requests they left, a server compaction, a rollback, a restart
and export -> import: every answered request stored, the others whole or not at all, and
the next calls agree with what was stored (a write left in flight is waited for)."""

SCENARIOS = {
    "settings": SETTINGS_RECOUNTED,
    "archived source": ARCHIVED_SOURCE_PURGED,
    "abandoned streams": ABANDONED_STREAMS,
}


@pytest.fixture
def one_server(backend_url: str, tmp_path: Path) -> Iterator[Harness]:
    with running(backend_url, tmp_path) as harness:
        yield harness


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_scenario(one_server: Harness, tmp_path: Path, scenario: str) -> None:
    run_steps(SCENARIOS[scenario], one_server, tmp_path)


@pytest.mark.parametrize("scenario", SCENARIOS)
@pytest.mark.parametrize("backend_url", ["mysql", "postgres"], indirect=True)
def test_scenario_on_two_replicas(backend_url: str, tmp_path: Path, scenario: str) -> None:
    with running(backend_url, tmp_path, replicas=2) as harness:
        run_steps(SCENARIOS[scenario], harness, tmp_path)
