"""The frameworks' own test files, run unmodified against a real ``ctxwarden serve``.

Nothing of the frameworks is committed: :func:`source_tree` downloads the pinned
source distribution from the package index (``pip download --no-binary :all:``)
into a cache directory (``CTXWARDEN_FRAMEWORK_CACHE``, default
``~/.cache/ctxwarden-frameworks``) and unpacks it there once. :func:`run_suite`
then runs the named files with the framework's own pytest configuration (its
source tree is the working directory, so its ``tests`` package and conftest
files are the ones imported) plus one plugin of ``tests/frameworks/plugins``
that swaps the reference backend for the ctxwarden adapter, and reports
passed / skipped / failed per file from the JUnit XML.

``python -m tests.frameworks.frameworks [--target HOST:PORT] [NAME...]`` runs the
suites against a server (by default a fresh one on SQLite) and prints the table.
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import xml.etree.ElementTree as ET
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
CLIENT = ROOT / "client" / "python"
CACHE_ENV = "CTXWARDEN_FRAMEWORK_CACHE"
USAGE_ENV = "CTXWARDEN_FRAMEWORK_USAGE"
"""Where a plugin writes the node IDs of the tests that built the swapped class."""


@dataclass(frozen=True)
class Suite:
    name: str
    """The key of its table in skips.toml."""
    distribution: str
    version: str
    files: tuple[str, ...]
    plugin: str
    """A module of tests/frameworks/plugins."""
    source_env: str = ""
    """When set: the source tree comes from this environment variable (a checkout at the
    pinned version's tag), for a framework whose source distribution has no tests."""
    pytest_args: tuple[str, ...] = field(default=())
    venv: tuple[str, ...] = ()
    one_backend: bool = False
    """Run on one backend only: MariaDB when the run has one, else SQLite. For a long suite
    whose calls reach the database through the same server code on every backend (the
    store's own suites cover the backends); the others run on each."""
    """When set: the suite runs in a virtualenv of its own with these requirements
    (plus the client), made once in the cache, for a framework whose pins conflict
    with the test extra's."""


SUITES = (
    Suite(
        "openai-agents",
        "openai-agents",
        "0.24.0",
        # Every test file that builds a SQLiteSession (the swapped class). The Runner's
        # files also hold tests that use no session: the usage count says how many did.
        (
            "tests/memory/test_session.py",
            "tests/memory/test_session_limit.py",
            "tests/memory/test_openai_responses_compaction_session.py",
            "tests/memory/test_compaction_model_visibility.py",
            "tests/memory/test_compaction_suffix.py",
            "tests/extensions/memory/test_encrypt_session.py",
            "tests/test_agent_runner.py",
            "tests/test_agent_runner_streamed.py",
            "tests/test_max_turns.py",
            "tests/test_native_tool_failure_history.py",
            "tests/test_programmatic_tool_calling.py",
            "tests/test_run_impl_resume_paths.py",
            "tests/test_soft_cancel.py",
            "tests/test_tool_batch_failure_history.py",
            "tests/test_tool_failure_boundaries.py",
            "tests/sandbox/test_memory.py",
        ),
        "ctxwarden_openai_agents",
        one_backend=True,  # ~95 s per backend, the longest suite
    ),
    # LangGraph's store conformance tests ship in langgraph-checkpoint's source
    # distribution (BaseStore lives there); they run in a virtualenv of their own so
    # that the tested versions are installed exactly (the test extra gets langgraph only
    # through langchain, unpinned). The README's LangGraph example runs there too.
    Suite(
        "langgraph-checkpoint",
        "langgraph-checkpoint",
        "4.3.2",
        ("tests/test_store.py",),
        "ctxwarden_langgraph",
        venv=(
            "langgraph-checkpoint==4.3.2",
            "langgraph==1.2.24",
            "langchain-core==1.8.1",
            "langchain==1.5.0",
            "pytest==9.2.0",
            "pytest-asyncio==1.5.0",
            "pytest-mock==3.17.0",
        ),
    ),
    Suite(
        "langchain-core",
        "langchain-core",
        "1.8.1",
        (
            "tests/unit_tests/chat_history/test_chat_history.py",
            "tests/unit_tests/runnables/test_history.py",
        ),
        "ctxwarden_langchain",
    ),
    # google-adk's source distribution has no tests: CTXWARDEN_ADK_SOURCE names a tree
    # holding tests/unittests/sessions/test_session_service.py of google/adk-python at
    # the pinned version. google-adk 2.13.0 needs google-genai<3 and
    # opentelemetry-sdk<=1.44, against the test extra's pins: it gets a virtualenv.
    Suite(
        "adk",
        "google-adk",
        "2.13.0",
        ("tests/unittests/sessions/test_session_service.py",),
        "ctxwarden_adk",
        source_env="CTXWARDEN_ADK_SOURCE",
        pytest_args=(
            "-o",
            "asyncio_mode=auto",
            "-o",
            "asyncio_default_fixture_loop_scope=function",
        ),
        venv=(
            "google-adk==2.13.0",
            "sqlalchemy[asyncio]>=2.0.30,<2.2",
            "aiosqlite>=0.20",
            "pytest==9.2.0",
            "pytest-asyncio==1.5.0",
        ),
    ),
)


def cache_dir() -> Path:
    return Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "ctxwarden-frameworks")


