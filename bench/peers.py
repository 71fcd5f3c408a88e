"""Side by side with the peers: ctxwarden against the session stores users would otherwise pick.

Run ``python -m bench.peers [--quick] [--backends sqlite,mysql] [--json out.json]``.

In one process run, on the same database server and with the same transcripts, it measures
ctxwarden (a real ``ctxwarden serve`` over loopback gRPC, generated sync stubs) and, in turn:

* Google ADK's ``DatabaseSessionService`` (google-adk, in-process),
* the OpenAI Agents SDK's ``SQLAlchemySession`` (openai-agents, in-process),
* pi-mono's ``prepareCompaction`` (@mariozechner/pi-coding-agent, in Node, ``bench/pi``),

and reports ratios ours / theirs. A peer that is not installed is reported as skipped.
See the section "Side by side with the peers" of bench/README.md for every row.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import json
import os
import secrets
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

import grpc
from sqlalchemy.engine import make_url
from tests.support.server import ServerProcess, drop_mysql_database, make_mysql_database

from bench.common import (
    BACKENDS,
    CHANNEL_OPTIONS,
    DEFAULT_MYSQL_URL,
    MYSQL_ENV,
    TIMEOUT,
    Result,
    append_batched,
    backend_database,
    create_session,
    log,
    mysql_info,
    one_message_requests,
    run_meta,
    stream_appends,
    summarize,
)
from bench.workload import MODEL, PROVIDER, Conversation
from ctxwarden.v1 import context_service_pb2 as pb
from ctxwarden.v1 import context_service_pb2_grpc as pb_grpc
from ctxwarden.v1 import message_pb2 as m

ADK_PIN = "2.13.0"
AGENTS_PIN = "0.24.0"
PI_PACKAGE = "@mariozechner/pi-coding-agent"
PI_DIR = Path(__file__).resolve().parent / "pi"
PI_SCRIPT = "prepare.mjs"

APP = "ctxwarden-bench"
USER = "bench"
AGENT = "coder"
PEER_NAMES = ("adk", "agents")
RECENT = 200
"""The peers' "last N" restore variant."""
PI_SETTINGS = {"enabled": True, "reserveTokens": 16384, "keepRecentTokens": 20000}
"""pi's DEFAULT_COMPACTION_SETTINGS, equal to ctxwarden's default policy."""
SUMMARY = (
    "## Goal\nFix the flaky invoice and ledger code paths and keep the public API stable.\n"
    "## Constraints & Preferences\n- Python 3.11, pytest, ruff, mypy strict.\n"
    "## Progress\n### Done\n- Rounding fixed (half-even).\n- Race removed (row lock).\n"
    "### In Progress\n- End-to-end suite.\n### Blocked\n- (none)\n"
    "## Key Decisions\n- Validation extracted into a helper.\n"
    "## Next Steps\n1. Run the e2e suite.\n2. Ask about zero-amount webhooks.\n"
    "## Critical Context\n- server/app/core/billing.py holds the rounding rules.\n"
)


@dataclass(frozen=True)
class PeerConfig:
    appends: int
    """Single-session appends per side, measured in chunks that alternate between sides."""
    append_chunk: int
    sessions: int
    """Concurrent sessions per side."""
    session_messages: int
    """Appends per concurrent session."""
    history: int
    """Messages of the restore / compaction session."""
    restore_rounds: int
    prepare_rounds: int
    """Alternations ours / pi for the compaction preparation."""
    prepare_runs: int
    """Timed PrepareCompaction calls per round."""
    pi_runs: int
    """Timed prepareCompaction calls per round, inside one Node process."""

    @classmethod
    def make(cls, quick: bool) -> PeerConfig:
        if quick:
            return cls(60, 20, 100, 2, 10_000, 2, 1, 3, 10)
        return cls(300, 50, 100, 10, 10_000, 4, 2, 5, 15)


# -- converting our messages into each peer's format ------------------------------


def _texts(msg: m.Message) -> list[str]:
    return [b.text.text for b in msg.content if b.HasField("text")]


def _calls(msg: m.Message) -> list[m.ToolCall]:
    return [b.tool_call for b in msg.content if b.HasField("tool_call")]


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _data_url(image: m.ImageContent) -> str:
    return f"data:{image.mime_type};base64,{_b64(image.data)}"


def agents_items(msg: m.Message, index: int) -> list[dict[str, Any]]:
    """Responses-API input items of one message (an assistant turn may need several)."""
    if msg.role == m.ROLE_USER:
        if all(b.HasField("text") for b in msg.content):
            return [{"role": "user", "content": "\n".join(_texts(msg))}]
        parts: list[dict[str, Any]] = []
        for block in msg.content:
            if block.HasField("text"):
                parts.append({"type": "input_text", "text": block.text.text})
            elif block.HasField("image"):
                url = _data_url(block.image)
                parts.append({"type": "input_image", "image_url": url, "detail": "auto"})
        return [{"type": "message", "role": "user", "content": parts}]
    if msg.role == m.ROLE_TOOL_RESULT:
        output: str | list[dict[str, Any]] = "\n".join(_texts(msg))
        images = [b.image for b in msg.content if b.HasField("image")]
        if images:
            output = [{"type": "input_text", "text": output}] + [
                {"type": "input_image", "image_url": _data_url(i), "detail": "auto"} for i in images
            ]
        return [{"type": "function_call_output", "call_id": msg.tool_call_id, "output": output}]
    items: list[dict[str, Any]] = []
    for k, block in enumerate(msg.content):
        if block.HasField("thinking"):
            summary = [{"type": "summary_text", "text": block.thinking.thinking}]
            items.append({"type": "reasoning", "id": f"rs_{index:06d}_{k}", "summary": summary})
    texts = _texts(msg)
    if texts:
        items.append(
            {
                "type": "message",
                "id": f"msg_{index:06d}",
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": t, "annotations": []} for t in texts],
            }
        )
    for k, call in enumerate(_calls(msg)):
        items.append(
            {
                "type": "function_call",
                "id": f"fc_{index:06d}_{k}",
                "call_id": call.id,
                "name": call.name,
                "arguments": call.arguments_json,
                "status": "completed",
            }
        )
    return items


def _pi_block(block: m.ContentBlock) -> dict[str, Any]:
    if block.HasField("text"):
        return {"type": "text", "text": block.text.text}
    if block.HasField("image"):
        return {"type": "image", "data": _b64(block.image.data), "mimeType": block.image.mime_type}
    if block.HasField("thinking"):
        out = {"type": "thinking", "thinking": block.thinking.thinking}
        if block.thinking.signature:
            out["thinkingSignature"] = block.thinking.signature
        return out
    call = block.tool_call
    arguments = json.loads(call.arguments_json)
    return {"type": "toolCall", "id": call.id, "name": call.name, "arguments": arguments}


