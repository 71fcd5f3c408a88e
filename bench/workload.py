"""Deterministic, realistic-looking agent traffic for the benchmark.

Everything is generated from a seeded ``random.Random`` so two runs (and two
backends in one run) send byte-identical sessions.
"""

from __future__ import annotations

import json
import math
import random
import struct
import zlib
from collections.abc import Iterator

from ctxwarden.v1 import message_pb2 as m
from ctxwarden.v1 import session_pb2 as ses

IMAGE_SHARE = 0.05
"""Share of user turns that attach a screenshot."""

MODEL = "gpt-4.1"
PROVIDER = "openai"

SYSTEM_PROMPT = """\
You are a senior software engineer working inside a developer's repository through a set \
of tools. Read code before changing it, keep edits small and focused, and run the relevant \
tests after every change. Prefer the project's existing helpers and conventions over new \
abstractions. When a command fails, read the error carefully and fix the cause rather than \
the symptom. Never invent file contents: use read_file or grep first. Report what you \
changed, why, and how you verified it. If the request is ambiguous, state your assumption \
and proceed with the most conservative interpretation. Keep answers concise; use code \
blocks for code and shell commands. Do not run destructive commands (rm -rf, git push \
--force, DROP TABLE) without explicit confirmation. The repository uses Python 3.11, \
pytest, ruff and mypy in strict mode; line length is 100.
"""

TOOLS = (
    ses.ToolDefinition(
        name="read_file",
        description="Read a text file of the repository, optionally a line range.",
        parameters_json=json.dumps(
            {
                "type": "object",
                "properties": {
                    "path": {"type": "string", "description": "Path relative to the repo."},
                    "start_line": {"type": "integer", "minimum": 1},
                    "end_line": {"type": "integer", "minimum": 1},
                },
                "required": ["path"],
            }
        ),
    ),
    ses.ToolDefinition(
        name="run_shell",
        description="Run a shell command in the repository root and return its output.",
        parameters_json=json.dumps(
            {
                "type": "object",
                "properties": {
                    "command": {"type": "string"},
                    "timeout_seconds": {"type": "integer", "default": 120},
                },
                "required": ["command"],
            }
        ),
    ),
    ses.ToolDefinition(
        name="grep",
        description="Search the repository with a regular expression.",
        parameters_json=json.dumps(
            {
                "type": "object",
                "properties": {
                    "pattern": {"type": "string"},
                    "path": {"type": "string", "default": "."},
                    "ignore_case": {"type": "boolean", "default": False},
                },
                "required": ["pattern"],
            }
        ),
    ),
    ses.ToolDefinition(
        name="edit_file",
        description="Replace one exact occurrence of old_text with new_text in a file.",
        parameters_json=json.dumps(
            {
                "type": "object",
                "properties": {
                    "path": {"type": "string"},
                    "old_text": {"type": "string"},
                    "new_text": {"type": "string"},
                },
                "required": ["path", "old_text", "new_text"],
            }
        ),
    ),
)

_MODULES = (
    "server/app/handlers.py",
    "server/app/store/repository.py",
    "server/app/core/billing.py",
    "server/app/core/invoices.py",
    "server/app/api/routes.py",
    "server/app/workers/scheduler.py",
    "tests/unit/test_billing.py",
    "tests/e2e/test_invoices.py",
    "client/python/sdk/session.py",
    "scripts/migrate_accounts.py",
)
_NOUNS = (
    "invoice",
    "customer",
    "ledger entry",
    "retry policy",
    "connection pool",
    "migration",
    "rate limiter",
    "cache key",
    "webhook",
    "session token",
    "currency rounding",
    "background job",
    "pagination cursor",
    "audit log",
    "feature flag",
)
_VERBS = (
    "refactor",
    "fix",
    "speed up",
    "add tests for",
    "document",
    "simplify",
    "harden",
    "trace",
    "split",
    "validate",
)
_IDENTS = (
    "invoice",
    "customer_id",
    "amount_cents",
    "ledger",
    "retry_after",
    "session",
    "cursor",
    "payload",
    "tenant",
    "currency",
    "due_date",
    "attempts",
    "webhook_url",
    "line_items",
    "total",
)
_USER_SENTENCES = (
    "Can you {verb} the {noun} code in {path}?",
    "The {noun} handling in {path} is flaky in CI since yesterday's merge.",
    "We see duplicate {noun}s in production when two workers race on the same tenant.",
    "Please keep the public API of {path} unchanged; other teams depend on it.",
    "I think the bug is in how we compute the {noun}, but I am not sure.",
    "Run the unit tests first and tell me which ones fail before touching anything.",
    "After that, {verb} the {noun} so it is easier to reason about.",
    "The on-call engineer reported a spike of 500s around the {noun} endpoint at 02:13 UTC.",
    "Make sure the change is covered by a regression test.",
    "Also check whether the {noun} is logged with the tenant id; support needs it.",
)
_ASSISTANT_SENTENCES = (
    "I read {path} and the {noun} logic lives in a single 80-line function.",
    "The failing test expects the {noun} to be rounded half-even, but the code rounds half-up.",
    "I will {verb} the {noun} by extracting the validation into a small helper.",
    "The race happens because the {noun} is read and written in two separate transactions.",
    "Wrapping both statements in one transaction with SELECT ... FOR UPDATE removes it.",
    "All 214 unit tests pass now, including the new regression test for the {noun}.",
    "I kept the public signature of {path} unchanged, as you asked.",
    "Next I will run the end-to-end suite to make sure nothing else depends on the old order.",
    "mypy reports no new errors and ruff is clean.",
    "One open question: should a zero-amount {noun} still emit a webhook?",
)


