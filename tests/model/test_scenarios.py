"""Written examples of the whole-API model test: the steps that bring one feature
together with the others, run every time with the model's own checks.

Hypothesis's fixed examples are a draw: a rule may not be drawn in them at all (a new
choice of a rule changes every later draw). What a feature must be driven through is
written here as steps, as a failing example is printed (``tests.model.replay``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.model.harness import Harness
from tests.model.replay import run_steps

SETTINGS_RECOUNTED = [
    "create_session(background='off', clearing=True, memory=True, team='red', tier='gold')",
    "append_one(n=0, kind='user', text='plan the change')",
    "call_tools(n=0, calls=2)",
    "answer_call(n=0, which=0, big=True)",
    "answer_call(n=0, which=1, big=False)",
    "append_one(n=0, kind='assistant', text='done with both')",
    "touched_session_holds()",
    "update_session(n=0, team='red', tier='', what='tokenizer')",
    "touched_session_holds()",
    "fork(n=0, at=3)",
    "touched_session_holds()",
    "update_session(n=0, team='red', tier='', what='model')",
    "touched_session_holds()",
    "stream(count=3, n=0)",
    "touched_session_holds()",
    "compact(n=0, keep=40, server=True)",
    "touched_session_holds()",
    "update_session(n=1, team='blü', tier='free', what='tokenizer')",
    "touched_session_holds()",
    "restart(roll=0)",
    "touched_session_holds()",
    "export_import(n=0, roll=0)",
    "touched_session_holds()",
    "rollback(n=0, back=2, plain=False)",
    "touched_session_holds()",
    "update_session(n=2, team='a=b', tier='', what='model')",
    "touched_session_holds()",
    "write_memory(n=0, text='prefers small diffs', pinned=True)",
    "refresh_memory(n=0)",
    "update_session(n=0, team='red', tier='', what='tokenizer')",
    "touched_session_holds()",
    "teardown()",
]
"""A new tokenizer and a new model (every kept message counted anew) with tool calls,
forks before and after, a streamed run, a server compaction, a restart, export ->
import, a rollback to before a change and a memory refresh."""


@pytest.fixture
def one_server(backend_url: str, tmp_path: Path) -> Iterator[Harness]:
    harness = Harness(backend_url, tmp_path / "logs")
    harness.start()
    try:
        yield harness
    finally:
        harness.stop()


def test_settings_recounted_with_every_other_feature(one_server: Harness, tmp_path: Path) -> None:
    run_steps(SETTINGS_RECOUNTED, one_server, tmp_path)


@pytest.mark.parametrize("backend_url", ["mysql", "postgres"], indirect=True)
def test_settings_recounted_on_two_replicas(backend_url: str, tmp_path: Path) -> None:
    harness = Harness(backend_url, tmp_path / "logs", replicas=2)
    harness.start()
    try:
        run_steps(SETTINGS_RECOUNTED, harness, tmp_path)
    finally:
        harness.stop()