def pi_entries(messages: Sequence[m.Message], start_ms: int = 1_760_000_000_000) -> list[Any]:
    """pi ``SessionEntry`` objects (as JSON values) of ``messages``, one entry per message."""
    entries: list[Any] = []
    for i, msg in enumerate(messages):
        ms = start_ms + 1500 * (i + 1)
        content = [_pi_block(block) for block in msg.content]
        message: dict[str, Any]
        if msg.role == m.ROLE_USER:
            message = {"role": "user", "content": content}
        elif msg.role == m.ROLE_TOOL_RESULT:
            message = {
                "role": "toolResult",
                "toolCallId": msg.tool_call_id,
                "toolName": msg.tool_name,
                "content": content,
                "isError": msg.is_error,
            }
        else:
            u = msg.usage
            total = u.total_tokens or u.input_tokens + u.cache_read_tokens + u.output_tokens
            message = {
                "role": "assistant",
                "content": content,
                "api": "openai-responses",
                "provider": msg.provider or PROVIDER,
                "model": msg.model or MODEL,
                "usage": {
                    "input": u.input_tokens,
                    "output": u.output_tokens,
                    "cacheRead": u.cache_read_tokens,
                    "cacheWrite": u.cache_write_tokens,
                    "totalTokens": total,
                    "cost": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0, "total": 0},
                },
                "stopReason": "toolUse" if _calls(msg) else "stop",
            }
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ms / 1000))
        entries.append(
            {
                "type": "message",
                "id": f"{i + 1:08x}",
                "parentId": entries[-1]["id"] if entries else None,
                "timestamp": f"{stamp}.{ms % 1000:03d}Z",
                "message": {**message, "timestamp": ms},
            }
        )
    return entries


# -- the peers --------------------------------------------------------------------


class Skipped(Exception):
    """A peer cannot run here; the message says why."""


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def _install_hint() -> str:
    return "see bench/README.md, pip install -e '.[bench]'"


class AdkPeer:
    """google-adk ``DatabaseSessionService``: one ``append_event`` per message."""

    name = "adk"

    def __init__(self, url: str) -> None:
        version = _version("google-adk")
        if version is None:
            raise Skipped(f"google-adk not installed: {_install_hint()}")
        try:
            from google.adk.events import Event
            from google.adk.sessions import DatabaseSessionService
            from google.adk.sessions.base_session_service import GetSessionConfig
            from google.genai import types
        except ImportError as exc:
            raise Skipped(f"google-adk {version} does not import: {exc}") from exc
        self.version = version
        self.url = url
        self._event = Event
        self._service_class = DatabaseSessionService
        self._config = GetSessionConfig
        self._types = types
        self.service: Any = None

    @property
    def label(self) -> str:
        pin = "" if self.version == ADK_PIN else f" (not the pinned {ADK_PIN})"
        return f"google-adk {self.version}{pin} DatabaseSessionService"

    async def open(self) -> None:
        self.service = self._service_class(self.url)
        await self.service.prepare_tables()

    async def close(self) -> None:
        if self.service is not None:
            await self.service.close()
            self.service = None

    async def new_session(self, session_id: str) -> Any:
        return await self.service.create_session(
            app_name=APP, user_id=USER, session_id=session_id, state={"model": MODEL}
        )

    def prepare(self, msg: m.Message, timestamp: float | None = None) -> Any:
        """The ADK event carrying ``msg``'s content: text, images, thoughts, function calls
        and responses, plus the usage and model of assistant messages."""
        types = self._types
        parts: list[Any] = []
        for block in msg.content:
            if block.HasField("image"):
                blob = types.Blob(mime_type=block.image.mime_type, data=block.image.data)
                parts.append(types.Part(inline_data=blob))
            elif block.HasField("thinking"):
                parts.append(types.Part(text=block.thinking.thinking, thought=True))
            elif block.HasField("tool_call"):
                call = block.tool_call
                args = json.loads(call.arguments_json)
                parts.append(
                    types.Part(
                        function_call=types.FunctionCall(id=call.id, name=call.name, args=args)
                    )
                )
            elif msg.role != m.ROLE_TOOL_RESULT:
                parts.append(types.Part(text=block.text.text))
        if msg.role == m.ROLE_TOOL_RESULT:
            key = "error" if msg.is_error else "output"
            response = types.FunctionResponse(
                id=msg.tool_call_id, name=msg.tool_name, response={key: "\n".join(_texts(msg))}
            )
            parts.insert(0, types.Part(function_response=response))
            role, author = "user", AGENT
        elif msg.role == m.ROLE_USER:
            role, author = "user", "user"
        else:
            role, author = "model", AGENT
        extra: dict[str, Any] = {}
        if msg.HasField("usage"):
            u = msg.usage
            extra["usage_metadata"] = types.GenerateContentResponseUsageMetadata(
                prompt_token_count=u.input_tokens + u.cache_read_tokens,
                candidates_token_count=u.output_tokens,
                cached_content_token_count=u.cache_read_tokens or None,
                total_token_count=u.total_tokens or None,
            )
        if msg.model:
            extra["model_version"] = msg.model
        if timestamp is not None:
            extra["timestamp"] = timestamp
        return self._event(
            author=author,
            invocation_id=f"inv-{msg.role}",
            content=types.Content(role=role, parts=parts),
            **extra,
        )

    async def append(self, handle: Any, payload: Any) -> None:
        await self.service.append_event(handle, payload)

    async def load_history(self, session_id: str, messages: Sequence[m.Message]) -> str:
        """Setup only: write the events in one transaction with ADK's own row mapping.

        ``append_event`` has no batch form and 10,000 durable calls take minutes; the rows
        are those ``append_event`` inserts (``StorageEvent.from_event`` of the v1 schema).
        """
        from google.adk.sessions.schemas.v1 import StorageEvent

        session = await self.new_session(session_id)
        start = time.time()
        events = [self.prepare(msg, start + i / 1000) for i, msg in enumerate(messages)]
        async with self.service.database_session_factory() as sql:
            sql.add_all([StorageEvent.from_event(session, ev) for ev in events])
            await sql.commit()
        return f"{len(events)} events"

    async def read(self, session_id: str, last: int | None) -> int:
        config = None if last is None else self._config(num_recent_events=last)
        session = await self.service.get_session(
            app_name=APP, user_id=USER, session_id=session_id, config=config
        )
        assert session is not None, session_id
        return len(session.events)

    async def sqlite_settings(self) -> str:
        return await _sqlite_pragmas(self.service.db_engine)


