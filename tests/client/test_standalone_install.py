"""The Python client installs alone and works without the server's code.

A fresh virtualenv gets ``pip install <client/python>`` (from PyPI: grpcio,
protobuf, googleapis-common-protos) and nothing else. The tests then check that
the server package and its heavy dependencies are absent, run a short
walkthrough against a real server, and report the installed size.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.client.conftest import REPORT_PROPERTY
from tests.support.server import ServerProcess, migrate_database

pytestmark = pytest.mark.install

CLIENT_DIR = Path(__file__).resolve().parents[2] / "client" / "python"
# Importable in the test environment (the server needs them), never in the client's.
SERVER_ONLY = ("ctxwarden", "sqlalchemy", "tokenizers", "huggingface_hub")
# The virtualenv's own tools, not part of what the client installs.
VENV_TOOLS = {"pip", "setuptools", "wheel"}

WALKTHROUGH = """
import asyncio, json, os
import ctxwarden_client as cw
from ctxwarden_client import AsyncClient, Client, NotFoundError
from ctxwarden_client import assistant, tool_call, tool_definition, tool_result, user

pb = cw.context_service_pb2
target = os.environ["CTXWARDEN_TARGET"]
out = {"module": cw.__file__}
with Client(target) as client:
    session = client.create_session(
        system_prompt="You are a careful coding agent.",
        tools=[tool_definition("read", "Reads a file", {"type": "object"})],
        model="gpt-4o",
    )
    sid = session.session_id
    appended = client.append_messages(
        sid,
        [
            user("What is in a.txt?"),
            assistant(tool_calls=[tool_call("call_1", "read", {"path": "a.txt"})]),
            tool_result("call_1", "hello", tool_name="read"),
        ],
        expected_last_seq=0,
    )
    out["last_seq"] = appended.last_seq
    model_input = client.build_model_input(sid, max_output_tokens=1024)
    out["roles"] = [m.role for m in model_input.messages]
    out["total_tokens"] = model_input.tokens.total_tokens
    chat = client.build_model_input(sid, format=pb.MODEL_INPUT_FORMAT_OPENAI_CHAT)
    out["chat_roles"] = [m["role"] for m in json.loads(chat.rendered_json)["messages"]]
    out["listed"] = [m.seq for m in client.list_messages(sid)]
    try:
        client.get_session("no-such-session")
    except NotFoundError as exc:
        out["not_found_reason"] = exc.reason

async def main():
    async with AsyncClient(target) as client:
        async with client.stream_messages() as stream:
            response = await stream.send(sid, [assistant("It says hello.")])
        out["streamed_last_seq"] = response.last_seq
        model_input = await client.build_model_input(sid)
        out["async_messages"] = len(model_input.messages)

asyncio.run(main())
print(json.dumps(out))
"""

MISSING = """
import importlib.util, json, sys
print(json.dumps({name: importlib.util.find_spec(name) is not None for name in sys.argv[1:]}))
"""

SIZES = """
import importlib.metadata, json, os
rows = []
for dist in importlib.metadata.distributions():
    files = [dist.locate_file(f) for f in dist.files or ()]
    size = sum(os.path.getsize(p) for p in files if os.path.isfile(p))
    rows.append([dist.metadata["Name"], dist.version, size])
print(json.dumps(rows))
"""

Run = Callable[..., str]


@pytest.fixture(scope="module")
def client_venv(tmp_path_factory: pytest.TempPathFactory) -> Run:
    """A fresh virtualenv holding the client installed from a copy of client/python.

    The copy proves the directory is self-contained (nothing reaches outside
    it) and keeps build artefacts out of the checkout.
    """
    base = tmp_path_factory.mktemp("client-alone")
    source = base / "ctxwarden-client"
    shutil.copytree(
        CLIENT_DIR,
        source,
        ignore=shutil.ignore_patterns("build", "dist", "*.egg-info", "__pycache__"),
    )
    venv = base / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    env = {k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "VIRTUAL_ENV"}}
    install = subprocess.run(
        [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", str(source)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert install.returncode == 0, install.stdout + install.stderr

    def run(code: str, *args: str, extra_env: dict[str, str] | None = None) -> str:
        # cwd outside the checkout, so nothing of the repository is importable.
        proc = subprocess.run(
            [str(python), "-c", code, *args],
            cwd=base,
            env={**env, **(extra_env or {})},
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert proc.returncode == 0, proc.stderr
        return proc.stdout

    return run


def test_client_alone_has_no_server_code(client_venv: Run) -> None:
    importable = json.loads(client_venv(MISSING, "ctxwarden_client", *SERVER_ONLY))
    assert importable == {"ctxwarden_client": True, **dict.fromkeys(SERVER_ONLY, False)}


def test_client_alone_walkthrough(client_venv: Run, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'ctxwarden.db'}"
    migrate_database(url)
    server = ServerProcess(url, log_dir=tmp_path)
    server.start()
    try:
        out = json.loads(client_venv(WALKTHROUGH, extra_env={"CTXWARDEN_TARGET": server.target}))
    finally:
        server.stop()
    # The client that ran is the installed copy, not the checkout.
    assert "site-packages" in out["module"] and str(CLIENT_DIR) not in out["module"]
    assert out["last_seq"] == 3
    assert out["roles"] == [1, 2, 3]  # ROLE_USER, ROLE_ASSISTANT, ROLE_TOOL
    assert out["total_tokens"] > 0
    assert out["chat_roles"] == ["system", "user", "assistant", "tool"]
    assert out["listed"] == [1, 2, 3]
    assert out["not_found_reason"] == "SESSION_NOT_FOUND"
    assert out["streamed_last_seq"] == 4
    assert out["async_messages"] == 4


def test_client_alone_install_size(
    client_venv: Run, record_property: Callable[[str, object], None]
) -> None:
    rows = [row for row in json.loads(client_venv(SIZES)) if row[0].lower() not in VENV_TOOLS]
    names = {row[0].lower().replace("_", "-") for row in rows}
    assert {"ctxwarden-client", "grpcio", "protobuf", "googleapis-common-protos"} <= names
    total_mb = sum(row[2] for row in rows) / 1e6
    detail = ", ".join(f"{n} {v} {s / 1e6:.1f} MB" for n, v, s in sorted(rows))
    summary = f"ctxwarden-client alone: {len(rows)} packages, {total_mb:.1f} MB ({detail})"
    print(summary)
    record_property(REPORT_PROPERTY, summary)
    # Generous bounds: a heavy dependency sneaking in fails here.
    assert len(rows) <= 8, summary
    assert total_mb < 80, summary
