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
    """When set: the suite runs in a virtualenv of its own with these requirements
    (plus the client), made once in the cache, for a framework whose pins conflict
    with the test extra's."""


SUITES = (
    Suite(
        "openai-agents",
        "openai-agents",
        "0.24.0",
        (
            "tests/memory/test_session.py",
            "tests/memory/test_session_limit.py",
            "tests/memory/test_openai_responses_compaction_session.py",
            "tests/extensions/memory/test_encrypt_session.py",
        ),
        "ctxwarden_openai_agents",
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
    venv = cache_dir() / f"venv-{suite.name}-{suite.version}"
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

    def __str__(self) -> str:
        return f"{self.passed} passed, {self.skipped} skipped, {self.failed} failed"


@dataclass
class SuiteResult:
    files: dict[str, FileCounts]
    failures: list[str]
    output: str

    @property
    def total(self) -> FileCounts:
        c = Counter[str]()
        for counts in self.files.values():
            c.update(passed=counts.passed, skipped=counts.skipped, failed=counts.failed)
        return FileCounts(c["passed"], c["skipped"], c["failed"])


def _file_of(case: ET.Element, suite: Suite) -> str:
    """The test file of a JUnit testcase (its classname is the dotted module[.Class])."""
    dotted = case.get("classname", "")
    for path in suite.files:
        module = path.removesuffix(".py").replace("/", ".")
        if dotted == module or dotted.startswith(module + "."):
            return path
    return dotted


def parse_junit(path: Path, suite: Suite) -> SuiteResult:
    files = {f: FileCounts() for f in suite.files}
    failures: list[str] = []
    for case in ET.parse(path).iter("testcase"):
        counts = files.setdefault(_file_of(case, suite), FileCounts())
        if case.find("skipped") is not None:
            counts.skipped += 1
        elif case.find("failure") is not None or case.find("error") is not None:
            counts.failed += 1
            failures.append(f"{case.get('classname')}::{case.get('name')}")
        else:
            counts.passed += 1
    return SuiteResult(files, failures, "")


def run_suite(suite: Suite, target: str, workdir: Path, timeout: float = 900) -> SuiteResult:
    """Runs the suite's files against the server at ``target``."""
    tree = source_tree(suite)
    junit = workdir / f"{suite.name}.xml"
    env = {
        **os.environ,
        "CTXWARDEN_TARGET": target,
        "PYTHONPATH": os.pathsep.join([str(HERE), str(CLIENT)]),
    }
    proc = subprocess.run(
        [
            python_for(suite),
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
    result = parse_junit(junit, suite)
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