class AgentsPeer:
    """openai-agents ``SQLAlchemySession``: one ``add_items([item])`` per message."""

    name = "agents"

    def __init__(self, url: str) -> None:
        version = _version("openai-agents")
        if version is None:
            raise Skipped(f"openai-agents not installed: {_install_hint()}")
        try:
            from agents.extensions.memory.sqlalchemy_session import SQLAlchemySession
        except ImportError as exc:
            raise Skipped(f"openai-agents {version} does not import: {exc}") from exc
        self.version = version
        self.url = url
        self._session_class = SQLAlchemySession
        self.engine: Any = None
        self.workaround = ""

    @property
    def label(self) -> str:
        pin = "" if self.version == AGENTS_PIN else f" (not the pinned {AGENTS_PIN})"
        return f"openai-agents {self.version}{pin} SQLAlchemySession"

    async def open(self) -> None:
        from sqlalchemy.ext.asyncio import create_async_engine

        self.engine = create_async_engine(self.url)
        probe = self._session_class("bench-probe", engine=self.engine, create_tables=True)
        try:
            await probe.get_items(limit=1)
        except Exception as exc:
            if "VARCHAR requires a length" not in str(exc):
                raise
            self.workaround = f"create_tables=True fails ({type(exc).__name__}: VARCHAR length)"
            await self._create_tables_with_lengths(probe)

    async def _create_tables_with_lengths(self, probe: Any) -> None:
        """Upstream bug: ``String()`` without a length cannot be a MySQL VARCHAR.

        Creates the SDK's own tables (its ``Table`` definitions, copied) with VARCHAR(255).
        """
        from sqlalchemy import MetaData, String

        schema = MetaData()
        for table in probe._metadata.sorted_tables:
            copy = table.to_metadata(schema)
            for column in copy.columns:
                if type(column.type) is String and column.type.length is None:
                    column.type = String(255)
        async with self.engine.begin() as conn:
            await conn.run_sync(schema.create_all)

    async def close(self) -> None:
        if self.engine is not None:
            await self.engine.dispose()
            self.engine = None

    async def new_session(self, session_id: str) -> Any:
        return self._session_class(session_id, engine=self.engine)

    def prepare(self, msg: m.Message, index: int = 0) -> list[dict[str, Any]]:
        return agents_items(msg, index)

    async def append(self, handle: Any, payload: Any) -> None:
        await handle.add_items(payload)

    async def load_history(self, session_id: str, messages: Sequence[m.Message]) -> str:
        """Setup: one ``add_items`` call with the whole history (one transaction)."""
        items = [item for i, msg in enumerate(messages) for item in agents_items(msg, i)]
        session = await self.new_session(session_id)
        await session.add_items(items)
        return f"{len(items)} items"

    async def read(self, session_id: str, last: int | None) -> int:
        session = self._session_class(session_id, engine=self.engine)
        return len(await session.get_items(limit=last))

    async def sqlite_settings(self) -> str:
        return await _sqlite_pragmas(self.engine)


Peer = AdkPeer | AgentsPeer


async def _sqlite_pragmas(engine: Any) -> str:
    """journal_mode / synchronous as the peer's own connections see them."""
    async with engine.connect() as conn:
        journal = (await conn.exec_driver_sql("PRAGMA journal_mode")).scalar()
        sync = (await conn.exec_driver_sql("PRAGMA synchronous")).scalar()
    names = {0: "OFF", 1: "NORMAL", 2: "FULL", 3: "EXTRA"}
    return f"journal_mode={journal}, synchronous={names.get(sync, sync)}"


def pi_status() -> str | None:
    """None when pi can run, else why not."""
    if shutil.which("node") is None:
        return "node not on PATH"
    manifest = PI_DIR / "node_modules" / PI_PACKAGE / "package.json"
    if not manifest.is_file():
        return f"{PI_PACKAGE} not installed: npm ci --prefix bench/pi"
    return None


def pi_version() -> str:
    manifest = PI_DIR / "node_modules" / PI_PACKAGE / "package.json"
    return str(json.loads(manifest.read_text(encoding="utf-8"))["version"])


def run_pi_prepare(entries_file: Path, runs: int) -> dict[str, Any]:
    """Run bench/pi/prepare.mjs: ``runs`` timed prepareCompaction calls inside Node."""
    node = shutil.which("node")
    assert node is not None
    proc = subprocess.run(
        [node, PI_SCRIPT, str(entries_file), str(runs)],
        cwd=PI_DIR,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"{PI_SCRIPT} failed ({proc.returncode}): {proc.stderr[-2000:]}")
    out: dict[str, Any] = json.loads(proc.stdout)
    return out


