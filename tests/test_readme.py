"""The Python samples of the README and the docs site run as written (the walkthrough with a
server restart in between), and their Go, TypeScript and Java programs are the tested files."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from tests.docs.pages import README, blocks, page_text
from tests.support.server import ServerProcess


def _blocks() -> dict[str, str]:
    """The named Python samples of the README and the docs pages, by name."""
    named = {}
    for block in (b.code for b in blocks("python")):
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
        elif first.startswith("# loss report example"):
            named["loss report"] = block
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


def test_readme_is_short() -> None:
    """The README is the first read (issue: at most 300 lines); the manual is docs/."""
    lines = README.read_text().splitlines()
    assert len(lines) <= 300, len(lines)


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


def test_loss_report_example_runs(server_target: str, tmp_path: Path) -> None:
    out = _run(_blocks()["loss report"], server_target, tmp_path).splitlines()
    assert out == ["ANCHORS_LOST 2", "1 2 2"]


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


README_PROGRAMS = {
    "go": "client/go/example/hello/main.go",
    "ts": "client/ts/examples/auth.ts",
    "java": "client/java/ctxwarden-client/src/test/java/dev/ctxwarden/examples/Hello.java",
}
"""The README's program per language: the file its client's tests run, shown verbatim."""


def _readme_program(path: str) -> str:
    source = (README.parent / path).read_text()
    if path.endswith("auth.ts"):  # the region the client's README shows, importing the package
        region = re.search(r"// #region readme-auth\n(.*?)// #endregion readme-auth", source, re.S)
        assert region, f"no region readme-auth in {path}"
        return region.group(1).replace('from "../src/index.js"', 'from "@ctxwarden/client"')
    return source


def test_readme_programs_are_the_tested_files() -> None:
    text = README.read_text()
    for lang, path in README_PROGRAMS.items():
        found = re.findall(rf"^```{lang}\n(.*?)^```", text, flags=re.S | re.M)
        assert found == [_readme_program(path)], f"the README's {lang} program is not {path}"
        assert path in text, f"the README does not name {path}"


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
    return page_text("guides/provider-loops.md")


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
        assert found, f"the provider-loops page's {lang} loop is not an excerpt of {path}"
