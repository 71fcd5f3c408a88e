"""ExtractiveSummarizer: a structured summary without an LLM."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from ctxwarden.core.compaction.extractive import (
    CUT_MARKER,
    LABEL,
    ExtractiveSummarizer,
    build_extractive_summary,
)
from ctxwarden.core.compaction.types import SummaryPrompt, SummaryRequest
from ctxwarden.core.messages import ContentBlock, Message, MessageState, Role, StopReason

HISTORY_SECTIONS = [
    "## Goal",
    "## Constraints & Preferences",
    "## Progress",
    "### Done",
    "### In Progress",
    "### Blocked",
    "## Key Decisions",
    "## Next Steps",
    "## Critical Context",
]


def user(text: str) -> Message:
    return Message(Role.USER, (ContentBlock.of_text(text),))


def answer(text: str, stop: StopReason = StopReason.STOP) -> Message:
    return Message(Role.ASSISTANT, (ContentBlock.of_text(text),), stop_reason=stop)


def call(call_id: str, name: str, text: str = "", **args: str) -> Message:
    blocks = [ContentBlock.of_text(text)] if text else []
    blocks.append(ContentBlock.of_tool_call(call_id, name, json.dumps(args)))
    return Message(Role.ASSISTANT, tuple(blocks), stop_reason=StopReason.TOOL_USE)


def result(call_id: str, name: str, text: str, *, error: bool = False) -> Message:
    return Message(
        Role.TOOL_RESULT,
        (ContentBlock.of_text(text),),
        tool_call_id=call_id,
        tool_name=name,
        is_error=error,
    )


def failed(error: str, stop: StopReason = StopReason.ERROR, text: str = "") -> Message:
    content = (ContentBlock.of_text(text),) if text else ()
    return Message(Role.ASSISTANT, content, stop_reason=stop, error_message=error)


def req(
    messages: list[Message],
    *,
    max_tokens: int = 4000,
    previous: str = "",
    turn_prefix: bool = False,
    read: tuple[str, ...] = (),
    modified: tuple[str, ...] = (),
) -> SummaryRequest:
    return SummaryRequest(
        prompt=SummaryPrompt("system", "user prompt", max_tokens),
        messages=messages,
        previous_summary=previous,
        read_files=read,
        modified_files=modified,
        turn_prefix=turn_prefix,
    )


SESSION = [
    user("Add a --verbose flag to the CLI in src/cli.py"),
    call("c1", "read", path="src/cli.py"),
    result("c1", "read", "import argparse\n..."),
    call("c2", "bash", "Running the tests.", command="pytest -q"),
    result("c2", "bash", "FAILED tests/test_cli.py::test_verbose - AssertionError", error=True),
    failed("rate limit exceeded: retry in 20s", text="half-written reply"),
    call("c3", "edit", path="src/cli.py"),
    result("c3", "edit", "ok"),
    answer("Added --verbose to src/cli.py; all tests pass."),
    user("Now also document it in README.md"),
    call("c4", "read", path="README.md"),
    result("c4", "read", "# Tool\n..."),
]


def section(text: str, heading: str) -> str:
    """The body of ``heading`` up to the next heading of the same or a higher level."""
    level = heading.split(" ", 1)[0]
    lines = text.splitlines()
    start = lines.index(heading) + 1
    body: list[str] = []
    for line in lines[start:]:
        marks = line.split(" ", 1)[0]
        if marks and set(marks) == {"#"} and len(marks) <= len(level):
            break
        body.append(line)
    return "\n".join(body).strip()


async def test_protocol_surface() -> None:
    summarizer = ExtractiveSummarizer()
    assert summarizer.name == "extractive"
    assert summarizer.max_output_tokens > 0
    assert await summarizer.summarize(req(SESSION)) == build_extractive_summary(req(SESSION))


def test_labelled_and_all_sections_in_order() -> None:
    text = build_extractive_summary(req(SESSION))
    assert text.splitlines()[0] == LABEL
    positions = [text.splitlines().index(h) for h in HISTORY_SECTIONS]
    assert positions == sorted(positions)
    assert "## Earlier" not in text


def test_goal_is_first_request_verbatim_then_later_ones() -> None:
    text = build_extractive_summary(req(SESSION))
    goal = section(text, "## Goal")
    assert goal.startswith("Add a --verbose flag to the CLI in src/cli.py")
    assert "- Now also document it in README.md" in goal


def test_long_requests_are_truncated() -> None:
    long_request = "x" * 2000
    text = build_extractive_summary(req([user(long_request), user("y" * 1000)]))
    goal = section(text, "## Goal")
    assert "x" * 500 in goal
    assert "x" * 501 not in goal
    assert "[... 1500 more characters]" in goal
    assert "y" * 301 not in goal


def test_progress_sections() -> None:
    text = build_extractive_summary(req(SESSION))
    done = section(text, "### Done")
    assert done == "- [x] Added --verbose to src/cli.py; all tests pass."
    in_progress = section(text, "### In Progress")
    assert "Now also document it in README.md" in in_progress
    assert 'read({"path": "README.md"})' in in_progress
    assert 'src/cli.py"})' not in in_progress  # finished work is not in progress
    blocked = section(text, "### Blocked")
    assert "tool `bash`: FAILED tests/test_cli.py::test_verbose - AssertionError" in blocked
    assert "model call failed: rate limit exceeded: retry in 20s" in blocked
    assert section(text, "## Next Steps") == "1. Continue with: Now also document it in README.md"
    assert section(text, "## Key Decisions") == "- (none recorded)"
    assert section(text, "## Constraints & Preferences") == "- (none recorded)"


def test_critical_context_files_and_errors_verbatim() -> None:
    error = "Traceback (most recent call last):\n  File 'x.py', line 3\nValueError: boom"
    messages = [
        user("go"),
        call("c1", "bash", command="make"),
        result("c1", "bash", error, error=True),
    ]
    text = build_extractive_summary(
        req(messages, read=("README.md", "src/a.py"), modified=("src/cli.py",))
    )
    critical = section(text, "## Critical Context")
    assert "- Files read:\n  - README.md\n  - src/a.py" in critical
    assert "- Files modified:\n  - src/cli.py" in critical
    assert "bash x1" in critical
    assert "Traceback (most recent call last):" in critical
    assert "ValueError: boom" in critical
    assert "  File 'x.py', line 3" in critical


def test_failed_and_rolled_back_messages_are_skipped() -> None:
    rolled_back = Message(
        Role.USER, (ContentBlock.of_text("a rolled back request"),), state=MessageState.ROLLED_BACK
    )
    failed_call = Message(
        Role.ASSISTANT,
        (ContentBlock.of_text("text of a failed reply"), ContentBlock.of_tool_call("f1", "rm")),
        stop_reason=StopReason.ABORTED,
        error_message="aborted by the user",
    )
    messages = [
        user("first"),
        rolled_back,
        failed_call,
        result("f1", "rm", "output of a failed call", error=True),
        failed("provider 503", text="partial text"),
        answer("done"),
    ]
    text = build_extractive_summary(req(messages))
    assert "a rolled back request" not in text
    assert "text of a failed reply" not in text
    assert "output of a failed call" not in text
    assert "partial text" not in text
    assert "rm(" not in text
    assert "model call aborted: aborted by the user" in text
    assert "model call failed: provider 503" in text
    assert section(text, "### Done") == "- [x] done"


def test_rolled_back_failure_leaves_no_error() -> None:
    gone = Message(
        Role.ASSISTANT,
        (),
        stop_reason=StopReason.ERROR,
        error_message="old error",
        state=MessageState.ROLLED_BACK,
    )
    text = build_extractive_summary(req([user("q"), gone, answer("a")]))
    assert "old error" not in text


def test_empty_history() -> None:
    text = build_extractive_summary(req([]))
    assert text.splitlines()[0] == LABEL
    assert "(no user request in this part of the conversation)" in text
    assert section(text, "### Done") == "- (none recorded)"
    assert section(text, "## Next Steps") == "- (none recorded)"


def test_previous_summary_is_kept() -> None:
    previous = "## Goal\nMigrate the DB to MySQL.\n\n## Critical Context\n- DSN in .env"
    text = build_extractive_summary(req(SESSION, previous=previous))
    lines = text.splitlines()
    assert lines[0] == LABEL
    earlier = section(text, "## Earlier")
    assert "### Goal\nMigrate the DB to MySQL." in earlier
    assert "- DSN in .env" in earlier
    assert "see ## Earlier for the original goal" in section(text, "## Goal")
    for heading in HISTORY_SECTIONS:
        assert heading in lines


def test_information_survives_several_rounds() -> None:
    rounds = [
        [user("round one: set up the repo"), answer("repo ready at /srv/app")],
        [user("round two: add CI"), answer("CI added in .ci/run")],
        [user("round three: release"), failed("quota exhausted")],
    ]
    summary = ""
    for messages in rounds:
        summary = build_extractive_summary(req(messages, previous=summary, max_tokens=100_000))
    for fact in (
        "round one: set up the repo",
        "repo ready at /srv/app",
        "round two: add CI",
        "CI added in .ci/run",
        "round three: release",
        "quota exhausted",
    ):
        assert fact in summary
    assert summary.count(LABEL) == 1
    assert summary.splitlines()[0] == LABEL


def test_an_llm_summary_as_previous_is_kept_whole() -> None:
    previous = "## Goal\nShip it.\n\n## Progress\n### Done\n- [x] wrote the parser"
    text = build_extractive_summary(req([user("next")], previous=previous))
    assert "### Goal\nShip it." in text
    assert "#### Done\n- [x] wrote the parser" in text


def test_deterministic() -> None:
    request = req(SESSION, previous="## Goal\nearlier", read=("b", "a"))
    outputs = {build_extractive_summary(request) for _ in range(5)}
    assert len(outputs) == 1


def test_budget_is_respected() -> None:
    messages = [user("u" * 5000)]
    for i in range(200):
        messages.append(call(f"c{i}", "bash", command="x" * 50))
        messages.append(result(f"c{i}", "bash", f"error {i} " + "e" * 400, error=True))
        messages.append(answer(f"answer {i} " + "a" * 400))
    text = build_extractive_summary(req(messages, max_tokens=500, read=("f",) * 100))
    assert len(text) <= 500 * 4
    assert text.splitlines()[0] == LABEL
    assert CUT_MARKER in text
    # Every section keeps its heading and a share of the budget.
    for heading in ("## Goal", "## Progress", "## Critical Context", "## Next Steps"):
        assert heading in text
    assert "u" * 200 in section(text, "## Goal")
    # Lists of work keep their latest items.
    assert "answer 199 " in section(text, "### Done")
    assert "answer 0 " not in section(text, "### Done")
    assert "error 199 " in section(text, "### Blocked")


def test_budget_keeps_some_of_the_earlier_summary() -> None:
    previous = "## Goal\n" + "p" * 10_000
    messages = [user("n" * 10_000), answer("done")]
    text = build_extractive_summary(req(messages, previous=previous, max_tokens=600))
    assert len(text) <= 2400
    assert "p" * 300 in section(text, "## Earlier")
    assert "n" * 300 in section(text, "## Goal")


def test_small_output_is_not_cut() -> None:
    text = build_extractive_summary(req(SESSION, max_tokens=100_000))
    assert CUT_MARKER not in text


@settings(max_examples=60, deadline=None)
@given(
    max_tokens=st.integers(min_value=64, max_value=3000),
    sizes=st.lists(st.integers(min_value=0, max_value=3000), min_size=1, max_size=12),
    previous=st.text(max_size=3000),
)
def test_budget_property(max_tokens: int, sizes: list[int], previous: str) -> None:
    messages: list[Message] = []
    for i, n in enumerate(sizes):
        messages.append(user(f"request {i} " + "r" * n) if i % 2 == 0 else answer("a" * n))
    text = build_extractive_summary(req(messages, max_tokens=max_tokens, previous=previous))
    assert len(text) <= max_tokens * 4
    assert text.startswith(LABEL)


def test_turn_prefix_form() -> None:
    messages = [
        user("Refactor the storage layer"),
        call("c1", "read", "Let me look at the store.", path="store.py"),
        result("c1", "read", "class Store: ..."),
        call("c2", "bash", command="pytest"),
        result("c2", "bash", "1 failed: test_store", error=True),
    ]
    text = build_extractive_summary(
        req(messages, turn_prefix=True, previous="## Goal\nnot repeated", modified=("store.py",))
    )
    lines = text.splitlines()
    assert lines[0] == LABEL
    assert [line for line in lines if line.startswith("## ")] == [
        "## Original Request",
        "## Early Progress",
        "## Context for the Kept Part",
    ]
    assert section(text, "## Original Request") == "Refactor the storage layer"
    early = section(text, "## Early Progress")
    assert "- Let me look at the store." in early
    assert '- called read({"path": "store.py"})' in early
    context = section(text, "## Context for the Kept Part")
    assert "1 failed: test_store" in context
    assert "- Files modified:\n  - store.py" in context
    assert "not repeated" not in text


def test_turn_prefix_without_the_request() -> None:
    text = build_extractive_summary(req([call("c1", "ls")], turn_prefix=True))
    assert "(the request is before this part of the turn)" in text
