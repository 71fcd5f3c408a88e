"""Generated coding-agent sessions with anchors of every category planted in them.

Deterministic: a scenario is a function of its name and the seed. Each one is
a list of steps (the messages an agent appends at once): a user's task with
constraints, a ticket, a quantity, sometimes a URL, a checklist or a question;
the assistant reading, editing and testing files with tool calls (some tests
fail with an error code and an HTTP status); and final answers with a commit
SHA and sometimes a TODO.

* ``coding``: ordinary tasks, a few tool calls each;
* ``tool-heavy``: many large file reads per task;
* ``long``: many short tasks (several compactions per run);
* ``split-turns``: few user messages, each followed by a very long chain of
  tool calls (the compaction cut falls inside a turn).
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from dataclasses import dataclass

from ctxwarden.core.messages import ContentBlock, Message, Role, StopReason

MODULES = ("uploader", "parser", "scheduler", "billing", "auth", "cache", "router", "queue")
DIRS = ("src", "lib", "server", "pkg", "internal")
EXTS = ("py", "ts", "go", "rs")
RULES = (
    "You must keep the public API of {path} unchanged.",
    "Never call the network from unit tests.",
    "Always run the linter before committing.",
    "Don't touch {path}, it is generated.",
    "Only change files under {dir}/.",
    "Do not add new dependencies.",
    "Du musst die Tests immer grün halten.",
    "Ne jamais modifier la base de production.",
)
LIMITS = ("{n} ms", "{n}ms", "{n} s", "{n} MiB", "{n}%", "{n} tokens")
FOLLOW_UPS = ("add retries to {mod}", "document {mod}", "benchmark {mod}", "split {path}")
QUESTIONS = (
    "Which timeout does {mod} use in staging?",
    "Is {path} still used anywhere?",
    "Should {mod} log at debug level?",
)


@dataclass(frozen=True, slots=True)
class Scenario:
    name: str
    system_prompt: str
    pinned_state: str
    steps: tuple[tuple[Message, ...], ...]
    """Messages appended together, in order."""

    @property
    def message_count(self) -> int:
        return sum(len(s) for s in self.steps)


class _Writer:
    """Builds one scenario's steps from a seeded random source."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.steps: list[tuple[Message, ...]] = []
        self.calls = 0
        self.tasks = 0

    # -- pieces ---------------------------------------------------------------------

    def path(self) -> str:
        r = self.rng
        name = f"{r.choice(MODULES)}_{r.randrange(99)}.{r.choice(EXTS)}"
        return f"{r.choice(DIRS)}/{r.choice(MODULES)}/{name}"

    def ticket(self) -> str:
        return f"{self.rng.choice(('UP', 'CORE', 'OPS', 'BILL'))}-{self.rng.randrange(1, 9999)}"

    def sha(self) -> str:
        digits = "".join(self.rng.choice("0123456789abcdef") for _ in range(11))
        return "a" + digits[:5] + "7" + digits[5:]

    def limit(self) -> str:
        return self.rng.choice(LIMITS).format(n=self.rng.randrange(2, 900))

    def call(self, name: str, **args: object) -> ContentBlock:
        self.calls += 1
        return ContentBlock.of_tool_call(f"call{self.calls}", name, json.dumps(args))

    def code(self, lines: int) -> str:
        r = self.rng
        return "\n".join(
            f"def {r.choice(MODULES)}_{i}(value):\n    return value * {r.randrange(9)}"
            for i in range(lines)
        )

    # -- steps ----------------------------------------------------------------------

    def user(self, text: str) -> None:
        self.steps.append((Message(Role.USER, (ContentBlock.of_text(text),)),))

    def assistant_calls(self, text: str, calls: list[tuple[ContentBlock, str, bool]]) -> None:
        """An assistant message with ``calls`` and their results (output, is_error)."""
        content = ((ContentBlock.of_text(text),) if text else ()) + tuple(c for c, _, _ in calls)
        msgs = [Message(Role.ASSISTANT, content, stop_reason=StopReason.TOOL_USE)]
        for block, output, error in calls:
            msgs.append(
                Message(
                    Role.TOOL_RESULT,
                    (ContentBlock.of_text(output),),
                    tool_call_id=block.tool_call_id,
                    tool_name=block.tool_name,
                    is_error=error,
                )
            )
        self.steps.append(tuple(msgs))

    def answer(self, text: str) -> None:
        self.steps.append(
            (Message(Role.ASSISTANT, (ContentBlock.of_text(text),), stop_reason=StopReason.STOP),)
        )

    def task(self, reads: int, read_lines: int, question: bool = False) -> None:
        r = self.rng
        self.tasks += 1
        path, mod = self.path(), r.choice(MODULES)
        parts = [f"Task {self.tasks}: fix {self.ticket()} in {path}."]
        parts.append(r.choice(RULES).format(path=self.path(), dir=r.choice(DIRS)))
        parts.append(f"Keep the p99 latency under {self.limit()}.")
        if r.random() < 0.3:
            parts.append(f"The design doc is at https://docs.example.com/{mod}/{r.randrange(99)}.")
        if r.random() < 0.3:
            parts.append(f"\n- [ ] update the changelog for {mod}\n- [x] reproduce the bug")
        if question:
            parts.append(r.choice(QUESTIONS).format(mod=mod, path=path))
        self.user(" ".join(parts))
        files = [path, *(self.path() for _ in range(reads - 1))]
        self.assistant_calls(
            f"Reading {len(files)} files.",
            [(self.call("read", path=f), self.code(read_lines), False) for f in files],
        )
        self.assistant_calls("", [(self.call("edit", path=path, old="x", new="y"), "ok", False)])
        failed = r.random() < 0.4
        output = (
            f"FAILED test_{mod}: E{r.randrange(1000, 9999)} HTTP {r.choice((500, 502, 503, 429))}"
            if failed
            else "12 passed"
        )
        self.assistant_calls("", [(self.call("bash", command=f"pytest -k {mod}"), output, failed)])
        note = (
            f" TODO: {r.choice(FOLLOW_UPS).format(mod=mod, path=path)}." if r.random() < 0.4 else ""
        )
        self.answer(f"Fixed in commit {self.sha()}; the tests pass.{note}")

    def long_turn(self, calls: int) -> None:
        r = self.rng
        self.tasks += 1
        self.user(
            f"Task {self.tasks}: migrate {r.choice(MODULES)} ({self.ticket()}). "
            f"{r.choice(RULES).format(path=self.path(), dir=r.choice(DIRS))} "
            f"Budget: {self.limit()}."
        )
        for _ in range(calls):
            p = self.path()
            self.assistant_calls(f"Now {p}.", [(self.call("read", path=p), self.code(25), False)])
        self.answer(f"Migrated; commit {self.sha()}.")


def _coding(w: _Writer) -> None:
    for i in range(24):
        w.task(reads=2, read_lines=12, question=i % 7 == 3)


def _tool_heavy(w: _Writer) -> None:
    for _ in range(10):
        w.task(reads=8, read_lines=40)


def _long(w: _Writer) -> None:
    for i in range(70):
        w.task(reads=1, read_lines=6, question=i % 9 == 4)
    w.user("Before we stop: which of these tickets are still open?")


def _split_turns(w: _Writer) -> None:
    for _ in range(4):
        w.long_turn(calls=24)


SCENARIOS: dict[str, Callable[[_Writer], None]] = {
    "coding": _coding,
    "tool-heavy": _tool_heavy,
    "long": _long,
    "split-turns": _split_turns,
}


def build(name: str, seed: int) -> Scenario:
    """The scenario ``name`` for ``seed`` (KeyError for an unknown name)."""
    make = SCENARIOS[name]
    rng = random.Random(f"{name}:{seed}")
    writer = _Writer(rng)
    make(writer)
    return Scenario(
        name,
        "You are a careful coding agent working in a large repository.",
        f"Goal: keep the {rng.choice(MODULES)} service green.",
        tuple(writer.steps),
    )