def source_tree(suite: Suite) -> Path:
    """The unpacked source distribution of the suite's pinned version (downloaded once)."""
    if suite.source_env:
        return Path(os.environ[suite.source_env])
    dest = cache_dir() / f"{suite.distribution}-{suite.version}"
    if (dest / ".complete").exists():
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=dest.parent) as tmp:
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--quiet",
                "--no-deps",
                "--no-binary",
                ":all:",
                "--dest",
                tmp,
                f"{suite.distribution}=={suite.version}",
            ],
            check=True,
            capture_output=True,
            text=True,
        )
        (archive,) = Path(tmp).glob("*.tar.gz")
        unpacked = Path(tmp) / "src"
        with tarfile.open(archive) as tar:
            tar.extractall(unpacked, filter="data")
        (top,) = unpacked.iterdir()
        (top / ".complete").touch()
        shutil.rmtree(dest, ignore_errors=True)
        top.rename(dest)
    return dest


def python_for(suite: Suite) -> str:
    """The interpreter of the suite: this one, or its own virtualenv's (made once; a lock
    file keeps two test workers from making or installing into it at the same time)."""
    if not suite.venv:
        return sys.executable
    # Named after its requirements too: a changed list makes a new one.
    digest = hashlib.sha256("\n".join(suite.venv).encode()).hexdigest()[:8]
    venv = cache_dir() / f"venv-{suite.name}-{suite.version}-{digest}"
    python = venv / "bin" / "python"
    venv.parent.mkdir(parents=True, exist_ok=True)
    with open(venv.parent / f"{venv.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (venv / ".complete").exists():
            shutil.rmtree(venv, ignore_errors=True)
            subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
            subprocess.run(
                [str(python), "-m", "pip", "install", "--quiet", *suite.venv],
                check=True,
                capture_output=True,
                text=True,
            )
            (venv / ".complete").touch()
        # The client as it is in this checkout (not cached: it changes with the code).
        subprocess.run(
            [str(python), "-m", "pip", "install", "--quiet", "-e", str(CLIENT)],
            check=True,
            capture_output=True,
            text=True,
        )
    return str(python)


@dataclass
class FileCounts:
    passed: int = 0
    skipped: int = 0
    failed: int = 0
    adapter: int = 0
    """Of the tests that ran, those that built the swapped class (see plugins/_usage.py)."""

    def __str__(self) -> str:
        return (
            f"{self.passed} passed, {self.skipped} skipped, {self.failed} failed"
            f" ({self.adapter} used the adapter)"
        )


@dataclass
class SuiteResult:
    files: dict[str, FileCounts]
    failures: list[str]
    output: str

    @property
    def total(self) -> FileCounts:
        c = Counter[str]()
        for counts in self.files.values():
            c.update(
                passed=counts.passed,
                skipped=counts.skipped,
                failed=counts.failed,
                adapter=counts.adapter,
            )
        return FileCounts(c["passed"], c["skipped"], c["failed"], c["adapter"])


def _file_of(case: ET.Element, suite: Suite) -> str:
    """The test file of a JUnit testcase (its classname is the dotted module[.Class])."""
    dotted = case.get("classname", "")
    for path in suite.files:
        module = path.removesuffix(".py").replace("/", ".")
        if dotted == module or dotted.startswith(module + "."):
            return path
    return dotted


def parse_junit(path: Path, suite: Suite, used: frozenset[str] = frozenset()) -> SuiteResult:
    """Counts per file; ``used``: the node IDs of the tests that built the swapped class."""
    names = {node.split("::", 1)[0] + "::" + node.split("::")[-1] for node in used}
    files = {f: FileCounts() for f in suite.files}
    failures: list[str] = []
    for case in ET.parse(path).iter("testcase"):
        path_of = _file_of(case, suite)
        counts = files.setdefault(path_of, FileCounts())
        if case.find("skipped") is not None:
            counts.skipped += 1
            continue
        if case.find("failure") is not None or case.find("error") is not None:
            counts.failed += 1
            failures.append(f"{case.get('classname')}::{case.get('name')}")
        else:
            counts.passed += 1
        if f"{path_of}::{case.get('name')}" in names:
            counts.adapter += 1
    return SuiteResult(files, failures, "")


def run_suite(suite: Suite, target: str, workdir: Path, timeout: float = 900) -> SuiteResult:
    """Runs the suite's files against the server at ``target``."""
    tree = source_tree(suite)
    junit = workdir / f"{suite.name}.xml"
    usage = workdir / f"{suite.name}.usage.json"
    python = python_for(suite)
    installed = subprocess.run(
        [python, "-c", f"import importlib.metadata as m; print(m.version({suite.distribution!r}))"],
        capture_output=True,
        text=True,
    ).stdout.strip()
    if installed != suite.version:
        raise RuntimeError(
            f"{suite.name}: its tests are those of {suite.distribution} {suite.version}, "
            f"but {python} has {installed or 'none'} installed"
        )
    env = {
        **os.environ,
        "CTXWARDEN_TARGET": target,
        "PYTHONPATH": os.pathsep.join([str(HERE), str(CLIENT)]),
        USAGE_ENV: str(usage),
    }
    proc = subprocess.run(
        [
            python,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-p",
            f"plugins.{suite.plugin}",
            f"--junitxml={junit}",
            "-o",
            "junit_family=xunit2",
            *suite.pytest_args,
            *suite.files,
        ],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if not junit.exists():
        raise RuntimeError(f"{suite.name}: pytest wrote no report\n{proc.stdout}\n{proc.stderr}")
    used = frozenset(json.loads(usage.read_text())) if usage.exists() else frozenset()
    result = parse_junit(junit, suite, used)
    result.output = proc.stdout[-20000:] + proc.stderr[-5000:]
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--target", help="a running server (default: start one on SQLite)")
    parser.add_argument("names", nargs="*", help="suites to run (default: all)")
    args = parser.parse_args()
    suites = [s for s in SUITES if not args.names or s.name in args.names]
    with tempfile.TemporaryDirectory() as tmp:
        server = None
        target = args.target
        if target is None:
            from tests.support.server import ServerProcess, migrate_database

            url = f"sqlite:///{tmp}/ctxwarden.db"
            migrate_database(url)
            server = ServerProcess(url, log_dir=Path(tmp))
            server.start()
            target = server.target
        try:
            for suite in suites:
                if suite.source_env and not os.environ.get(suite.source_env):
                    print(f"{suite.name}: skipped, {suite.source_env} is not set")
                    continue
                result = run_suite(suite, target, Path(tmp))
                for path, counts in result.files.items():
                    print(f"{suite.name} {suite.version} {path}: {counts}")
                for failure in result.failures:
                    print(f"  FAILED {failure}")
        finally:
            if server is not None:
                server.stop()


if __name__ == "__main__":
    main()
