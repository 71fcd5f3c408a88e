"""Every code sample of the README and the docs site is run by a test.

A Python block is named by its first line and run by tests/test_readme.py,
tests/test_readme_adapters.py (and tests/client/test_adapter_gaps.py) or
tests/docs/test_programs.py. A Go, TypeScript or Java block is a program its
client's tests run: included whole from the file (a ``--8<--`` snippet line, see
mkdocs.yml), shown verbatim in the README (tests/test_readme.py), or an excerpt
of a tested file. Shell, TOML, YAML and text blocks are not programs.
"""

from __future__ import annotations

from tests.docs.pages import README, ROOT, Block, blocks
from tests.test_readme import README_PROGRAMS, _blocks

TESTED_FILES = {
    "client/go/example/quickstart/main.go": "tests/client/test_go_module_example.py",
    "client/go/example/hello/main.go": "tests/docs/test_programs.py",
    "client/go/adk/example/main.go": "client/go/adk/example/main_test.go",
    "client/go/langchaingo/example/main.go": "client/go/langchaingo/example/main_test.go",
    "client/ts/examples/quickstart.ts": "client/ts/test/quickstart.test.ts",
    "client/ts/examples/auth.ts": "client/ts/test/auth.test.ts",
    "client/ts/examples/agent-loop.ts": "client/ts/test/agent-loop.test.ts",
    "client/ts/examples/openai-agents.ts": "client/ts/test/adapter-examples.test.ts",
    "client/ts/examples/ai-sdk.ts": "client/ts/test/adapter-examples.test.ts",
    "client/ts/examples/message-stream.ts": "client/ts/test/message-stream-example.test.ts",
    "client/ts/compat/agents-core-0.20/example.ts": (
        "client/ts/compat/agents-core-0.20/example.test.ts"
    ),
    "client/java/ctxwarden-client/src/test/java/dev/ctxwarden/examples/Quickstart.java": (
        "client/java/ctxwarden-client/src/test/java/dev/ctxwarden/examples/ReadmeTest.java"
    ),
    "client/java/ctxwarden-client/src/test/java/dev/ctxwarden/examples/Hello.java": (
        "client/java/ctxwarden-client/src/test/java/dev/ctxwarden/examples/HelloTest.java"
    ),
}
"""Program files the docs show, and the test that runs each."""

OTHER_PYTHON = {
    "# adapter example: openai-agents": "tests/test_readme_adapters.py",
    "# adapter example: langchain": "tests/test_readme_adapters.py",
    "# adapter example: adk": "tests/test_readme_adapters.py",
    "# adapter example: adk-context": "tests/test_readme_adapters.py",
    "# adapter example: langgraph": "tests/client/test_adapter_gaps.py",
    "# readme example: python": "tests/docs/test_programs.py",
    "# docs example: usage ledger": "tests/docs/test_programs.py",
}
"""First lines of the Python blocks that tests/test_readme.py does not name, and their tests."""


def _flat(code: str) -> str:
    return "\n".join(line.strip() for line in code.splitlines())


def _tested_excerpt(block: Block) -> bool:
    """A block copied, indentation aside, from a tested file of its language."""
    suffix = {"go": ".go", "ts": ".ts", "java": ".java"}[block.lang]
    sources = [ROOT / path for path in TESTED_FILES if path.endswith(suffix)]
    return any(_flat(block.code) in _flat(path.read_text()) for path in sources)


def test_every_tested_file_exists_and_its_test_names_it() -> None:
    for path, test in TESTED_FILES.items():
        assert (ROOT / path).is_file(), path
        test_source = (ROOT / test).read_text()
        stem = path.rsplit("/", 1)[1].rsplit(".", 1)[0]
        named = stem in test_source or path.rsplit("/", 2)[1] in test_source
        assert named or test.endswith("main_test.go"), f"{test} does not run {path}"


def test_every_python_block_is_run() -> None:
    named = set(_blocks().values())
    readme_tests = (ROOT / "tests" / "test_readme.py").read_text()
    for name in _blocks():
        assert f'_blocks()["{name}"]' in readme_tests or f'blocks["{name}"]' in readme_tests
    for block in blocks("python"):
        first = block.code.splitlines()[0].split(" (")[0]
        if block.code in named:
            continue
        assert first in OTHER_PYTHON, f"{block.page}: no test runs the block {first!r}"
        assert first.removeprefix("# ").split(": ")[-1] in (ROOT / OTHER_PYTHON[first]).read_text()


def test_every_go_ts_and_java_block_is_a_tested_program() -> None:
    seen = 0
    for lang in ("go", "ts", "java"):
        for block in blocks(lang):
            seen += 1
            where = f"{block.page.relative_to(ROOT)}: a {lang} block"
            if block.included is not None:
                assert block.included in TESTED_FILES, f"{where} includes an untested file"
                continue
            if block.page == README:  # its programs: tests/test_readme.py
                assert README_PROGRAMS[lang] in TESTED_FILES
                continue
            assert _tested_excerpt(block), f"{where} is neither included nor a tested excerpt"
    assert seen >= 10


def test_go_quickstart_run_from_the_go_readme_is_the_file() -> None:
    """tests/client/test_go_module_example.py runs client/go/README.md's program: the docs
    include main.go, so the two must be the same text."""
    readme = (ROOT / "client" / "go" / "README.md").read_text()
    marker = "<!-- program: example/quickstart/main.go -->\n```go\n"
    shown = readme.split(marker, 1)[1].split("```", 1)[0]
    assert shown == (ROOT / "client/go/example/quickstart/main.go").read_text()


def test_snippet_lines_name_existing_files() -> None:
    included = [b.included for b in blocks() if b.included is not None]
    assert len(included) >= 7
    for path in included:
        assert (ROOT / path).is_file(), path
