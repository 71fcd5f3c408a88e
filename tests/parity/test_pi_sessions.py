"""pi session files in and out: ``ctxwarden import --from pi`` and ``export --to pi``.

The files are written by pi's own ``SessionManager`` (``pi_sessions.mjs``, the
version of ``@mariozechner/pi-coding-agent`` pinned in package.json): tool calls,
thinking, images, a failed model call, model/thinking/label/info entries, two
compactions, branches with branch summaries, a tree of branches (test_pi_forks.py
checks its lineage), custom messages, bash executions.

* Imported, the session's effective context (``BuildModelInput``) is what pi's
  ``buildSessionContext`` gives for the file, as pi sends it to the model
  (``convertToLlm``, failed assistant messages left out as pi-ai does), and so is
  each fork's for the leaf of its branch.
* Exported again, pi's ``SessionManager`` opens the file and builds exactly the
  same context, message for message (timestamps, usage, summaries included).
* A session made through the API, exported for pi, gives pi the context
  ctxwarden gives the model.
"""

from __future__ import annotations

import base64
import json
import secrets
import subprocess
from pathlib import Path
from typing import Any

from ctxwarden_client import Client, assistant, history_only, tool_call, tool_result, user
from ctxwarden_client.v1 import context_service_pb2 as pb
from ctxwarden_client.v1 import message_pb2
from tests.parity.test_pi_cut_parity import PARITY_DIR
from tests.parity.test_pi_cut_parity import node as node
from tests.support.server import ServerProcess
from tests.transfer.support import cli

SCRIPT = "pi_sessions.mjs"
ROLES = {
    message_pb2.ROLE_USER: "user",
    message_pb2.ROLE_ASSISTANT: "assistant",
    message_pb2.ROLE_TOOL_RESULT: "toolResult",
}