# -- ctxwarden ------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def scrape_restores(metrics_port: int) -> int | None:
    """``ctxwarden_session_restores_total`` of the cold server (None if unreadable)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5) as r:
            text = r.read().decode()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("ctxwarden_session_restores_total "):
            return int(float(line.split()[1]))
    return None


def describe_error(exc: BaseException) -> str:
    """One line: the type and the first line of the message (SQLAlchemy appends the SQL)."""
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0][:200] if lines else ''}"


def ns_since(t0: int) -> int:
    return time.perf_counter_ns() - t0


def decode_ms(message: Any) -> float:
    """Median time the client takes to decode ``message`` from the wire (part of our numbers)."""
    raw = message.SerializeToString()
    parse = type(message).FromString
    samples = []
    for _ in range(5):
        t0 = time.perf_counter_ns()
        parse(raw)
        samples.append(ns_since(t0))
    return statistics.median(samples) / 1e6


# -- one backend ------------------------------------------------------------------


@dataclass
class Sides:
    """Per-side sample lists of one metric, filled alternately."""

    latencies: dict[str, list[int]] = field(default_factory=dict)
    wall: dict[str, int] = field(default_factory=dict)

    def add(self, side: str, lat: Sequence[int], wall: int) -> None:
        self.latencies.setdefault(side, []).extend(lat)
        self.wall[side] = self.wall.get(side, 0) + wall


class BackendPeers:
    def __init__(
        self,
        backend: str,
        cfg: PeerConfig,
        seed: int,
        workdir: Path,
        our_url: str,
        peer_urls: dict[str, str],
        entries_file: Path | None,
        history: Sequence[m.Message],
    ) -> None:
        self.backend = backend
        self.cfg = cfg
        self.seed = seed
        self.workdir = workdir
        self.our_url = our_url
        self.peer_urls = peer_urls
        self.entries_file = entries_file
        self.history = history
        self.results: list[Result] = []
        self.peers: dict[str, Peer] = {}
        self.skipped: dict[str, str] = {}
        self.settings: dict[str, str] = {}
        self.server = ServerProcess(our_url, self._log_dir("main"))
        self.channel: grpc.Channel | None = None
        self.stub: pb_grpc.ContextServiceStub | None = None

    def _log_dir(self, name: str) -> Path:
        path = self.workdir / f"logs-{name}"
        path.mkdir(exist_ok=True)
        return path

    def conversation(self, salt: int) -> Conversation:
        return Conversation(self.seed * 1000 + salt)

    def ours(self) -> pb_grpc.ContextServiceStub:
        assert self.stub is not None
        return self.stub

    def add(self, result: Result) -> None:
        self.results.append(result)
        med = f"{result.median_ms:.3f} ms" if result.median_ms is not None else "-"
        log(f"{self.backend}: {result.metric}: median {med} {result.note}")

    def skip(self, metric: str, side: str, reason: str) -> None:
        self.add(
            Result(
                self.backend,
                f"peers.{metric}.{side}",
                0,
                note=f"skipped: {reason}",
                extra={"skipped": reason},
            )
        )

    def live(self) -> list[Peer]:
        return [p for p in self.peers.values() if p.name not in self.skipped]

    def drop(self, peer: Peer, exc: BaseException) -> None:
        """A peer failed mid-run: record why and leave it out of the remaining phases."""
        reason = f"failed: {describe_error(exc)}"
        log(f"{self.backend}: {peer.name}: {reason}")
        self.skipped[peer.name] = reason

    # -- driver --

    async def run(self) -> list[Result]:
        classes: tuple[type[AdkPeer], type[AgentsPeer]] = (AdkPeer, AgentsPeer)
        for cls in classes:
            name = cls.name
            try:
                peer = cls(self.peer_urls[name])
                await peer.open()
                self.peers[name] = peer
            except Skipped as exc:
                self.skipped[name] = str(exc)
            except Exception as exc:
                self.skipped[name] = f"failed to open: {describe_error(exc)}"
            if name in self.skipped:
                log(f"{self.backend}: {name} skipped: {self.skipped[name]}")
        log(f"{self.backend}: starting ctxwarden")
        self.server.start()
        self.channel = grpc.insecure_channel(self.server.target, options=CHANNEL_OPTIONS)
        self.stub = pb_grpc.ContextServiceStub(self.channel)
        try:
            await self.describe()
            await self.warm_up()
            await self.append_single()
            await self.append_concurrent()
            sessions = await self.build_histories()
            await self.prepare_compaction(sessions)
            await self.restore(sessions)
        except BaseException:
            with contextlib.suppress(Exception):
                sys.stderr.write(self.server.log_text()[-4000:])
            raise
        finally:
            if self.channel is not None:
                self.channel.close()
            self.server.stop()
            for peer in self.peers.values():
                with contextlib.suppress(Exception):
                    await peer.close()
        return self.results

    async def describe(self) -> None:
        """Durability settings of every side (the same MySQL server for all on mysql)."""
        if self.backend == "sqlite":
            self.settings["ours"] = "journal_mode=WAL, synchronous=FULL (set by the server)"
            for peer in self.live():
                self.settings[peer.name] = await peer.sqlite_settings()
        else:
            info = mysql_info(os.environ.get(MYSQL_ENV, DEFAULT_MYSQL_URL))
            shared = (
                f"{info['mysql_version']}, innodb_flush_log_at_trx_commit="
                f"{info['innodb_flush_log_at_trx_commit']}, sync_binlog={info['sync_binlog']}"
            )
            for side in ("ours", *self.peers):
                self.settings[side] = shared
        for side, text in self.settings.items():
            log(f"{self.backend}: {side}: {text}")

    async def warm_up(self) -> None:
        """Load the tokenizer, open connections and code paths on every side; not recorded."""
        log(f"{self.backend}: warm-up")
        msgs = self.conversation(0).alternating(10)
        stub = self.ours()
        sid = create_session(stub, "warmup")
        for msg in msgs:
            stub.AppendMessages(
                pb.AppendMessagesRequest(session_id=sid, messages=[msg]), timeout=TIMEOUT
            )
        stream_appends(stub, one_message_requests(sid, msgs), 1)
        stub.BuildModelInput(pb.BuildModelInputRequest(session_id=sid), timeout=TIMEOUT)
        for peer in self.live():
            try:
                handle = await peer.new_session(f"warmup-{secrets.token_hex(4)}")
                for i, msg in enumerate(msgs):
                    await peer.append(handle, self._payload(peer, msg, i))
            except Exception as exc:
                self.drop(peer, exc)

    @staticmethod
    def _payload(peer: Peer, msg: m.Message, index: int) -> Any:
        if isinstance(peer, AdkPeer):
            return peer.prepare(msg)
        return peer.prepare(msg, index)

    # -- appends --

    async def append_single(self) -> None:
        n, chunk = self.cfg.appends, self.cfg.append_chunk
        log(f"{self.backend}: append 1 msg/call x{n} per side, alternating every {chunk}")
        msgs = self.conversation(1).alternating(n)
        stub = self.ours()
        our_sid = create_session(stub, "append")
        requests = one_message_requests(our_sid, msgs)
        handles: dict[str, Any] = {}
        for peer in self.live():
            try:
                handles[peer.name] = await peer.new_session(f"append-{secrets.token_hex(4)}")
            except Exception as exc:
                self.drop(peer, exc)
        sides = Sides()
        order = ["ours", *handles]
        for r, start in enumerate(range(0, n, chunk)):
            turn = order[r % len(order) :] + order[: r % len(order)]
            for side in turn:
                if side != "ours" and side in self.skipped:
                    continue
                lat: list[int] = []
                t0 = time.perf_counter_ns()
                if side == "ours":
                    for i in range(start, min(start + chunk, n)):
                        s = time.perf_counter_ns()
                        resp = stub.AppendMessages(requests[i], timeout=TIMEOUT)
                        lat.append(ns_since(s))
                        assert resp.last_seq == i + 1, resp.last_seq
                else:
                    peer = self.peers[side]
                    try:
                        for i in range(start, min(start + chunk, n)):
                            payload = self._payload(peer, msgs[i], i)
                            s = time.perf_counter_ns()
                            await peer.append(handles[side], payload)
                            lat.append(ns_since(s))
                    except Exception as exc:
                        self.drop(peer, exc)
                        continue
                sides.add(side, lat, ns_since(t0))
        avg = sum(msg.ByteSize() for msg in msgs) / n / 1024
        note = f"1 session, 1 msg/call, {avg:.2f} KB"
        self._record_appends("append_1msg", sides, dict.fromkeys(("ours", *PEER_NAMES), note))

    def _record_appends(
        self,
        metric: str,
        sides: Sides,
        notes: dict[str, str],
        extras: dict[str, dict[str, Any]] | None = None,
    ) -> None:
        """One result per side: latency of each acknowledged append, acknowledged per second."""
        extras = extras or {}
        for side in ("ours", *PEER_NAMES):
            lat = sides.latencies.get(side)
            if side in self.skipped or not lat:
                why = self.skipped.get(side) or extras.get(side, {}).get("first_failure")
                self.skip(metric, side, why or "no samples")
                continue
            self.add(
                summarize(
                    self.backend,
                    f"peers.{metric}.{side}",
                    lat,
                    count=len(lat),
                    wall_ns=sides.wall[side],
                    unit="msgs/s",
                    note=f"{notes[side]}; {self.settings.get(side, '')}",
                    extra={"settings": self.settings.get(side, ""), **extras.get(side, {})},
                )
            )

    async def append_concurrent(self) -> None:
        k, n = self.cfg.sessions, self.cfg.session_messages
        log(f"{self.backend}: {k} concurrent sessions x {n} appends per side")
        msgs = self.conversation(2).alternating(n)
        sides = Sides()
        notes: dict[str, str] = {}
        extras: dict[str, dict[str, Any]] = {}
        lat, wall = self._ours_concurrent(k, msgs)
        sides.add("ours", lat, wall)
        notes["ours"] = f"{k} threads x 1 StreamMessages x {n} msgs, lock-step"
        for peer in self.live():
            try:
                handles = [
                    await peer.new_session(f"conc{i}-{secrets.token_hex(3)}") for i in range(k)
                ]
            except Exception as exc:
                self.drop(peer, exc)
                continue
            failures: list[str] = []
            t0 = time.perf_counter_ns()
            per_session = await asyncio.gather(
                *(self._appends(peer, h, msgs, failures) for h in handles)
            )
            wall = ns_since(t0)
            lat = [x for xs in per_session for x in xs]
            sides.add(peer.name, lat, wall)
            notes[peer.name] = f"asyncio.gather over {k} sessions x {n} msgs, 1 process"
            if failures:
                notes[peer.name] += f"; {len(failures)}/{k * n} appends FAILED ({failures[0]})"
                extras[peer.name] = {"failures": len(failures), "first_failure": failures[0]}
        self._record_appends("append_100_sessions", sides, notes, extras)

    async def _appends(
        self, peer: Peer, handle: Any, msgs: Sequence[m.Message], failures: list[str]
    ) -> list[int]:
        """Append ``msgs`` one by one; a failed append is counted, not retried."""
        out: list[int] = []
        for i, msg in enumerate(msgs):
            payload = self._payload(peer, msg, i)
            s = time.perf_counter_ns()
            try:
                await peer.append(handle, payload)
            except Exception as exc:
                failures.append(describe_error(exc))
                continue
            out.append(ns_since(s))
        return out

    def _ours_concurrent(self, k: int, msgs: Sequence[m.Message]) -> tuple[list[int], int]:
        stub = self.ours()
        work = [one_message_requests(create_session(stub, f"conc{i}"), msgs) for i in range(k)]
        barrier = threading.Barrier(k)
        outcomes: list[tuple[list[int], int, int] | BaseException | None] = [None] * k

        def worker(i: int) -> None:
            try:
                outcomes[i] = stream_appends(stub, work[i], 1, barrier)
            except BaseException as exc:
                outcomes[i] = exc
                barrier.abort()

        threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(k)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        lat: list[int] = []
        starts, ends = [], []
        for outcome in outcomes:
            if not isinstance(outcome, tuple):
                raise RuntimeError(f"a concurrent stream failed: {outcome!r}")
            lat.extend(outcome[0])
            starts.append(outcome[1])
            ends.append(outcome[2])
        return lat, max(ends) - min(starts)

    # -- the 10,000-message session --

    async def build_histories(self) -> dict[str, str]:
        """ours: a session without and one with a checkpoint (same transcript); peers: one."""
        size = len(self.history)
        log(f"{self.backend}: building {size}-message sessions on every side")
        stub = self.ours()
        sessions: dict[str, str] = {}
        tiny = self.conversation(4).alternating(2)
        sessions["ours_tiny"] = create_session(stub, "tiny")
        append_batched(stub, sessions["ours_tiny"], tiny)
        for kind in ("full", "checkpoint"):
            sid = create_session(stub, f"history-{kind}", tokenizer="heuristic")
            t0 = time.perf_counter_ns()
            append_batched(stub, sid, self.history)
            log(f"{self.backend}: ours {kind}: {size} msgs in {ns_since(t0) / 1e9:.1f} s")
            sessions[f"ours_{kind}"] = sid
        for peer in self.live():
            try:
                tiny_sid = f"tiny-{secrets.token_hex(4)}"
                handle = await peer.new_session(tiny_sid)
                for i, msg in enumerate(tiny):
                    await peer.append(handle, self._payload(peer, msg, i))
                sid = f"history-{secrets.token_hex(4)}"
                t0 = time.perf_counter_ns()
                what = await peer.load_history(sid, self.history)
                log(f"{self.backend}: {peer.name}: {what} in {ns_since(t0) / 1e9:.1f} s")
                stored = await peer.read(sid, None)
                sessions[f"{peer.name}_tiny"] = tiny_sid
                sessions[peer.name] = sid
                sessions[f"{peer.name}_stored"] = what
                if isinstance(peer, AdkPeer):
                    assert stored == size, (stored, size)
            except Exception as exc:
                self.drop(peer, exc)
        return sessions

    async def prepare_compaction(self, sessions: dict[str, str]) -> None:
        """PrepareCompaction (hot session, gRPC) vs pi's prepareCompaction (in Node)."""
        cfg = self.cfg
        stub = self.ours()
        req = pb.PrepareCompactionRequest(session_id=sessions["ours_checkpoint"])
        log(f"{self.backend}: PrepareCompaction vs pi, {cfg.prepare_rounds} x {cfg.prepare_runs}")
        for _ in range(2):
            plan = stub.PrepareCompaction(req, timeout=TIMEOUT)
        ours: list[int] = []
        pi: list[float] = []
        pi_prompt: list[float] = []
        pi_out: dict[str, Any] | None = None
        reason = pi_status()
        if reason is None and self.entries_file is None:
            reason = "no transcript"
        for _ in range(cfg.prepare_rounds):
            for _ in range(cfg.prepare_runs):
                s = time.perf_counter_ns()
                plan = stub.PrepareCompaction(req, timeout=TIMEOUT)
                ours.append(ns_since(s))
            if reason is None and self.entries_file is not None:
                try:
                    pi_out = run_pi_prepare(self.entries_file, cfg.pi_runs)
                    pi += pi_out["samplesMs"]
                    pi_prompt += pi_out["promptSamplesMs"]
                except Exception as exc:
                    reason = f"failed: {describe_error(exc)}"
                    log(f"{self.backend}: pi {reason}")
        prompt_chars = len(plan.history_prompt.user) + len(plan.turn_prefix_prompt.user)
        summarized = plan.summarized_to_seq - plan.summarized_from_seq + 1
        decode = decode_ms(plan)
        self.add(
            summarize(
                self.backend,
                "peers.prepare_compaction_10000.ours",
                ours,
                note=(
                    f"PrepareCompaction RPC, hot session; first_kept_seq {plan.first_kept_seq}, "
                    f"split {plan.split_turn}, {summarized} msgs summarised, "
                    f"{prompt_chars / 1e6:.1f} MB of prompts, client decode {decode:.1f} ms"
                ),
                extra={
                    "client_decode_ms": decode,
                    "first_kept_seq": plan.first_kept_seq,
                    "split_turn": plan.split_turn,
                    "tokens_before": plan.tokens_before,
                    "prompt_chars": prompt_chars,
                },
            )
        )
        if reason is not None or pi_out is None:
            why = reason or "no samples"
            self.skip("prepare_compaction_10000", "pi", why)
            self.skip("prepare_compaction_10000", "pi_prompt", why)
            return
        # pi's index is 0-based; our seq starts at 1.
        pi_seq = pi_out["firstKeptEntryIndex"] + 1
        same = (
            "same cut"
            if pi_seq == plan.first_kept_seq
            else f"cut differs: ours {plan.first_kept_seq}"
        )
        info = {k: v for k, v in pi_out.items() if k not in ("samplesMs", "promptSamplesMs")}
        split = pi_out["isSplitTurn"]
        common = f"pi {pi_out['version']} in Node; first kept {pi_seq} ({same}), split {split}"
        self.add(
            summarize(
                self.backend,
                "peers.prepare_compaction_10000.pi",
                [round(x * 1e6) for x in pi],
                note=f"prepareCompaction only; {common}",
                extra=info,
            )
        )
        self.add(
            summarize(
                self.backend,
                "peers.prepare_compaction_10000.pi_prompt",
                [round(x * 1e6) for x in pi_prompt],
                note=(
                    f"prepareCompaction + prompt text (convertToLlm + serializeConversation, "
                    f"{pi_out['promptChars'] / 1e6:.1f} MB)"
                ),
                extra=info,
            )
        )

    async def restore(self, sessions: dict[str, str]) -> None:
        """Cold reads: ours on a server holding one hot session; peers from a fresh instance."""
        stub = self.ours()
        plan = stub.PrepareCompaction(
            pb.PrepareCompactionRequest(session_id=sessions["ours_checkpoint"]), timeout=TIMEOUT
        )
        stub.CommitCompaction(
            pb.CommitCompactionRequest(
                session_id=sessions["ours_checkpoint"],
                plan_id=plan.plan_id,
                summary=SUMMARY,
                turn_prefix_summary=SUMMARY if plan.split_turn else "",
            ),
            timeout=TIMEOUT,
        )
        metrics_port = free_port()
        cold = ServerProcess(
            self.our_url,
            self._log_dir("cold"),
            ["--max-hot-sessions", "1", "--metrics-listen", f"127.0.0.1:{metrics_port}"],
        )
        rounds = self.cfg.restore_rounds
        log(f"{self.backend}: restore rounds x{rounds} (cold server: 1 hot session)")
        cold.start()
        samples: dict[str, list[int]] = {}
        counts: dict[str, int] = {}
        responses: dict[str, pb.ModelInput] = {}
        verified = True
        try:
            with grpc.insecure_channel(cold.target, options=CHANNEL_OPTIONS) as channel:
                cstub = pb_grpc.ContextServiceStub(channel)
                tiny = pb.BuildModelInputRequest(session_id=sessions["ours_tiny"])
                cstub.BuildModelInput(tiny, timeout=TIMEOUT)  # tokenizer, DB pool
                variants = ["ours_full", "ours_checkpoint"]
                for peer in self.live():
                    variants += [f"{peer.name}_full", f"{peer.name}_last{RECENT}"]
                for r in range(self.cfg.restore_rounds):
                    shift = r % len(variants)
                    for variant in variants[shift:] + variants[:shift]:
                        if variant.startswith("ours"):
                            ns, resp, ok = self._ours_cold(
                                cstub, tiny, sessions[variant], metrics_port
                            )
                            verified = verified and ok
                            n = len(resp.messages)
                            responses[variant] = resp
                        else:
                            name = variant.split("_")[0]
                            if name in self.skipped:
                                continue
                            last = None if variant.endswith("_full") else RECENT
                            try:
                                ns, n = await self._peer_cold(self.peers[name], sessions, last)
                            except Exception as exc:
                                self.drop(self.peers[name], exc)
                                continue
                        samples.setdefault(variant, []).append(ns)
                        counts[variant] = n
        finally:
            cold.stop()
        check = "restore verified by the server's restore counter" if verified else "UNVERIFIED"
        kept = counts.get("ours_checkpoint", 0) - 1
        cold_call = "BuildModelInput, session not in memory"
        ours_notes = {
            "ours_full": f"{cold_call}, no checkpoint: {counts.get('ours_full')} msgs; {check}",
            "ours_checkpoint": f"{cold_call}, checkpoint: summary + {kept} kept msgs; {check}",
        }
        for variant in ("ours_full", "ours_checkpoint"):
            resp = responses[variant]
            size, decode = resp.ByteSize() / 1e6, decode_ms(resp)
            self.add(
                summarize(
                    self.backend,
                    f"peers.restore_10000.{variant}",
                    samples[variant],
                    note=f"{ours_notes[variant]}; {size:.2f} MB, client decode {decode:.1f} ms",
                    extra={
                        "messages_returned": counts[variant],
                        "restore_verified": verified,
                        "response_bytes": resp.ByteSize(),
                        "client_decode_ms": decode,
                    },
                )
            )
        for name in PEER_NAMES:
            stored = sessions.get(f"{name}_stored", "")
            for suffix, what in (("full", "everything"), (f"last{RECENT}", f"last {RECENT}")):
                variant = f"{name}_{suffix}"
                if name in self.skipped or variant not in samples:
                    self.skip("restore_10000", variant, self.skipped.get(name, "no samples"))
                    continue
                call = (
                    "get_session" + ("" if suffix == "full" else f"(num_recent_events={RECENT})")
                    if name == "adk"
                    else "get_items(" + ("" if suffix == "full" else f"limit={RECENT}") + ")"
                )
                self.add(
                    summarize(
                        self.backend,
                        f"peers.restore_10000.{variant}",
                        samples[variant],
                        note=f"{call}, fresh instance: {counts[variant]} ({what} of {stored})",
                        extra={"returned": counts[variant], "stored": stored},
                    )
                )

    def _ours_cold(
        self,
        stub: pb_grpc.ContextServiceStub,
        tiny: pb.BuildModelInputRequest,
        session_id: str,
        metrics_port: int,
    ) -> tuple[int, pb.ModelInput, bool]:
        """Evict (touch the tiny session), then time the first BuildModelInput."""
        stub.BuildModelInput(tiny, timeout=TIMEOUT)
        before = scrape_restores(metrics_port)
        req = pb.BuildModelInputRequest(session_id=session_id)
        s = time.perf_counter_ns()
        resp = stub.BuildModelInput(req, timeout=TIMEOUT)
        ns = ns_since(s)
        after = scrape_restores(metrics_port)
        ok = before is not None and after == before + 1
        return ns, resp, ok

    async def _peer_cold(
        self, peer: Peer, sessions: dict[str, str], last: int | None
    ) -> tuple[int, int]:
        """A fresh service instance (new engine), warmed on the tiny session, then one read."""
        fresh: Peer = type(peer)(peer.url)
        await fresh.open()
        try:
            await fresh.read(sessions[f"{peer.name}_tiny"], None)
            s = time.perf_counter_ns()
            n = await fresh.read(sessions[peer.name], last)
            return ns_since(s), n
        finally:
            await fresh.close()


