"""Parity: our compaction cut point equals pi-mono's published ``findCutPoint``.

The same transcript is written twice, as pi ``SessionEntry`` objects and as our
``Message`` values. pi's side runs in Node (``pi_cut.mjs``, one process for the
whole batch) against the version of ``@mariozechner/pi-coding-agent`` pinned in
``package.json``; our side is ``find_cut_point`` with heuristic token counts.

Both sides must agree on every message's token count, on the first kept index,
on whether the turn is split, and (for a split turn) on where it started.

In scope only: transcripts in which every tool call has its result (ours also
never cuts after a pending call, where pi would), no images in user messages
(pi does not charge them, we do), tool-call arguments as compact JSON (what
``JSON.stringify`` produces) and text in the Basic Multilingual Plane; see
``test_astral_plane_text_is_counted_alike`` for characters outside it.

One deliberate difference is checked rather than treated as a failure: when the
budget runs out inside the tool results that end the transcript, pi keeps
everything and cut.py cuts at the assistant message that made the calls (see
``trailing_results_cut``). pi's own answer is still pinned for those cases.
"""

from __future__ import annotations

import base64
import dataclasses
import fcntl
import json
import math
import random
import shutil
import subprocess
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from ctxwarden.core.compaction.cut import find_cut_point
from ctxwarden.core.messages import (
    ContentBlock,
    ContentKind,
    Message,
    Role,
    StopReason,
    Usage,
)
from ctxwarden.core.tokens import HeuristicTokenizer, count_message

PARITY_DIR = Path(__file__).resolve().parent
PI_PACKAGE = "@mariozechner/pi-coding-agent"
PI_SCRIPT = "pi_cut.mjs"

SEED = 0x5EED_C0DE
RANDOM_CASES = 300
PI_DEFAULT_KEEP_RECENT_TOKENS = 20_000

Entry = dict[str, Any]
PiAnswer = dict[str, Any]


# --------------------------------------------------------------------------
# Node side
# --------------------------------------------------------------------------


def _pinned_version() -> str:
    manifest = json.loads((PARITY_DIR / "package.json").read_text(encoding="utf-8"))
    return str(manifest["dependencies"][PI_PACKAGE])


def _installed_version() -> str | None:
    """The installed pi version, or None when the install is missing or incomplete."""
    package_dir = PARITY_DIR / "node_modules" / PI_PACKAGE
    manifest = package_dir / "package.json"
    if not manifest.is_file():
        return None
    meta = json.loads(manifest.read_text(encoding="utf-8"))
    entry = package_dir / str(meta.get("main", "dist/index.js"))
    if not entry.is_file():
        return None
    return str(meta["version"])