def run_pi(node: str, *args: str) -> list[dict[str, Any]]:
    proc = subprocess.run(
        [node, SCRIPT, *args],
        cwd=PARITY_DIR,
        capture_output=True,
        text=True,
        encoding="utf-8",
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, f"{SCRIPT} failed:\n{proc.stderr[-4000:]}"
    result: list[dict[str, Any]] = json.loads(proc.stdout)
    return result


def _pi_content(content: Any) -> list[dict[str, Any]]:
    """pi content as the model gets it (a string is one text block)."""
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    out = []
    for b in content:
        if b["type"] == "text":
            out.append({"type": "text", "text": b["text"]})
        elif b["type"] == "thinking":
            out.append(
                {
                    "type": "thinking",
                    "thinking": b["thinking"],
                    "signature": b.get("thinkingSignature", ""),
                }
            )
        elif b["type"] == "toolCall":
            out.append(
                {"type": "toolCall", "id": b["id"], "name": b["name"], "arguments": b["arguments"]}
            )
        else:
            out.append({"type": "image", "data": b["data"], "mimeType": b["mimeType"]})
    return out


def pi_llm(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The parts of pi's LLM messages a model sees."""
    out = []
    for m in messages:
        item: dict[str, Any] = {"role": m["role"], "content": _pi_content(m["content"])}
        if m["role"] == "toolResult":
            item.update(toolCallId=m["toolCallId"], toolName=m["toolName"], isError=m["isError"])
        out.append(item)
    return out


def ctxwarden_llm(mi: pb.ModelInput) -> list[dict[str, Any]]:
    """ctxwarden's model input in the same shape (the summary is its first message)."""
    out = []
    for m in mi.messages:
        content: list[dict[str, Any]] = []
        for b in m.content:
            kind = b.WhichOneof("block")
            if kind == "text":
                content.append({"type": "text", "text": b.text.text})
            elif kind == "thinking":
                content.append(
                    {
                        "type": "thinking",
                        "thinking": b.thinking.thinking,
                        "signature": b.thinking.signature,
                    }
                )
            elif kind == "tool_call":
                content.append(
                    {
                        "type": "toolCall",
                        "id": b.tool_call.id,
                        "name": b.tool_call.name,
                        "arguments": json.loads(b.tool_call.arguments_json or "{}"),
                    }
                )
            elif kind == "image":
                content.append(
                    {
                        "type": "image",
                        "data": base64.b64encode(b.image.data).decode(),
                        "mimeType": b.image.mime_type,
                    }
                )
        item: dict[str, Any] = {"role": ROLES[m.role], "content": content}
        if m.role == message_pb2.ROLE_TOOL_RESULT:
            item.update(toolCallId=m.tool_call_id, toolName=m.tool_name, isError=m.is_error)
        out.append(item)
    return out


def _model_input(target: str, sid: str) -> pb.ModelInput:
    with Client(target) as c:
        return c.build_model_input(sid, view=pb.MODEL_INPUT_VIEW_FULL)


def test_pi_files_import_and_export(
    node: str, server: ServerProcess, backend_url: str, tmp_path: Path
) -> None:
    written = run_pi(node, "write", str(tmp_path))
    assert [s["name"] for s in written] == ["tools", "compaction", "branches", "tree", "extras"]
    exported = []
    for scenario in written:
        name, sid = scenario["name"], f"pi-{scenario['name']}-{secrets.token_hex(3)}"
        out = cli(
            "import",
            "--from",
            "pi",
            scenario["file"],
            "--database-url",
            backend_url,
            "--session-id",
            sid,
        )
        forks = len(scenario["leaves"]) - 1
        assert f"; {forks} forks from other branches" in out.stdout, name
        if name in ("branches", "tree"):
            assert forks > 2
        mi = _model_input(server.target, sid)
        assert ctxwarden_llm(mi) == pi_llm(scenario["llm"]), name
        for leaf in scenario["leaves"]:
            leaf_sid = sid if leaf["id"] == scenario["leaf"] else f"{sid}.{leaf['id']}"
            got = ctxwarden_llm(_model_input(server.target, leaf_sid))
            assert got == pi_llm(leaf["llm"]), (name, leaf["id"])
        if name == "compaction":
            assert mi.summary and mi.first_kept_seq > 1
        path = tmp_path / f"{name}.export.jsonl"
        cli("export", sid, "--database-url", backend_url, "--to", "pi", "-o", str(path))
        exported.append(str(path))
    reopened = run_pi(node, "context", *exported)
    for before, after in zip(written, reopened, strict=True):
        assert after["messages"] == before["messages"], before["name"]
        assert after["llm"] == before["llm"], before["name"]
        # Every branch goes back as a branch, under its own leaf ID, with pi's context.
        leaves = {leaf["id"]: leaf["llm"] for leaf in after["leaves"]}
        assert leaves == {leaf["id"]: leaf["llm"] for leaf in before["leaves"]}, before["name"]


def test_a_ctxwarden_session_opens_in_pi(
    node: str, server: ServerProcess, backend_url: str, tmp_path: Path
) -> None:
    sid = f"to-pi-{secrets.token_hex(3)}"
    with Client(server.target) as c:
        c.create_session(session_id=sid, system_prompt="Be brief.", model="gpt-4o")
        for i in range(8):
            c.append_messages(
                sid,
                [
                    user(f"question {i} " * 30),
                    assistant(
                        f"reading {i}",
                        thinking=f"hmm {i}",
                        tool_calls=[tool_call(f"call-{i}", "read", {"path": f"{i}.py"})],
                    ),
                    tool_result(f"call-{i}", f"contents of {i}\n" * 20, tool_name="read"),
                    assistant(f"answer {i}"),
                ],
            )
            if i == 2:
                c.append_messages(sid, [history_only(metadata={"ui": "bookmark"})])
            if i == 5:
                plan = c.prepare_compaction(sid, keep_recent_tokens=300)
                prefix = "The turn so far." if plan.split_turn else ""
                c.commit_compaction(
                    sid, plan.plan_id, "Questions 0-4 were answered.", turn_prefix_summary=prefix
                )
        c.append_messages(sid, [user("one more"), assistant(error_message="overloaded")])
        c.rollback_turn(sid)
        mi = c.build_model_input(sid, view=pb.MODEL_INPUT_VIEW_FULL)
    path = tmp_path / "to-pi.jsonl"
    out = cli("export", sid, "--database-url", backend_url, "--to", "pi", "-o", str(path))
    assert "1 rolled-back messages left out" in out.stderr
    assert "1 history-only messages left out" in out.stderr
    [opened] = run_pi(node, "context", str(path))
    expected = ctxwarden_llm(mi)
    # ctxwarden writes the summary's file lists after its </summary> tag, pi inside.
    summary = expected[0]["content"][0]
    body, tag, files = summary["text"].partition("\n</summary>")
    assert files.startswith("\n\n<read-files>")
    summary["text"] = body + files + tag
    assert pi_llm(opened["llm"]) == expected
    assert opened["messages"][0]["role"] == "compactionSummary"