# -- databases and the run ----------------------------------------------------------


@contextlib.contextmanager
def peer_databases(backend: str, workdir: Path) -> Iterator[dict[str, str]]:
    """A fresh database per peer: SQLite files, or databases on the same MySQL server."""
    if backend == "sqlite":
        yield {name: f"sqlite+aiosqlite:///{workdir / f'{name}.db'}" for name in PEER_NAMES}
        return
    base = os.environ.get(MYSQL_ENV, DEFAULT_MYSQL_URL)
    made: list[str] = []
    urls: dict[str, str] = {}
    try:
        for name in PEER_NAMES:
            db = f"ctxw_peer_{name}_{os.getpid()}_{secrets.token_hex(3)}"
            url = make_mysql_database(base, db)
            made.append(db)
            async_url = make_url(url).set(drivername="mysql+aiomysql")
            urls[name] = async_url.render_as_string(hide_password=False)
        yield urls
    finally:
        for db in made:
            drop_mysql_database(base, db)


def run_backend(
    backend: str,
    cfg: PeerConfig,
    seed: int,
    history: Sequence[m.Message],
    entries_file: Path | None,
) -> tuple[list[Result], dict[str, Any], str | None]:
    """Results (partial ones too), details, and the error if the backend failed midway."""
    with tempfile.TemporaryDirectory(prefix=f"ctxw-peers-{backend}-") as tmp:
        workdir = Path(tmp)
        with (
            backend_database(backend, workdir) as (url, info),
            peer_databases(backend, workdir) as peer_urls,
        ):
            bench = BackendPeers(backend, cfg, seed, workdir, url, peer_urls, entries_file, history)
            error = None
            try:
                asyncio.run(bench.run())
            except Exception as exc:
                # Server logs end with the cause; keep the tail.
                error = f"{type(exc).__name__}: ...{str(exc)[-800:]}"
            workarounds = {
                name: peer.workaround
                for name, peer in bench.peers.items()
                if isinstance(peer, AgentsPeer) and peer.workaround
            }
            detail = {
                **{k: v for k, v in info.items() if k != "sqlite_path"},
                "settings": bench.settings,
                "peers": {name: peer.label for name, peer in bench.peers.items()},
                "skipped": bench.skipped,
                "workarounds": workarounds,
            }
            return bench.results, detail, error


