"""Replay a failing example of the whole-API model test as hypothesis printed it.

    .venv/bin/python -m tests.model.replay STEPS_FILE [DATABASE_URL]

``STEPS_FILE`` holds the printed lines (``state.create_session(...)`` and so on; any
other line is skipped). The steps run in order on a fresh SQLite database (or the
migrated ``DATABASE_URL``) and one server, the invariant checks where they are printed;
the first failure is raised as the test raised it. A failure
seen only in a long suite run (where hypothesis reached another example) is found
again this way, and fixed against the same steps.
"""

from __future__ import annotations

import re
import sys
import tempfile
from pathlib import Path

from tests.model.harness import Harness
from tests.model.machine import WholeApi
from tests.support.server import migrate_database

STEP = re.compile(r"^\s*(?:E\s+)?state\.(\w+)\((.*)\)\s*$")


def steps_of(text: str) -> list[str]:
    """The ``name(arguments)`` calls of the printed example, in order."""
    return [f"{m.group(1)}({m.group(2)})" for line in text.splitlines() if (m := STEP.match(line))]


def run_steps(steps: list[str], harness: Harness, tmp: Path) -> None:
    """The steps, in order, on a new machine over ``harness``'s running servers."""

    class Machine(WholeApi):
        pass

    Machine.harness = harness
    Machine.tmp = tmp
    state = Machine()
    for step in steps:
        print(f"state.{step}", flush=True)
        # The printed call, as hypothesis made it (its invariant checks are printed
        # as steps of their own).
        eval(f"state.{step}", {"state": state})


def replay(steps: list[str], url: str, tmp: Path) -> None:
    migrate_database(url)
    harness = Harness(url, tmp / "logs")
    harness.start()
    try:
        run_steps(steps, harness, tmp)
    finally:
        harness.stop()


def main(argv: list[str]) -> None:
    steps = steps_of(Path(argv[0]).read_text())
    tmp = Path(tempfile.mkdtemp(prefix="ctxw-model-replay-"))
    replay(steps, argv[1] if len(argv) > 1 else f"sqlite:///{tmp}/replay.db", tmp)


if __name__ == "__main__":
    main(sys.argv[1:])