def _fill(rng: random.Random, sentences: tuple[str, ...], size: int) -> str:
    """Prose of about ``size`` bytes, cut at a word boundary."""
    parts: list[str] = []
    n = 0
    while n < size:
        s = rng.choice(sentences).format(
            verb=rng.choice(_VERBS), noun=rng.choice(_NOUNS), path=rng.choice(_MODULES)
        )
        parts.append(s)
        n += len(s) + 1
    text = " ".join(parts)
    if len(text) > size:
        cut = text.rfind(" ", 0, size)
        text = text[: cut if cut > size // 2 else size]
    return text


def _code_line(rng: random.Random, indent: int) -> str:
    a, b = rng.choice(_IDENTS), rng.choice(_IDENTS)
    templates = (
        f"{a} = {b}.get({a!r}, 0)",
        f"if {a} is None:",
        f"return {a} + {b}",
        f"for item in {b}.line_items:",
        f"log.info('processing %s for %s', {a}, {b})",
        f"raise ValueError(f'invalid {a}: {{{a}!r}}')",
        f"{a}.append({b})",
        f"await session.execute(select(Invoice).where(Invoice.{a} == {b}))",
        f"def compute_{a}({b}: int, *, strict: bool = False) -> int:",
        "# Keep this in sync with the billing service's rounding rules.",
        f"assert {a} >= 0, {b}",
    )
    return "    " * indent + rng.choice(templates)


def _tool_output(rng: random.Random, tool: str, size: int) -> str:
    lines: list[str] = []
    n = 0
    i = rng.randint(1, 400)
    while n < size:
        if tool == "read_file":
            line = f"{i:5d}  {_code_line(rng, rng.randint(0, 3))}"
        elif tool == "grep":
            line = f"{rng.choice(_MODULES)}:{i}: {_code_line(rng, 0)}"
        else:
            kind = rng.random()
            test = f"tests/unit/test_{rng.choice(_IDENTS)}.py::test_{rng.choice(_IDENTS)}"
            if kind < 0.7:
                line = f"{test} PASSED [{rng.randint(1, 99):3d}%]"
            elif kind < 0.85:
                line = f"{test} FAILED - AssertionError: assert {rng.randint(0, 999)} == 0"
            else:
                line = f"E       {_code_line(rng, 0)}"
        lines.append(line)
        n += len(line) + 1
        i += 1
    return "\n".join(lines)[:size]


def screenshot(rng: random.Random, size: int = 24_000) -> m.ImageContent:
    """A PNG of a common screen size: a real header and ``size`` bytes of image data.

    Token counting reads only the header; the data is incompressible bytes of
    the size a compressed screenshot has.
    """
    width, height = rng.choice(((1280, 800), (1440, 900), (1920, 1080), (800, 600)))
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    data = rng.randbytes(size)

    def chunk(kind: bytes, body: bytes) -> bytes:
        crc = zlib.crc32(kind + body) & 0xFFFFFFFF
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", crc)

    png = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", data) + chunk(b"IEND", b"")
    return m.ImageContent(mime_type="image/png", data=png)


class Conversation:
    """Generates protobuf messages of one coding-agent conversation."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self._calls = 0
        self._turn = 0

    def text_message(self, role: int, size: int = 800) -> m.Message:
        """A plain user or assistant text message of ``size`` bytes."""
        if role == m.ROLE_USER:
            return m.Message(
                role=m.ROLE_USER,
                content=[
                    m.ContentBlock(text=m.TextContent(text=_fill(self.rng, _USER_SENTENCES, size)))
                ],
            )
        return self._assistant_text(size)

    def _assistant_text(self, size: int) -> m.Message:
        out = self.rng.randint(size // 5, size // 3)
        return m.Message(
            role=m.ROLE_ASSISTANT,
            content=[
                m.ContentBlock(text=m.TextContent(text=_fill(self.rng, _ASSISTANT_SENTENCES, size)))
            ],
            stop_reason=m.STOP_REASON_STOP,
            model=MODEL,
            provider=PROVIDER,
            usage=m.Usage(
                input_tokens=self.rng.randint(4000, 90000),
                output_tokens=out,
                cache_read_tokens=self.rng.randint(0, 60000),
                total_tokens=out + 50000,
            ),
        )

    def alternating(self, n: int, size: int = 800) -> list[m.Message]:
        """``n`` plain text messages, user and assistant in turn."""
        roles = (m.ROLE_USER, m.ROLE_ASSISTANT)
        return [self.text_message(roles[i % 2], size) for i in range(n)]

    def _call(self) -> tuple[m.ContentBlock, str]:
        self._calls += 1
        call_id = f"call_{self._turn:05d}_{self._calls:06d}"
        tool = self.rng.choice(("read_file", "read_file", "grep", "run_shell", "edit_file"))
        path = self.rng.choice(_MODULES)
        if tool == "read_file":
            start = self.rng.randint(1, 300)
            args: dict[str, object] = {
                "path": path,
                "start_line": start,
                "end_line": start + 120,
            }
        elif tool == "grep":
            args = {"pattern": f"def .*{self.rng.choice(_IDENTS)}", "path": "server/"}
        elif tool == "run_shell":
            args = {
                "command": f"pytest -q -x {path} -k {self.rng.choice(_IDENTS)}",
                "timeout_seconds": 300,
            }
        else:
            args = {
                "path": path,
                "old_text": "\n".join(_code_line(self.rng, 1) for _ in range(3)),
                "new_text": "\n".join(_code_line(self.rng, 1) for _ in range(4)),
            }
        block = m.ContentBlock(
            tool_call=m.ToolCall(id=call_id, name=tool, arguments_json=json.dumps(args))
        )
        return block, tool

    def _tool_round(self) -> list[m.Message]:
        """An assistant message with 1-2 tool calls, then one result per call."""
        calls = [self._call() for _ in range(1 if self.rng.random() < 0.8 else 2)]
        content = []
        if self.rng.random() < 0.6:
            note = _fill(self.rng, _ASSISTANT_SENTENCES, self.rng.randint(80, 300))
            content.append(m.ContentBlock(text=m.TextContent(text=note)))
        content.extend(block for block, _ in calls)
        out = [
            m.Message(
                role=m.ROLE_ASSISTANT,
                content=content,
                stop_reason=m.STOP_REASON_TOOL_USE,
                model=MODEL,
                provider=PROVIDER,
                usage=m.Usage(input_tokens=self.rng.randint(4000, 90000), output_tokens=120),
            )
        ]
        for block, tool in calls:
            # 0.2-20 KB, log-uniform: most outputs are small, some are whole files.
            size = int(math.exp(self.rng.uniform(math.log(200), math.log(20_000))))
            text = _tool_output(self.rng, tool, size) if tool != "edit_file" else "OK: 1 edit"
            out.append(
                m.Message(
                    role=m.ROLE_TOOL_RESULT,
                    content=[m.ContentBlock(text=m.TextContent(text=text))],
                    tool_call_id=block.tool_call.id,
                    tool_name=tool,
                    is_error=self.rng.random() < 0.05,
                )
            )
        return out

    def _turn_messages(self) -> Iterator[list[m.Message]]:
        """One agent turn as atomic groups: user ask, 1-5 tool rounds, final answer."""
        self._turn += 1
        ask = self.text_message(m.ROLE_USER, self.rng.randint(150, 1200))
        if self.rng.random() < IMAGE_SHARE:
            ask.content.append(m.ContentBlock(image=screenshot(self.rng)))
        yield [ask]
        for _ in range(self.rng.randint(1, 5)):
            yield self._tool_round()
        yield [self._assistant_text(self.rng.randint(300, 1500))]

    def agent_history(self, n: int) -> list[m.Message]:
        """Exactly ``n`` messages of coding-agent history; every tool call is answered."""
        out: list[m.Message] = []
        while len(out) < n:
            for group in self._turn_messages():
                if len(out) + len(group) > n:
                    # Fill the tail with plain text so no call is left unanswered.
                    while len(out) < n:
                        out.append(self._assistant_text(self.rng.randint(200, 800)))
                    break
                out.extend(group)
        return out