COMPARISONS: tuple[tuple[str, str, str], ...] = (
    ("append, 1 msg/call, 1 session", "append_1msg.ours", "append_1msg.adk"),
    ("append, 1 msg/call, 1 session", "append_1msg.ours", "append_1msg.agents"),
    ("append, 100 sessions at once", "append_100_sessions.ours", "append_100_sessions.adk"),
    ("append, 100 sessions at once", "append_100_sessions.ours", "append_100_sessions.agents"),
    ("restore 10k, full history", "restore_10000.ours_full", "restore_10000.adk_full"),
    ("restore 10k, full history", "restore_10000.ours_full", "restore_10000.agents_full"),
    (
        "restore 10k, ours checkpoint vs full",
        "restore_10000.ours_checkpoint",
        "restore_10000.adk_full",
    ),
    (
        "restore 10k, ours checkpoint vs full",
        "restore_10000.ours_checkpoint",
        "restore_10000.agents_full",
    ),
    (
        f"restore 10k, ours checkpoint vs last {RECENT}",
        "restore_10000.ours_checkpoint",
        f"restore_10000.adk_last{RECENT}",
    ),
    (
        f"restore 10k, ours checkpoint vs last {RECENT}",
        "restore_10000.ours_checkpoint",
        f"restore_10000.agents_last{RECENT}",
    ),
    ("prepare compaction 10k", "prepare_compaction_10000.ours", "prepare_compaction_10000.pi"),
    (
        "prepare compaction 10k, + prompt text",
        "prepare_compaction_10000.ours",
        "prepare_compaction_10000.pi_prompt",
    ),
)


