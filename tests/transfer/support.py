"""Helpers of the export/import tests: a session with every kind of stored state,
the model inputs that must survive a round trip, and the CLI."""

from __future__ import annotations

import hashlib
import os
import secrets
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from ctxwarden_client import (
    Client,
    assistant,
    history_only,
    state_delta,
    tool_call,
    tool_definition,
    tool_result,
    usage,
    user,
)
from ctxwarden_client.v1 import context_service_pb2 as pb
from ctxwarden_client.v1 import message_pb2, session_pb2
from tests.support.server import (
    CLI,
    ServerProcess,
    drop_mysql_database,
    make_mysql_database,
    migrate_database,
)

FORMATS = (
    pb.MODEL_INPUT_FORMAT_NATIVE,
    pb.MODEL_INPUT_FORMAT_OPENAI_CHAT,
    pb.MODEL_INPUT_FORMAT_OPENAI_RESPONSES,
    pb.MODEL_INPUT_FORMAT_ANTHROPIC_MESSAGES,
    pb.MODEL_INPUT_FORMAT_GEMINI,
)
PNG = bytes.fromhex("89504e470d0a1a0a0000000d49484452000000010000000108060000001f15c489")


def cli(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=600, check=False)
    if check:
        assert proc.returncode == 0, f"{args[0]} failed ({proc.returncode}):\n{proc.stderr}"
    return proc


@contextmanager
def fresh_database(backend_url: str, tmp_path: Path) -> Iterator[str]:
    """A new, migrated database of the same backend as ``backend_url``."""
    if backend_url.startswith("sqlite"):
        url = f"sqlite:///{tmp_path / f'target-{secrets.token_hex(3)}.db'}"
        migrate_database(url)
        yield url
        return
    base = os.environ["CTXWARDEN_TEST_MYSQL_URL"]
    name = f"ctxw_{os.getpid()}_{secrets.token_hex(3)}"
    url = make_mysql_database(base, name)
    try:
        migrate_database(url)
        yield url
    finally:
        drop_mysql_database(base, name)


def api_keys(path: Path, tenants: dict[str, str]) -> Path:
    """An --api-keys-file for {tenant: key}."""
    lines = [f"{t}:{hashlib.sha256(k.encode()).hexdigest()}" for t, k in tenants.items()]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def bearer(key: str) -> list[tuple[str, str]]:
    return [("authorization", f"Bearer {key}")]


def _compact(c: Client, sid: str, summary: str, keep: int) -> pb.Compaction:
    plan = c.prepare_compaction(sid, keep_recent_tokens=keep)
    prefix = "The turn so far." if plan.split_turn else ""
    return c.commit_compaction(sid, plan.plan_id, summary, turn_prefix_summary=prefix)


def build_rich_session(c: Client, sid: str, turns: int = 12) -> None:
    """A session with tools, images, thinking, provider items, metadata, usage
    (calibration), history-only messages, session state, settings revisions,
    rollbacks (a failed turn and a rewind across a checkpoint) and compactions."""
    c.create_session(
        session_id=sid,
        system_prompt="You are a careful coding agent.",
        tools=[tool_definition("read", "Read a file", {"type": "object"})],
        model="gpt-4o",
        labels={"team": "ctx"},
        state={"step": 0},
    )
    for i in range(turns):
        c.append_messages(
            sid,
            [
                user(f"question {i} " * 40, images=[("image/png", PNG)] if i == 2 else ()),
                assistant(
                    f"let me read {i}",
                    thinking=f"thinking {i}",
                    thinking_signature=f"sig{i}",
                    tool_calls=[tool_call(f"call-{i}", "read", {"path": f"f{i}.py", "n": i})],
                    usage=usage(900 + 120 * i, 40),
                    model="gpt-4o",
                    provider="openai",
                ),
                tool_result(
                    f"call-{i}", "line\n" * (30 + i), tool_name="read", metadata={"origin": "fs"}
                ),
            ],
            state_delta=state_delta({"step": i}),
        )
        if i == 3:
            c.append_messages(sid, [history_only(metadata={"ui": "note"})])
        if i == 4:
            c.append_messages(sid, [assistant(error_message="429 Too Many Requests")])
            c.rollback_turn(sid)
        if i == 5:
            updated = session_pb2.Session(session_id=sid, system_prompt="You are terse.")
            c.update_session(updated, ["system_prompt"])
        if i == 6:
            _compact(c, sid, "Summary of the first turns.", keep=600)
        if i == 8:
            superseded = _compact(c, sid, "A summary that a rewind supersedes.", keep=400)
            c.append_messages(sid, [user("to be rewound")])
            c.rollback_turn(sid, to_seq=superseded.first_kept_seq - 2)
    _compact(c, sid, "Summary at the end.", keep=500)
    provider_block = message_pb2.ContentBlock(
        provider=message_pb2.ProviderContent(
            family="anthropic", json='{"type":"server_tool_use","id":"s1","name":"web_search"}'
        )
    )
    reply = assistant("done", usage=usage(5000, 10))
    reply.content.insert(0, provider_block)
    c.append_messages(sid, [user("finish"), reply])


def model_inputs(c: Client, sid: str) -> dict[str, bytes]:
    """Every model input of the session: each format now, and the native replay
    just before each message was appended (as_of_seq 1 .. last_seq + 1)."""
    out: dict[str, bytes] = {}
    for fmt in FORMATS:
        mi = c.build_model_input(sid, format=fmt, view=pb.MODEL_INPUT_VIEW_FULL)
        out[f"format {pb.ModelInputFormat.Name(fmt)}"] = mi.SerializeToString(deterministic=True)
    last = c.get_session(sid).last_seq
    for seq in range(1, last + 2):
        mi = c.build_model_input(sid, as_of_seq=seq)
        out[f"as_of_seq {seq}"] = mi.SerializeToString(deterministic=True)
    return out


def history(c: Client, sid: str) -> tuple[list[bytes], list[bytes]]:
    """Every stored message (rolled back too) and every checkpoint, as bytes."""
    messages = [
        m.SerializeToString(deterministic=True)
        for m in c.list_messages(sid, include_rolled_back=True)
    ]
    compactions = [x.SerializeToString(deterministic=True) for x in c.list_compactions(sid)]
    return messages, compactions


def started(url: str, log_dir: Path, extra: list[str] | None = None) -> ServerProcess:
    proc = ServerProcess(url, log_dir=log_dir, extra_args=extra)
    proc.start()
    return proc
