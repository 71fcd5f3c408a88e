"""The README's Python and Go programs run as shown against a real server that requires an
API key: with the key they print the session's model input, without it they fail with the
server's reason. (The TypeScript and Java programs run in their clients' suites:
client/ts/test/auth.test.ts, client/java/.../HelloTest.java.)"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.docs.pages import ROOT, blocks
from tests.support.server import ServerProcess

API_KEY = "ck_readme_programs_0123456789"
GO = shutil.which("go")
OUTPUT = re.compile(r"session \S+: 1 message\(s\), \d+ tokens")


@pytest.fixture(scope="module")
def keyed_target(backend_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    directory = tmp_path_factory.mktemp("keyed")
    keys = directory / "api-keys"
    keys.write_text(f"acme:{hashlib.sha256(API_KEY.encode()).hexdigest()}\n")
    server = ServerProcess(
        backend_url, log_dir=directory, extra_args=["--api-keys-file", str(keys)]
    )
    server.start()
    try:
        yield server.target
    finally:
        server.stop()


def _run(command: list[str], target: str, key: str | None, cwd: Path) -> tuple[int, str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CTXWARDEN_")}
    env["CTXWARDEN_TARGET"] = target
    if key is not None:
        env["CTXWARDEN_API_KEY"] = key
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=120)
    return done.returncode, done.stdout, done.stderr


def test_readme_python_program(keyed_target: str, tmp_path: Path) -> None:
    tag = "# readme example: python\n"
    (code,) = [b.code for b in blocks("python") if b.code.startswith(tag)]
    code_ok, out, err = _run([sys.executable, "-c", code], keyed_target, API_KEY, tmp_path)
    assert code_ok == 0, err
    assert OUTPUT.fullmatch(out.strip()), out
    refused, _, err = _run([sys.executable, "-c", code], keyed_target, None, tmp_path)
    assert refused != 0
    assert "MISSING_CREDENTIALS" in err


def test_usage_ledger_program(keyed_target: str, tmp_path: Path) -> None:
    """docs/guides/cache-and-cost.md's program: the provider's reported usage is in the
    ledger once, and the first input reports its (empty) shared prefix."""
    tag = "# docs example: usage ledger\n"
    (code,) = [b.code for b in blocks("python") if b.code.startswith(tag)]
    status, out, err = _run([sys.executable, "-c", code], keyed_target, API_KEY, tmp_path)
    assert status == 0, err
    lines = out.strip().splitlines()
    assert lines[0] == "shared prefix: 0 tokens", out
    assert lines[1] == "input 20 output 3 cache read 0", out
    assert lines[2:] == ["USAGE_SOURCE_AGENT gpt-4o 3"], out


@pytest.fixture(scope="module")
def hello(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """client/go/example/hello, built once in the client's module."""
    if GO is None:
        pytest.skip("go is not on PATH: the README's Go program needs a Go toolchain")
    binary = tmp_path_factory.mktemp("hello") / "hello"
    env = {**os.environ, "GOWORK": "off", "GOFLAGS": "-mod=readonly"}
    done = subprocess.run(
        [GO, "build", "-o", str(binary), "./example/hello"],
        cwd=ROOT / "client" / "go",
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    return binary


def test_readme_go_program(hello: Path, keyed_target: str, tmp_path: Path) -> None:
    code, out, err = _run([str(hello)], keyed_target, API_KEY, tmp_path)
    assert code == 0, err
    assert OUTPUT.fullmatch(out.strip()), out
    refused, _, err = _run([str(hello)], keyed_target, None, tmp_path)
    assert refused == 1
    assert 'reason "MISSING_CREDENTIALS"' in err


def test_readme_start_commands(tmp_path: Path) -> None:
    """The 60-second start: the key-file line writes what --api-keys-file reads, and both serve
    lines are valid ``ctxwarden serve`` invocations."""
    from ctxwarden.cli.parser import build_parser

    shell = [b.code for b in blocks("sh") if b.page.name == "README.md" and "serve" in b.code]
    start, keyed = shell[:2]
    make_key, serve_keyed = keyed.strip().splitlines()
    subprocess.run(["bash", "-c", make_key], cwd=tmp_path, check=True, timeout=30)
    digest = hashlib.sha256(b"my-secret-key").hexdigest()
    assert (tmp_path / "api-keys").read_text() == f"acme:{digest}\n"
    for line in (start.strip().splitlines()[-1], serve_keyed):
        argv = line.split()
        assert argv[0] == ".venv/bin/ctxwarden"
        args = build_parser().parse_args(argv[1:])
        assert args.command == "serve" and args.listen == "127.0.0.1:50051"
    assert build_parser().parse_args(serve_keyed.split()[1:]).api_keys_file == "api-keys"