def _peer_of(metric: str) -> str:
    return metric.rsplit(".", 1)[1].split("_")[0]


def ratio_results(results: Sequence[Result]) -> list[Result]:
    """One row per (backend, comparison, peer): medians and throughputs, ours / theirs."""
    by_key = {(r.backend, r.metric): r for r in results}
    backends = [b for b in BACKENDS if any(r.backend == b for r in results)]
    out: list[Result] = []
    for backend in backends:
        for title, ours_metric, theirs_metric in COMPARISONS:
            ours = by_key.get((backend, f"peers.{ours_metric}"))
            theirs = by_key.get((backend, f"peers.{theirs_metric}"))
            if ours is None or theirs is None:
                continue
            peer = _peer_of(theirs_metric)
            metric = f"peers.{ours_metric}/{theirs_metric.rsplit('.', 1)[1]}"
            extra: dict[str, Any] = {
                "comparison": title,
                "peer": peer,
                "ours_metric": ours.metric,
                "theirs_metric": theirs.metric,
                "ours_median_ms": ours.median_ms,
                "theirs_median_ms": theirs.median_ms,
                "ours_throughput": ours.throughput,
                "theirs_throughput": theirs.throughput,
                "throughput_unit": ours.throughput_unit,
                "theirs_failures": theirs.extra.get("failures", 0),
            }
            skipped = ours.extra.get("skipped") or theirs.extra.get("skipped")
            if skipped:
                extra["skipped"] = skipped
                out.append(Result(backend, metric, 0, note=f"skipped: {skipped}", extra=extra))
                continue
            assert ours.median_ms is not None and theirs.median_ms is not None
            extra["ratio_median"] = ours.median_ms / theirs.median_ms
            note = f"median ours/theirs {extra['ratio_median']:.2f}x"
            if ours.throughput and theirs.throughput:
                extra["ratio_throughput"] = ours.throughput / theirs.throughput
                note += f", throughput ours/theirs {extra['ratio_throughput']:.2f}x"
            out.append(Result(backend, metric, min(ours.n, theirs.n), note=note, extra=extra))
    return out


