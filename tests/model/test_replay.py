"""``tests.model.replay`` runs a printed example's steps, and a failing step fails it."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.model.replay import replay, steps_of

PRINTED = """
E       Failing test case: <state machine>
E       state = Machine()
E       state.touched_session_holds()
state.create_session(background='eager', clearing=False, memory=False, team='red', tier='gold')
E       state.touched_session_holds()
E       state.stream(count=3, n=1)
E       state.touched_session_holds()
E       state.teardown()
"""


def test_the_printed_steps_are_read_in_order() -> None:
    steps = steps_of(PRINTED)
    assert steps[1].startswith("create_session(background='eager'")
    assert steps[2:] == [
        "touched_session_holds()",
        "stream(count=3, n=1)",
        "touched_session_holds()",
        "teardown()",
    ]


def test_a_printed_example_replays_and_a_failing_step_fails(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/replay.db"
    replay(steps_of(PRINTED), url, tmp_path)
    with pytest.raises(ZeroDivisionError):  # no session to pick (a precondition hypothesis checks)
        replay(["archive_toggle(n=0)"], f"sqlite:///{tmp_path}/other.db", tmp_path / "b")