@pytest.fixture(scope="module")
def node() -> str:
    """Path of ``node``, with the pinned pi package installed next to this file.

    On a fresh clone (or after the pin moved) this runs ``npm ci`` once. Missing
    Node or npm is a failure, not a skip: the parity claim must not silently lapse.
    """
    node_bin, npm_bin = shutil.which("node"), shutil.which("npm")
    if node_bin is None or npm_bin is None:
        pytest.fail("the pi parity test needs node and npm on PATH", pytrace=False)
    # Test files run on several pytest workers: one install at a time, the others wait and reuse it.
    with (PARITY_DIR / "node_modules.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        _install_pinned(npm_bin)
    return node_bin


def _install_pinned(npm_bin: str) -> None:
    if _installed_version() != _pinned_version():
        proc = subprocess.run(
            [npm_bin, "ci", "--no-audit", "--no-fund"],
            cwd=PARITY_DIR,
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        if proc.returncode != 0:
            pytest.fail(
                f"npm ci in {PARITY_DIR} failed ({proc.returncode}):\n{proc.stderr[-4000:]}",
                pytrace=False,
            )
        installed = _installed_version()
        if installed != _pinned_version():
            pytest.fail(f"npm ci installed {PI_PACKAGE} {installed}, expected the pin")


def run_pi(node: str, cases: Sequence[tuple[list[Entry], int]]) -> list[PiAnswer]:
    """pi's findCutPoint (and per-entry estimateTokens) for each (entries, budget)."""
    payload = [{"entries": entries, "keepRecentTokens": budget} for entries, budget in cases]
    proc = subprocess.run(
        [node, PI_SCRIPT, "--tokens"],
        cwd=PARITY_DIR,
        input=json.dumps(payload, ensure_ascii=False),
        capture_output=True,
        text=True,
        encoding="utf-8",
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, f"{PI_SCRIPT} failed:\n{proc.stderr[-4000:]}"
    answers: list[PiAnswer] = json.loads(proc.stdout)
    assert len(answers) == len(cases)
    return answers


# --------------------------------------------------------------------------
# pi entries -> our messages
# --------------------------------------------------------------------------

STOP_REASONS = {
    "stop": StopReason.STOP,
    "length": StopReason.LENGTH,
    "toolUse": StopReason.TOOL_USE,
    "error": StopReason.ERROR,
    "aborted": StopReason.ABORTED,
}


def compact_json(value: Any) -> str:
    """What JavaScript's ``JSON.stringify`` makes of ``value`` (no floats in our args)."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _block(block: dict[str, Any]) -> ContentBlock:
    kind = block["type"]
    if kind == "text":
        return ContentBlock.of_text(block["text"])
    if kind == "thinking":
        return ContentBlock(
            ContentKind.THINKING,
            text=block["thinking"],
            signature=block.get("thinkingSignature", ""),
        )
    if kind == "toolCall":
        arguments = compact_json(block["arguments"])
        return ContentBlock.of_tool_call(block["id"], block["name"], arguments)
    if kind == "image":
        return ContentBlock(
            ContentKind.IMAGE, mime_type=block["mimeType"], data=base64.b64decode(block["data"])
        )
    raise AssertionError(f"unexpected block {kind!r}")


def to_message(entry: Entry, seq: int) -> Message:
    assert entry["type"] == "message"
    msg = entry["message"]
    common: dict[str, Any] = {
        "seq": seq,
        "message_id": entry["id"],
        "content": tuple(_block(b) for b in msg["content"]),
        "create_time_us": msg["timestamp"] * 1000,
    }
    role = msg["role"]
    if role == "user":
        message = Message(Role.USER, **common)
    elif role == "assistant":
        usage = msg["usage"]
        message = Message(
            Role.ASSISTANT,
            stop_reason=STOP_REASONS[msg["stopReason"]],
            usage=Usage(
                input_tokens=usage["input"],
                output_tokens=usage["output"],
                cache_read_tokens=usage["cacheRead"],
                cache_write_tokens=usage["cacheWrite"],
                total_tokens=usage["totalTokens"],
            ),
            model=msg["model"],
            provider=msg["provider"],
            error_message=msg.get("errorMessage", ""),
            **common,
        )
    elif role == "toolResult":
        message = Message(
            Role.TOOL_RESULT,
            tool_call_id=msg["toolCallId"],
            tool_name=msg["toolName"],
            is_error=msg["isError"],
            **common,
        )
    else:
        raise AssertionError(f"unexpected role {role!r}")
    return dataclasses.replace(message, token_count=count_message(message, HeuristicTokenizer()))


def to_messages(entries: Sequence[Entry]) -> list[Message]:
    return [to_message(e, seq) for seq, e in enumerate(entries, start=1)]


# --------------------------------------------------------------------------
# Building pi entries
# --------------------------------------------------------------------------


class Transcript:
    """Appends pi session entries with ids, parent links and rising timestamps."""

    def __init__(self, start_ms: int = 1_760_000_000_000) -> None:
        self.entries: list[Entry] = []
        self._ms = start_ms
        self._calls = 0

    def call_id(self) -> str:
        self._calls += 1
        return f"toolu_{self._calls:06d}"

    def add(self, message: dict[str, Any], step_ms: int = 1500) -> None:
        self._ms += step_ms
        n = len(self.entries)
        stamp = datetime.fromtimestamp(self._ms / 1000, tz=UTC).isoformat(timespec="milliseconds")
        self.entries.append(
            {
                "type": "message",
                "id": f"{n + 1:08x}",
                "parentId": self.entries[-1]["id"] if self.entries else None,
                "timestamp": stamp.replace("+00:00", "Z"),
                "message": {**message, "timestamp": self._ms},
            }
        )

    def user(self, *texts: str) -> None:
        self.add({"role": "user", "content": [{"type": "text", "text": t} for t in texts]})

    def assistant(
        self,
        content: list[dict[str, Any]],
        stop: str | None = None,
        error: str = "",
    ) -> None:
        if stop is None:
            stop = "toolUse" if any(b["type"] == "toolCall" for b in content) else "stop"
        output = sum(len(b.get("text", b.get("thinking", ""))) for b in content) // 4
        message: dict[str, Any] = {
            "role": "assistant",
            "content": content,
            "api": "anthropic-messages",
            "provider": "anthropic",
            "model": "claude-sonnet-4-5",
            "usage": {
                "input": 1000 + 37 * len(self.entries),
                "output": output,
                "cacheRead": 0,
                "cacheWrite": 0,
                "totalTokens": 1000 + 37 * len(self.entries) + output,
                "cost": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0, "total": 0},
            },
            "stopReason": stop,
        }
        if error:
            message["errorMessage"] = error
        self.add(message)

    def result(
        self,
        call_id: str,
        name: str,
        texts: Sequence[str],
        is_error: bool = False,
        image: bool = False,
    ) -> None:
        content: list[dict[str, Any]] = [{"type": "text", "text": t} for t in texts]
        if image:
            content.append({"type": "image", "data": TINY_PNG, "mimeType": "image/png"})
        self.add(
            {
                "role": "toolResult",
                "toolCallId": call_id,
                "toolName": name,
                "content": content,
                "isError": is_error,
            }
        )


TINY_PNG = base64.b64encode(bytes.fromhex("89504e470d0a1a0a0000000d49484452")).decode()


# --------------------------------------------------------------------------
# Random transcripts
# --------------------------------------------------------------------------

_VOCABULARY = (
    "the of and to in is for that with on as it be by this are from at or an was which "
    "function return value error file path config session context token budget message "
    "compaction summary assistant user tool result call test failed passed import class def "
    "self None True False async await const let var export default interface type string "
    "naïve café Größe façade über résumé 日本語 テスト 数据 контекст ошибка — \u2013 “quoted” → ✓ "
    "±½ §2.3 …"
)
WORDS = _VOCABULARY.split()
CODE_LINES = (
    "def find_cut_point(messages, keep_recent_tokens):",
    "    for i in range(len(messages) - 1, -1, -1):",
    '        raise ValueError(f"bad index {i!r}")',
    "export function findCutPoint(entries, startIndex, endIndex, keepRecentTokens) {",
    '  const x = JSON.parse("{\\"a\\": [1, 2, 3]}");',
    "\tif (a < b && c > d) { return `${a}\\n${b}`; }",
    "FAILED tests/core/test_view.py::test_truncation - AssertionError: 3 != 4",
    "src/app/main.py:42:17: E501 line too long (104 > 100)",
    "-rw-r--r--  1 dev dev  13534 Nov 30 07:00 README.md",
    "Traceback (most recent call last):",
    '  File "/srv/app/handlers.py", line 118, in handle',
    "SELECT id, parent_id, token_count FROM messages WHERE session_id = ? ORDER BY seq;",
    "+    budget = max(0, keep_recent_tokens - reserved)",
    "@@ -10,7 +10,9 @@ class Planner:",
)
TOOLS = ("read", "bash", "edit", "write", "grep", "find", "ls", "screenshot")


def make_corpus(rng: random.Random, size: int = 96_000) -> str:
    parts: list[str] = []
    total = 0
    while total < size:
        if rng.random() < 0.3:
            piece = "\n".join(rng.choice(CODE_LINES) for _ in range(rng.randint(1, 6))) + "\n"
        else:
            piece = " ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 25)))
            piece += rng.choice((". ", ".\n", "\n\n", ", ", "? ", ": "))
        parts.append(piece)
        total += len(piece)
    return "".join(parts)


def open_calls(entries: Sequence[Entry]) -> set[str]:
    """Ids of tool calls (of assistant messages that did not fail) without a result."""
    pending: set[str] = set()
    for entry in entries:
        msg = entry["message"]
        if msg["role"] == "assistant" and msg["stopReason"] not in ("error", "aborted"):
            pending |= {b["id"] for b in msg["content"] if b["type"] == "toolCall"}
        elif msg["role"] == "toolResult":
            pending.discard(msg["toolCallId"])
    return pending


class RandomTranscripts:
    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.corpus = make_corpus(self.rng)

    def text(self, lo: int, hi: int, *, log: bool = True) -> str:
        """A slice of the corpus with a length in [lo, hi] (log-uniform by default)."""
        rng = self.rng
        n = round(math.exp(rng.uniform(math.log(lo), math.log(hi)))) if log else rng.randint(lo, hi)
        n = min(max(n, lo), hi)
        out: list[str] = []
        while n > 0:
            start = rng.randrange(len(self.corpus))
            chunk = self.corpus[start : start + n]
            out.append(chunk)
            n -= len(chunk)
        return "".join(out)

    def args(self, name: str) -> dict[str, Any]:
        rng = self.rng
        path = rng.choice(("src/app/main.py", "server/ctxwarden/core/cut.py", "docs/Größe.md"))
        if name == "read":
            args: dict[str, Any] = {"path": path}
            if rng.random() < 0.4:
                args |= {"offset": rng.randint(1, 2000), "limit": rng.choice((50, 200, 2000))}
            return args
        if name == "bash":
            command = rng.choice(
                (
                    "pytest -q tests/core",
                    'grep -rn "find_cut_point" server | head -20',
                    "ls -la && cat README.md | wc -l",
                    "python - <<'EOF'\nprint(\"héllo\\tworld\")\nEOF",
                )
            )
            return {"command": command, "timeout": rng.choice((None, 30, 120))}
        if name == "edit":
            return {
                "path": path,
                "edits": [
                    {"oldText": self.text(5, 400), "newText": self.text(5, 600)}
                    for _ in range(rng.randint(1, 3))
                ],
            }
        if name == "write":
            return {"path": path, "content": self.text(20, 6000)}
        if name == "grep":
            return {
                "pattern": rng.choice(("def \\w+\\(", "TODO|FIXME", '"quoted"', "naïve")),
                "path": "server/",
                "ignoreCase": rng.random() < 0.5,
                "context": rng.randint(0, 3),
            }
        if name == "find":
            return {"pattern": "**/*.py", "path": ".", "options": {"depth": 3, "hidden": False}}
        if name == "ls":
            return {"path": rng.choice((".", "tests/", "server/ctxwarden")), "limit": 500}
        return {"fullPage": rng.random() < 0.5, "selector": "#main > .content\u2028", "dpr": 2}

    def tool_output(self, name: str) -> list[str]:
        rng = self.rng
        if name in ("write", "edit") and rng.random() < 0.8:
            return [f"Successfully wrote {rng.randint(1, 40_000)} bytes"]
        texts = [self.text(10, 40_000)]
        if rng.random() < 0.1:
            texts.append(self.text(10, 2000))
        return texts

    def failed_step(self, t: Transcript) -> None:
        rng = self.rng
        content: list[dict[str, Any]] = []
        if rng.random() < 0.5:
            content.append({"type": "thinking", "thinking": self.text(10, 800)})
        if rng.random() < 0.5:
            content.append({"type": "text", "text": self.text(1, 500)})
        if rng.random() < 0.2:
            # An aborted stream may hold a half-received call; it never gets a result.
            call = {"type": "toolCall", "id": t.call_id(), "name": "bash"}
            content.append({**call, "arguments": {"command": "ls -la"}})
        stop = rng.choice(("error", "aborted"))
        error = "Request was aborted" if stop == "aborted" else "529 overloaded_error: Overloaded"
        t.assistant(content, stop=stop, error=error)

    def step(self, t: Transcript, final: bool) -> None:
        """One assistant message; unless final, with 1-3 tool calls and their results."""
        rng = self.rng
        content: list[dict[str, Any]] = []
        if rng.random() < 0.5:
            block = {"type": "thinking", "thinking": self.text(20, 3000)}
            if rng.random() < 0.5:
                block["thinkingSignature"] = "EqQBCkgIARABGAIiQL" + "A" * rng.randint(10, 200)
            content.append(block)
        if final or rng.random() < 0.6:
            content.append({"type": "text", "text": self.text(10, 2500)})
        calls: list[tuple[str, str]] = []
        if not final:
            for _ in range(rng.choice((1, 1, 1, 2, 2, 3))):
                name = rng.choice(TOOLS)
                call_id = t.call_id()
                calls.append((call_id, name))
                content.append(
                    {"type": "toolCall", "id": call_id, "name": name, "arguments": self.args(name)}
                )
        stop = "length" if final and rng.random() < 0.05 else None
        t.assistant(content, stop=stop)
        for call_id, name in calls:
            t.result(
                call_id,
                name,
                self.tool_output(name),
                is_error=rng.random() < 0.1,
                image=name == "screenshot" and rng.random() < 0.7,
            )

    def transcript(self) -> list[Entry]:
        rng = self.rng
        t = Transcript(start_ms=1_760_000_000_000 + rng.randrange(10**9))
        for _ in range(rng.randint(1, 14)):
            texts = [self.text(5, 3000)]
            if rng.random() < 0.15:
                texts.append(self.text(20, 8000))  # a pasted log or file
            t.user(*texts)
            steps = min(1 + int(rng.expovariate(1 / 3)), 12)
            for s in range(steps):
                if rng.random() < 0.07:
                    self.failed_step(t)
                    if rng.random() < 0.5:
                        break  # the user speaks next; otherwise the agent retried
                self.step(t, final=s == steps - 1)
        entries = t.entries
        if rng.random() < 0.15:
            # Stop mid-turn, at a point where every call has its result.
            ends = [i for i in range(1, len(entries) + 1) if not open_calls(entries[:i])]
            entries = entries[: rng.choice(ends)]
        if rng.random() < 0.05:
            # A tail of a longer session: may start with an assistant or tool result.
            entries = entries[rng.randrange(len(entries)) :]
        return entries

    def budget(self, entries: Sequence[Entry]) -> int:
        rng = self.rng
        mode = rng.random()
        if mode < 0.1:
            return PI_DEFAULT_KEEP_RECENT_TOKENS
        if mode < 0.4:
            return min(max(round(rng.gauss(PI_DEFAULT_KEEP_RECENT_TOKENS, 3000)), 500), 30_000)
        if mode < 0.7:
            # Exactly at (or one off) the running total at some message: the >= edge.
            suffix, sums = 0, []
            for m in reversed(to_messages(entries)):
                suffix += m.token_count
                if 500 <= suffix <= 30_000:
                    sums.append(suffix)
            if sums:
                return rng.choice(sums) + rng.choice((-1, 0, 0, 1))
        return rng.randint(500, 30_000)


def random_cases() -> list[tuple[list[Entry], int]]:
    gen = RandomTranscripts(SEED)
    cases = []
    for _ in range(RANDOM_CASES):
        entries = gen.transcript()
        cases.append((entries, gen.budget(entries)))
    return cases


# --------------------------------------------------------------------------
# Hand-written edge cases
# --------------------------------------------------------------------------


def _chars(tokens: int) -> str:
    return "x" * (4 * tokens)


class Edge(Transcript):
    """Transcript with exact token sizes (the heuristic is ceil(chars / 4))."""

    def __init__(self) -> None:
        super().__init__()
        self.open_calls: list[str] = []

    def u(self, tokens: int) -> Edge:
        self.user(_chars(tokens))
        return self

    def a(self, tokens: int, calls: int = 0, stop: str | None = None) -> Edge:
        content: list[dict[str, Any]] = []
        used = 0
        for _ in range(calls):
            call_id = self.call_id()
            self.open_calls.append(call_id)
            content.append({"type": "toolCall", "id": call_id, "name": "ls", "arguments": {}})
            used += len("ls{}")
        assert used <= 4 * tokens
        content.insert(0, {"type": "text", "text": "x" * (4 * tokens - used)})
        self.assistant(content, stop=stop, error="boom" if stop in ("error", "aborted") else "")
        return self

    def t(self, tokens: int, image: bool = False) -> Edge:
        call_id = self.open_calls.pop(0) if self.open_calls else self.call_id()
        self.result(call_id, "ls", [_chars(tokens)], image=image)
        return self


EDGE_CASES: dict[str, tuple[Callable[[], Edge], int, tuple[int, int, bool]]] = {
    # name: (transcript, keep_recent_tokens, (first kept, turn start, split))
    "empty": (Edge, 20_000, (0, -1, False)),
    "only-tool-results": (lambda: Edge().t(10).t(10), 5, (0, -1, False)),
    "single-user": (lambda: Edge().u(10), 20_000, (0, -1, False)),
    "budget-exceeds-transcript": (
        lambda: Edge().u(10).a(10, calls=1).t(10).a(10),
        20_000,
        (0, -1, False),
    ),
    "budget-exceeds-transcript-leading-results": (
        lambda: Edge().t(5).t(5).u(10).a(10),
        1000,
        (2, -1, False),
    ),
    "budget-exceeds-transcript-leading-assistant": (
        lambda: Edge().t(5).a(10).u(10).a(10),
        1000,
        (1, -1, False),
    ),
    "cut-on-tool-result": (
        lambda: Edge().u(10).a(10, calls=1).t(1000).a(10),
        500,
        (3, 0, True),
    ),
    "cut-on-first-of-several-results": (
        lambda: Edge().u(10).a(10, calls=3).t(300).t(300).t(300).a(10),
        600,
        (5, 0, True),
    ),
    "cut-on-result-before-next-user": (
        lambda: Edge().u(10).a(10, calls=1).t(1000).u(10).a(10),
        500,
        (3, -1, False),
    ),
    "huge-trailing-result-keeps-all": (
        lambda: Edge().u(10).a(10, calls=1).t(5000),
        1000,
        (0, -1, False),
    ),
    "split-turn": (
        lambda: Edge().u(10).a(10, calls=1).t(100).a(10, calls=1).t(100).a(10),
        200,
        (3, 0, True),
    ),
    "split-turn-later-turn": (
        lambda: Edge().u(10).a(10).u(10).a(10, calls=1).t(500).a(10),
        400,
        (5, 2, True),
    ),
    "cut-at-user": (lambda: Edge().u(10).a(10).u(100).a(10), 100, (2, -1, False)),
    "budget-reached-exactly": (lambda: Edge().u(10).a(10).u(10).a(30), 40, (2, -1, False)),
    "budget-one-over": (lambda: Edge().u(10).a(10).u(10).a(30), 41, (1, 0, True)),
    "zero-budget": (lambda: Edge().u(10).a(10), 0, (1, 0, True)),
    "zero-budget-trailing-result": (lambda: Edge().u(10).a(10, calls=1).t(10), 0, (0, -1, False)),
    "several-trailing-results-over-budget": (
        lambda: Edge().u(10).a(10).u(10).a(10, calls=2).t(600).t(600),
        1000,
        (0, -1, False),
    ),
    "trailing-results-within-budget": (
        lambda: Edge().u(10).a(10, calls=1).t(100),
        105,
        (1, 0, True),
    ),
    "cut-at-failed-assistant": (
        lambda: Edge().u(10).a(10, calls=1).t(100).a(10, stop="error").a(10),
        20,
        (3, 0, True),
    ),
    "zero-token-messages": (lambda: Edge().u(0).a(0, stop="aborted"), 1, (0, -1, False)),
    "image-in-tool-result": (
        lambda: Edge().u(10).a(10, calls=1).t(1, image=True).a(10),
        1000,
        (3, 0, True),
    ),
}


OURS_DIFFERS: dict[str, tuple[int, int, bool]] = {
    # Budget runs out inside the trailing tool results (see trailing_results_cut).
    "huge-trailing-result-keeps-all": (1, 0, True),
    "zero-budget-trailing-result": (1, 0, True),
    "several-trailing-results-over-budget": (3, 2, True),
}


# --------------------------------------------------------------------------
# Comparison
# --------------------------------------------------------------------------


def first_cut_point(messages: Sequence[Message]) -> int:
    return next((i for i, m in enumerate(messages) if m.role is not Role.TOOL_RESULT), 0)


def turn_start_index(messages: Sequence[Message], index: int) -> int:
    """pi's findTurnStartIndex, or -1 when the cut is at a user message."""
    if messages[index].role is Role.USER:
        return -1
    return next((i for i in range(index, -1, -1) if messages[i].role is Role.USER), -1)


def trailing_results_cut(messages: Sequence[Message], budget: int) -> int | None:
    """Where ours cuts when pi and ours deliberately differ, else None.

    When the budget runs out inside the tool results that end the transcript,
    there is no valid cut point at or after that message: pi then falls back to
    its first cut point (keeps everything, so a huge tool output blocks
    compaction), while cut.py documents cutting at the assistant message that
    made the calls, i.e. the last cut point.
    """
    cut_points = [i for i, m in enumerate(messages) if m.role is not Role.TOOL_RESULT]
    if not cut_points or cut_points[-1] == len(messages) - 1:
        return None
    last = cut_points[-1]
    if sum(m.token_count for m in messages[last + 1 :]) >= budget:
        return last
    return None


def describe(entries: Sequence[Entry], tokens: Sequence[int]) -> str:
    """One token per message: role letter, token count, tool calls, stop reason."""
    parts = []
    for i, (entry, n) in enumerate(zip(entries, tokens, strict=True)):
        msg = entry["message"]
        tag = {"user": "U", "assistant": "A", "toolResult": "T"}[msg["role"]]
        extra = ""
        if msg["role"] == "assistant":
            calls = sum(1 for b in msg["content"] if b["type"] == "toolCall")
            extra = (f"+{calls}call" if calls else "") + (
                f"!{msg['stopReason']}" if msg["stopReason"] in ("error", "aborted") else ""
            )
        parts.append(f"{i}:{tag}{n}{extra}")
    return " ".join(parts)


def mismatch(entries: list[Entry], budget: int, pi: PiAnswer) -> str | None:
    """None when ours agrees with pi, else a precise account of the difference."""
    messages = to_messages(entries)
    ours_tokens = [m.token_count for m in messages]
    if ours_tokens != pi["entryTokens"]:
        diffs = [
            f"#{i} pi={p} ours={o}"
            for i, (p, o) in enumerate(zip(pi["entryTokens"], ours_tokens, strict=True))
            if p != o
        ]
        return f"token counts differ: {', '.join(diffs[:10])}"
    cut = find_cut_point(messages, budget)
    ours = (cut.first_kept_index, cut.split_turn, cut.turn_start_index if cut.split_turn else -1)
    theirs = (
        pi["firstKeptEntryIndex"],
        pi["isSplitTurn"],
        pi["turnStartIndex"] if pi["isSplitTurn"] else -1,
    )
    note = ""
    trailing_cut = trailing_results_cut(messages, budget)
    if trailing_cut is not None:
        # Deliberate divergence (cut.py docstring): pi keeps everything here.
        if pi["firstKeptEntryIndex"] != first_cut_point(messages):
            return f"pi no longer keeps all when the budget runs out in trailing results: {pi}"
        turn_start = turn_start_index(messages, trailing_cut)
        theirs = (trailing_cut, turn_start != -1, turn_start)
        note = (
            f" [budget runs out in the trailing tool results: pi keeps all, cut.py "
            f"documents cutting at {trailing_cut} instead]"
        )
    if ours == theirs:
        return None
    return (
        f"keepRecentTokens={budget}: pi firstKept={pi['firstKeptEntryIndex']} "
        f"split={pi['isSplitTurn']} turnStart={pi['turnStartIndex']}; ours "
        f"first_kept={cut.first_kept_index} split={cut.split_turn} "
        f"turn_start={cut.turn_start_index}{note}\n"
        f"  transcript ({len(entries)} messages, total {sum(ours_tokens)} tokens): "
        f"{describe(entries, ours_tokens)}"
    )


@pytest.fixture(scope="module")
def cases() -> list[tuple[list[Entry], int]]:
    """Edge cases, then the astral-plane case, then the random ones: one pi run for all."""
    edge = [(build().entries, budget) for build, budget, _ in EDGE_CASES.values()]
    return [*edge, astral_case(), *random_cases()]


@pytest.fixture(scope="module")
def pi_answers(node: str, cases: list[tuple[list[Entry], int]]) -> list[PiAnswer]:
    return run_pi(node, cases)


ASTRAL_INDEX = len(EDGE_CASES)


def _edge_index(name: str) -> int:
    return list(EDGE_CASES).index(name)


@pytest.mark.parametrize("name", list(EDGE_CASES))
def test_edge_case(
    name: str, cases: list[tuple[list[Entry], int]], pi_answers: list[PiAnswer]
) -> None:
    entries, budget = cases[_edge_index(name)]
    pi = pi_answers[_edge_index(name)]
    expected = EDGE_CASES[name][2]
    # Pin pi's own answer too, so a change of semantics in a new pi release is noticed.
    assert (pi["firstKeptEntryIndex"], pi["turnStartIndex"], pi["isSplitTurn"]) == expected
    problem = mismatch(entries, budget, pi)
    assert problem is None, problem
    cut = find_cut_point(to_messages(entries), budget)
    ours = (cut.first_kept_index, cut.turn_start_index, cut.split_turn)
    assert ours == OURS_DIFFERS.get(name, expected)


def _random_pairs(
    cases: list[tuple[list[Entry], int]], pi_answers: list[PiAnswer]
) -> Iterator[tuple[int, list[Entry], int, PiAnswer]]:
    offset = len(EDGE_CASES) + 1
    for n in range(RANDOM_CASES):
        entries, budget = cases[offset + n]
        yield n, entries, budget, pi_answers[offset + n]


def test_random_transcripts_cover_the_interesting_cuts(
    cases: list[tuple[list[Entry], int]], pi_answers: list[PiAnswer]
) -> None:
    """Guard the generator: in scope (no pending calls) and every kind of cut exercised."""
    kinds = {"split": 0, "at-user": 0, "keep-all": 0, "after-result": 0, "exact": 0}
    for n, entries, budget, pi in _random_pairs(cases, pi_answers):
        assert not open_calls(entries), f"case {n} has calls without results"
        first = pi["firstKeptEntryIndex"]
        tokens = pi["entryTokens"]
        if pi["isSplitTurn"]:
            kinds["split"] += 1
        elif first > 0 and entries[first]["message"]["role"] == "user":
            kinds["at-user"] += 1
        if sum(tokens[first:]) == sum(tokens):
            kinds["keep-all"] += 1
        if first > 0 and entries[first - 1]["message"]["role"] == "toolResult":
            kinds["after-result"] += 1
        if budget in {sum(tokens[i:]) for i in range(len(tokens))}:
            kinds["exact"] += 1
    assert min(kinds.values()) >= 10, kinds


def test_random_transcripts_match_pi(
    cases: list[tuple[list[Entry], int]],
    pi_answers: list[PiAnswer],
    tmp_path: Path,
) -> None:
    failures: list[str] = []
    failing_cases: list[dict[str, Any]] = []
    for n, entries, budget, pi in _random_pairs(cases, pi_answers):
        problem = mismatch(entries, budget, pi)
        if problem is not None:
            failures.append(f"case {n}: {problem}")
            failing_cases.append({"entries": entries, "keepRecentTokens": budget})
    if failures:
        repro = tmp_path / "failing_cases.json"
        repro.write_text(json.dumps(failing_cases, ensure_ascii=False), encoding="utf-8")
        pytest.fail(
            f"{len(failures)}/{RANDOM_CASES} cases differ from pi (seed {SEED:#x}; "
            f"inputs for `node {PI_SCRIPT}` in {repro}):\n" + "\n".join(failures[:20]),
            pytrace=False,
        )


def astral_case() -> tuple[list[Entry], int]:
    t = Edge().u(40)
    t.assistant([{"type": "text", "text": "\U0001f600" * 200}])  # pi: 100 tokens, ours: 50
    t.u(10)
    return t.entries, 80


def test_astral_plane_text_is_counted_alike(
    cases: list[tuple[list[Entry], int]], pi_answers: list[PiAnswer]
) -> None:
    entries, budget = cases[ASTRAL_INDEX]
    problem = mismatch(entries, budget, pi_answers[ASTRAL_INDEX])
    assert problem is None, problem