def run_peers(backends: Sequence[str], quick: bool, seed: int) -> list[Result]:
    """Every side's results plus the ratio rows, for inclusion in the main bench table."""
    results, _, _ = _run(backends, PeerConfig.make(quick), seed)
    return results


def _run(
    backends: Sequence[str], cfg: PeerConfig, seed: int
) -> tuple[list[Result], dict[str, Any], dict[str, str]]:
    history = Conversation(seed * 1000 + 10_000).agent_history(cfg.history)
    results: list[Result] = []
    details: dict[str, Any] = {}
    failures: dict[str, str] = {}
    with tempfile.TemporaryDirectory(prefix="ctxw-peers-") as tmp:
        entries_file: Path | None = None
        if pi_status() is None:
            entries_file = Path(tmp) / "entries.json"
            doc = {"entries": pi_entries(history), "settings": PI_SETTINGS}
            entries_file.write_text(json.dumps(doc, ensure_ascii=False), encoding="utf-8")
        for backend in backends:
            t0 = time.monotonic()
            try:
                backend_results, details[backend], error = run_backend(
                    backend, cfg, seed, history, entries_file
                )
                results += backend_results
            except Exception as exc:  # e.g. the database server is unreachable
                error = f"{type(exc).__name__}: {str(exc)[-800:]}"
            if error is not None:
                log(f"{backend}: FAILED: {error}")
                failures[backend] = error
            log(f"{backend}: done in {time.monotonic() - t0:.1f} s")
    return results + ratio_results(results), details, failures


# -- output -----------------------------------------------------------------------


def _fmt(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def _tput(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f}"


def _table(header: Sequence[str], rows: Sequence[Sequence[str]], right: set[int]) -> str:
    table = [tuple(header), *(tuple(r) for r in rows)]
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    lines = []
    for j, row in enumerate(table):
        cells = [
            c.rjust(widths[i]) if i in right else c.ljust(widths[i]) for i, c in enumerate(row)
        ]
        lines.append("  ".join(cells).rstrip())
        if j == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


LEGEND = (
    "ratio = ours / theirs: below 1 ours takes less time (ms columns), "
    "above 1 ours acknowledges more durable appends per second (msg/s columns)"
)


def _comparison_row(r: Result) -> tuple[str, ...]:
    e = r.extra
    if "skipped" in e:
        return (r.backend, e["comparison"], e["peer"], *["-"] * 6, f"skipped: {e['skipped']}")
    tput_ratio = e.get("ratio_throughput")
    return (
        r.backend,
        e["comparison"],
        e["peer"],
        _fmt(e["ours_median_ms"]),
        _fmt(e["theirs_median_ms"]),
        f"{e['ratio_median']:.2f}",
        _tput(e["ours_throughput"]),
        _tput(e["theirs_throughput"]),
        "-" if tput_ratio is None else f"{tput_ratio:.2f}",
        f"{e['theirs_failures']} of theirs failed" if e.get("theirs_failures") else "",
    )


def render(results: Sequence[Result]) -> str:
    """The comparison table (medians, throughputs, ratios), then every side's own numbers."""
    header = (
        "backend",
        "comparison",
        "peer",
        "ours ms",
        "theirs ms",
        "ratio",
        "ours msg/s",
        "theirs msg/s",
        "ratio",
        "note",
    )
    rows = [_comparison_row(r) for r in results if "comparison" in r.extra]
    first = _table(header, rows, {3, 4, 5, 6, 7, 8})
    side_rows = []
    for r in results:
        if "comparison" in r.extra:
            continue
        tput = "-" if r.throughput is None else f"{r.throughput:,.0f} {r.throughput_unit}"
        side_rows.append(
            (
                r.backend,
                r.metric.removeprefix("peers."),
                str(r.n),
                _fmt(r.median_ms),
                _fmt(r.p99_ms),
                tput,
                r.note,
            )
        )
    second = _table(
        ("backend", "metric", "n", "median ms", "p99 ms", "throughput", "notes"),
        side_rows,
        {2, 3, 4, 5},
    )
    return f"{LEGEND}\n\n{first}\n\n{second}"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.peers", description=__doc__)
    parser.add_argument(
        "--backends",
        default=",".join(BACKENDS),
        help="comma-separated backends (default %(default)s); MySQL uses "
        f"${MYSQL_ENV} (default {DEFAULT_MYSQL_URL})",
    )
    parser.add_argument("--quick", action="store_true", help="fewer iterations (smoke run)")
    parser.add_argument("--json", type=Path, help="also write the results to this JSON file")
    parser.add_argument("--seed", type=int, default=1, help="workload seed (default 1)")
    args = parser.parse_args(argv)
    backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    unknown = [b for b in backends if b not in BACKENDS]
    if unknown or not backends:
        parser.error(f"unknown backend(s) {unknown}; choose from {', '.join(BACKENDS)}")
    cfg = PeerConfig.make(args.quick)
    started = time.time()
    results, details, failures = _run(backends, cfg, args.seed)
    elapsed = time.time() - started

    print()
    print(render(results) if results else "(no results)")
    for backend, detail in details.items():
        print(f"\n{backend}:")
        for name, label in detail["peers"].items():
            print(f"  {name} = {label}")
        if pi_status() is None:
            print(f"  pi = {PI_PACKAGE} {pi_version()} prepareCompaction")
        for side, text in detail["settings"].items():
            print(f"  {side}: {text}")
        for name, text in detail["workarounds"].items():
            print(f"  {name} workaround: {text}")
    for backend, err in failures.items():
        print(f"\n{backend}: FAILED: {err}")
    print(f"\n{'quick' if args.quick else 'full'} run, {elapsed:.0f} s total")

    if args.json is not None:
        doc = {
            "meta": {
                **run_meta(started, args.quick, args.seed, asdict(cfg)),
                "versions": {
                    "google-adk": _version("google-adk"),
                    "openai-agents": _version("openai-agents"),
                    PI_PACKAGE: pi_version() if pi_status() is None else None,
                },
                "backends": details,
            },
            "results": [asdict(r) for r in results],
            "failures": failures,
        }
        args.json.write_text(json.dumps(doc, indent=2) + "\n")
        log(f"wrote {args.json}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
