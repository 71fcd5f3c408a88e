"""The README's walkthrough runs as written, with a server restart in between."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from tests.support.server import ServerProcess

README = Path(__file__).resolve().parents[1] / "README.md"


def _blocks() -> dict[str, str]:
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)
    named = {}
    for block in blocks:
        first = block.splitlines()[0]
        if first.startswith("# walkthrough part"):
            named[first.split(":")[0].removeprefix("# walkthrough ")] = block
        elif first.startswith("# compaction example"):
            named["compaction"] = block
        elif first.startswith("# chunked compaction example"):
            named["chunked compaction"] = block
        elif first.startswith("# background compaction example"):
            named["background compaction"] = block
        elif first.startswith("# one loop example"):
            named["one loop"] = block
        elif first.startswith("# layered example"):
            named["layered"] = block
        elif first.startswith("# fork example"):
            named["fork"] = block
        elif first.startswith("# lifecycle example"):
            named["lifecycle"] = block
        elif first.startswith("# memory example"):
            named["memory"] = block
    return named


def _run(code: str, target: str, cwd: Path) -> str:
    proc = subprocess.run(
        [sys.executable, "-c", code],
        cwd=cwd,
        env={**os.environ, "CTXWARDEN_TARGET": target},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_walkthrough_runs_as_written(backend_url: str, tmp_path: Path) -> None:
    blocks = _blocks()
    assert {"part 1", "part 2"} <= set(blocks)
    server = ServerProcess(backend_url, log_dir=tmp_path)
    server.start()
    try:
        out1 = _run(blocks["part 1"], server.target, tmp_path)
        lines = out1.splitlines()
        assert lines[0] == "['FAILED_MESSAGE_OMITTED']"
        assert lines[1] == "[4] 2"
        server.restart()
        out2 = _run(blocks["part 2"], server.target, tmp_path)
        assert out2.splitlines()[0] == "identical after restart: 3 messages"
        assert out2.splitlines()[1] == "[1, 1, 1, 2]"
    finally:
        server.stop()


def test_readme_test_command_is_what_ci_runs() -> None:
    text = README.read_text()
    assert "./scripts/test.sh" in text
    ci = (README.parent / ".ci" / "run").read_text()
    assert "./scripts/test.sh" in ci


def test_agent_side_compaction_example_runs(server_target: str, tmp_path: Path) -> None:
    out = _run(_blocks()["compaction"], server_target, tmp_path).splitlines()
    before, after = (int(x) for x in out[0].removesuffix(" tokens").split(" -> "))
    assert after < before
    assert out[1] == "True"


def test_layered_compaction_example_runs(server_target: str, tmp_path: Path) -> None:
    # The shared server has no summariser: the clearing alone brings the input back.
    out = _run(_blocks()["layered"], server_target, tmp_path).splitlines()
    assert out == ["True True", "True"]


def test_fork_example_runs(server_target: str, tmp_path: Path) -> None:
    out = _run(_blocks()["fork"], server_target, tmp_path).splitlines()
    assert out == ["True 3", "['Name a prime.', '7', 'Another?', '13']", "1", "True"]


def test_lifecycle_example_runs(server_target: str, tmp_path: Path) -> None:
    out = _run(_blocks()["lifecycle"], server_target, tmp_path).splitlines()
    assert out == ["True", "SESSION_ARCHIVED", "True", "True 2"]


def test_memory_example_runs(server_target: str, tmp_path: Path) -> None:
    for _ in range(2):  # safe to run again: new IDs every time
        out = _run(_blocks()["memory"], server_target, tmp_path).splitlines()
        assert out == ["1 2", "False", "True"]


def test_chunked_compaction_example_runs(server_target: str, tmp_path: Path) -> None:
    out = _run(_blocks()["chunked compaction"], server_target, tmp_path).splitlines()
    assert out == ["True True"]


def test_background_compaction_example_runs(backend_url: str, tmp_path: Path) -> None:
    server = ServerProcess(backend_url, log_dir=tmp_path, extra_args=["--summarizer", "extractive"])
    server.start()
    try:
        out = _run(_blocks()["background compaction"], server.target, tmp_path).splitlines()
    finally:
        server.stop()
    assert out == ["COMPACTION_TRIGGER_BACKGROUND", "True"]


def test_go_and_ts_snippets_are_excerpts_of_the_tested_examples() -> None:
    text = README.read_text().replace(_one_loop_section(), "")  # checked below
    root = README.parent
    go_src = (root / "client/go/example/quickstart/main.go").read_text()
    ts_src = (root / "client/ts/examples/agent-loop.ts").read_text()
    go_blocks = re.findall(r"```go\n(.*?)```", text, flags=re.S)
    ts_blocks = re.findall(r"```ts\n(.*?)```", text, flags=re.S)
    assert go_blocks and ts_blocks
    for block in go_blocks:  # a complete program: the whole file
        assert block == go_src, block[:80]

    def flat(code: str) -> str:  # the example indents the flow inside a function
        return "\n".join(line.strip() for line in code.splitlines())

    for block in ts_blocks:
        assert flat(block) in flat(ts_src), block[:80]


def test_one_loop_example_runs_against_a_provider(backend_url: str, tmp_path: Path) -> None:
    """The loop moves JSON only: the provider sees the tool call and its output."""
    from tests.client.fake_responses_provider import serving

    server = ServerProcess(backend_url, log_dir=tmp_path)
    server.start()
    try:
        with serving() as (url, received):
            proc = subprocess.run(
                [sys.executable, "-c", _blocks()["one loop"]],
                cwd=tmp_path,
                env={**os.environ, "CTXWARDEN_TARGET": server.target, "PROVIDER_URL": url},
                capture_output=True,
                text=True,
                timeout=60,
            )
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.strip() == "a.py prints 1."
        assert len(received) == 2
        second = received[1]["input"]
        assert [i.get("type") for i in second[-2:]] == ["function_call", "function_call_output"]
        assert second[-2]["call_id"] == second[-1]["call_id"] == "call_1"
        assert second[-2]["arguments"] == '{"path":"a.py"}'
    finally:
        server.stop()


def _one_loop_section() -> str:
    text = README.read_text()
    start = text.index("## One loop, any provider")
    return text[start : text.index("\n## ", start + 1)]


def test_one_loop_go_and_ts_excerpts_are_verbatim() -> None:
    import textwrap

    root = README.parent
    section = _one_loop_section()
    assert "```go" not in section  # Go's loop is a whole program, linked, not excerpted
    assert (root / "client/go/example/chatloop/main.go").is_file()
    for lang, path in (("ts", "client/ts/examples/agent-loop.ts"),):
        (block,) = re.findall(rf"```{lang}\n(.*?)```", section, flags=re.S)
        source = (root / path).read_text()
        lines = block.splitlines()
        window = len(lines)
        src_lines = source.splitlines()
        found = any(
            textwrap.dedent("\n".join(src_lines[i : i + window])) == block.rstrip("\n")
            for i in range(len(src_lines) - window + 1)
        )
        assert found, f"the README's {lang} loop is not an excerpt of {path}"
