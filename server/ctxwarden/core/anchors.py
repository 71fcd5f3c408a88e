"""Anchors: the concrete facts a compaction must not lose without saying so.

A compaction replaces a span of messages by a summary. The anchors of that
span are what an agent typically needs later and a summariser typically
drops: file paths, URLs, identifiers (commit SHAs, tickets and issues, error
codes, HTTP 4xx/5xx statuses, UUIDs), numbers with units, the user's
constraints, open tasks and the tool calls made (with their key argument).
``core.anchor_search`` says where each one survives.

The extractor is deterministic and purely lexical (regular expressions and a
few word lists, documented below and in the README's "Loss reports"):

* Sources. The user's and the assistant's text blocks, each tool call (its
  name and key argument; paths, URLs and identifiers in that argument), and
  the text of tool results that are errors (``is_error``). Other tool results
  are not scanned: what matters in them is what the assistant says about
  them, and a raw listing or log would drown the report. Thinking blocks,
  history-only and failed assistant messages are never shown to the model
  again, so they hold no anchors. Constraints come from user messages only.
* Matching. Paths, URLs, identifiers and quantities are compared by a
  normalised key (``30 seconds`` and ``30s`` are the same quantity, ``./a.py``
  and ``a.py`` the same path, a short SHA matches the full one); a relative
  path also survives as the tail of a longer one (``a.py`` in ``src/a.py``).
  Constraints and open tasks are sentences: one survives where a single
  sentence of the target holds at least ``SENTENCE_COVERAGE`` of its words
  (case, punctuation and word order do not matter) and agrees with it on
  negation (``core.anchor_search.NEGATIONS``). Tool calls survive where
  their key argument (or, without one, their name) appears as a whole token.
"""

from __future__ import annotations

import enum
import json
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from ctxwarden.core.anchor_sentences import (
    MAX_ANCHOR_CHARS,
    constraints,
    cut,
    open_tasks,
    question,
    sentence_key,
)
from ctxwarden.core.messages import ContentBlock, ContentKind, Message, Role
from ctxwarden.core.stepwise import Steps, finish

ANCHOR_EVERY = 16
"""Messages read between two steps of ``span_anchor_steps`` (each costs a few
regular-expression scans of its text)."""
SENTENCE_COVERAGE = 0.8
"""Share of a constraint's or open task's words one target sentence must hold."""


class AnchorCategory(enum.IntEnum):
    """Stored as these integers (and the same numbers on the wire)."""

    FILE_PATH = 1
    URL = 2
    IDENTIFIER = 3
    QUANTITY = 4
    CONSTRAINT = 5
    OPEN_TASK = 6
    TOOL_CALL = 7

    @property
    def label(self) -> str:
        """``file_path``, ``open_task``, ...: the name in reports, metrics and options."""
        return self.name.lower()


CATEGORIES = tuple(AnchorCategory)


def category_named(name: str) -> AnchorCategory | None:
    """The category whose ``label`` (or name) is ``name``, case-insensitive."""
    try:
        return AnchorCategory[name.strip().upper().replace("-", "_")]
    except KeyError:
        return None


@dataclass(frozen=True, slots=True)
class Anchor:
    category: AnchorCategory
    text: str
    """As found (cut to MAX_ANCHOR_CHARS)."""
    key: str
    """Normalised: two anchors with the same category and key are one."""
    seq: int = 0
    """The first message of the span that holds it (0: not from a message)."""


# -- structured anchors: URLs, paths, identifiers, quantities ---------------------------


def word_set(words: str) -> frozenset[str]:
    """The whitespace-separated words of ``words``."""
    return frozenset(words.split())


_URL = re.compile(r"\b(?:https?|ftp|wss?|ssh|git|file)://[^\s<>\"'`\[\](){}|\\^]+")
_URL_TAIL = ".,;:!?*_~"
_PATH_CANDIDATE = re.compile(
    r"(?<![\w/.~@+\-:\\])(?:~|\.{1,2})?/?[A-Za-z0-9_.+@\-]+(?:/[A-Za-z0-9_.+@\-]*)*"
)
KNOWN_EXTENSIONS = word_set(
    """py pyi pyx ipynb js mjs cjs jsx ts tsx mts go rs java kt kts scala c h cc cpp cxx hpp hh
    cs fs rb php swift m mm lua pl r jl dart ex exs erl hs clj sh bash zsh fish ps1 bat sql
    proto graphql gql md rst txt adoc tex json jsonl yaml yml toml ini cfg conf env lock xml
    html htm css scss sass less vue svelte csv tsv log tf tfvars hcl gradle cmake mk dockerfile
    png jpg jpeg gif svg pdf zip gz tgz tar whl jar so dll db sqlite parquet patch diff"""
)
"""A bare file name (no slash) is a path only with one of these extensions."""
SPECIAL_FILE_NAMES = word_set(
    "Dockerfile Makefile Justfile Procfile Gemfile Rakefile Vagrantfile Jenkinsfile"
)
DOTFILES = word_set(".env .gitignore .dockerignore .editorconfig .bashrc .zshrc .profile .npmrc")
NOT_PATHS = word_set("node.js next.js vue.js nuxt.js react.js express.js three.js d3.js chart.js")
"""Product names that look like file names."""

_UUID = re.compile(
    r"(?<![\w-])[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}(?![\w-])"
)
_HTTP = re.compile(r"\bHTTP(?:/\d(?:\.\d)?)?[ \t]+([45]\d\d)\b")
_TICKET = re.compile(r"(?<![\w-])([A-Z][A-Z0-9]{1,9})-(\d{1,7})(?![\w-])")
NOT_TICKETS = word_set("UTF SHA ISO GPT AES RSA TLS SSL MD CP ES IPV HTTP TCP UDP")
"""Prefixes of standards and versions (UTF-8, SHA-256, ISO-8601) that are no ticket."""
_ISSUE = re.compile(r"(?<![\w&#/])#(\d{1,7})(?![\w-])")
_ERROR_CODE = re.compile(r"(?<![\w-])[A-Z]{1,3}\d{3,5}(?![\w-])")
_SHA = re.compile(r"(?<![\w-])[0-9a-f]{7,40}(?![\w-])")

_UNITS: dict[str, str] = {}
for _canon, _names in (
    ("ns", "ns nanosecond nanoseconds"),
    ("us", "us µs μs microsecond microseconds"),
    ("ms", "ms msec millisecond milliseconds"),
    ("s", "s sec secs second seconds"),
    ("min", "min mins minute minutes"),
    ("h", "h hr hrs hour hours"),
    ("d", "day days"),
    ("w", "week weeks"),
    ("B", "B byte bytes"),
    ("KB", "KB kB"),
    ("MB", "MB"),
    ("GB", "GB"),
    ("TB", "TB"),
    ("KiB", "KiB"),
    ("MiB", "MiB"),
    ("GiB", "GiB"),
    ("TiB", "TiB"),
    ("%", "%"),
    ("tokens", "token tokens"),
    ("rps", "rps req/s"),
    ("qps", "qps"),
    ("Hz", "Hz"),
    ("kHz", "kHz"),
    ("MHz", "MHz"),
    ("GHz", "GHz"),
    ("px", "px"),
):
    for _name in _names.split():
        _UNITS[_name] = _canon
_UNIT_ALTERNATION = "|".join(re.escape(u) for u in sorted(_UNITS, key=len, reverse=True))
_QUANTITY = re.compile(
    r"(?<![\w.,\-#/])(\d{1,3}(?:,\d{3})+|\d+)(\.\d+)?[ \t]?(" + _UNIT_ALTERNATION + r")(?![\w%/])"
)


def _path_key(candidate: str) -> str | None:
    """The path's key, or None when ``candidate`` is no path."""
    path = candidate.rstrip(".")
    if not path or path in (".", "..", "~"):
        return None
    if path.startswith(("./", "../", "~/")):
        rest = path.split("/", 1)[1]
        return path.removeprefix("./") if rest.strip("/") else None
    if path.startswith("/"):
        parts = [p for p in path.split("/") if p]
        return path if len(parts) >= 2 and "//" not in path else None
    if "/" in path:
        parts = path.split("/")
        if any(not p for p in parts[:-1]):
            return None
        last = parts[-1]
        if not last:
            return path  # a directory: src/lib/
        return path if _extension(last) is not None else None
    if path.lower() in NOT_PATHS:
        return None
    if path in SPECIAL_FILE_NAMES or path in DOTFILES:
        return path
    ext = _extension(path)
    return path if ext is not None and ext.lower() in KNOWN_EXTENSIONS else None


def _extension(name: str) -> str | None:
    stem, dot, ext = name.rpartition(".")
    if not dot or not stem.strip(".") or not ext or not ext[0].isalpha() or len(ext) > 10:
        return None
    return ext if ext.isalnum() else None


def _number_key(whole: str, fraction: str | None) -> str:
    number = whole.replace(",", "")
    if fraction and fraction.strip(".0"):
        number += fraction.rstrip("0")
    return number


def structured(text: str) -> Iterator[tuple[AnchorCategory, str, str]]:
    """(category, text, key) of the URLs, paths, identifiers and quantities of
    ``text``, by position. Each character belongs to one anchor at most (a URL's
    path is no file path, a path's digits no quantity): URLs are found first,
    then paths, identifiers and quantities."""
    found: list[tuple[int, AnchorCategory, str, str]] = []
    claimed = bytearray(len(text))

    def claim(m: re.Match[str]) -> bool:
        if any(claimed[m.start() : m.end()]):
            return False
        claimed[m.start() : m.end()] = b"\x01" * (m.end() - m.start())
        return True

    for m in _URL.finditer(text):
        url = m.group().rstrip(_URL_TAIL)
        if url.split("://", 1)[1] and claim(m):
            found.append((m.start(), AnchorCategory.URL, cut(url), cut(url).rstrip("/")))
    for m in _PATH_CANDIDATE.finditer(text):
        key = _path_key(m.group())
        if key is not None and claim(m):
            found.append((m.start(), AnchorCategory.FILE_PATH, cut(m.group().rstrip(".")), key))
    for kind, pattern in _IDENTIFIERS:
        for m in pattern.finditer(text):
            key = _identifier_key(kind, m)
            if key is not None and claim(m):
                found.append((m.start(), AnchorCategory.IDENTIFIER, m.group(), key))
    for m in _QUANTITY.finditer(text):
        if claim(m):
            key = _number_key(m.group(1), m.group(2)) + _UNITS[m.group(3)]
            found.append((m.start(), AnchorCategory.QUANTITY, m.group(), key))
    found.sort(key=lambda f: f[0])
    for _, category, shown, key in found:
        yield category, shown, key


_IDENTIFIERS = (
    ("uuid", _UUID),
    ("http", _HTTP),
    ("ticket", _TICKET),
    ("issue", _ISSUE),
    ("code", _ERROR_CODE),
    ("sha", _SHA),
)


def _identifier_key(kind: str, m: re.Match[str]) -> str | None:
    if kind == "uuid":
        return "uuid:" + m.group().lower()
    if kind == "http":
        return "http:" + m.group(1)
    if kind == "ticket":
        return None if m.group(1) in NOT_TICKETS else "ticket:" + m.group()
    if kind == "issue":
        return "issue:#" + m.group(1)
    if kind == "code":
        return "code:" + m.group()
    sha = m.group()
    if sha.isdigit() or not any(c.isdigit() for c in sha):
        return None  # a number, or a word of the letters a-f
    return "sha:" + sha


# -- tool calls -----------------------------------------------------------------------

KEY_ARGUMENTS = (
    "path",
    "file_path",
    "filepath",
    "file",
    "filename",
    "url",
    "uri",
    "command",
    "cmd",
    "query",
    "pattern",
    "id",
    "name",
)
"""The argument shown with a tool call's name: the first of these holding a string,
else the first argument holding a string of at most MAX_ANCHOR_CHARS characters."""


TOOL_KEY_SEP = "\x1f"
"""A tool call's key: its name, this separator, its key argument's value ("" without one)."""


def key_argument(arguments_json: str) -> tuple[str, str] | None:
    """(name, value) of a tool call's key argument, if it has one."""
    try:
        args = json.loads(arguments_json) if arguments_json else {}
    except (ValueError, RecursionError):
        return None
    if not isinstance(args, dict):
        return None
    for name in KEY_ARGUMENTS:
        value = args.get(name)
        if isinstance(value, str) and value.strip():
            return name, cut(" ".join(value.split()))
    for name, value in args.items():
        if isinstance(value, str) and value.strip() and len(value) <= MAX_ANCHOR_CHARS:
            return str(name), " ".join(value.split())
    return None


def tool_call_anchor(tool_name: str, arguments_json: str, seq: int) -> Anchor:
    arg = key_argument(arguments_json)
    if arg is None:
        return Anchor(AnchorCategory.TOOL_CALL, cut(tool_name), tool_name + TOOL_KEY_SEP, seq)
    name, value = arg
    text = cut(f"{tool_name} {name}={value}")
    return Anchor(AnchorCategory.TOOL_CALL, text, f"{tool_name}{TOOL_KEY_SEP}{value}", seq)


# -- a span's anchors -----------------------------------------------------------------


def message_anchors(m: Message) -> Iterator[Anchor]:
    """The anchors of one message, by the rules of the module docstring
    (unanswered questions need the messages after it: see ``span_anchors``)."""
    if m.history_only or m.failed:
        return
    if m.role is Role.TOOL_RESULT:
        if m.is_error:
            for category, text, key in structured(m.text):
                yield Anchor(category, text, key, m.seq)
        return
    for block in m.content:
        if block.kind is ContentKind.TEXT and block.text:
            yield from _text_anchors(block.text, m.role, m.seq)
        elif block.kind is ContentKind.TOOL_CALL:
            call = tool_call_anchor(block.tool_name, block.arguments_json, m.seq)
            yield call
            arg = key_argument(block.arguments_json)
            if arg is not None:
                for category, text, key in structured(arg[1]):
                    if category is not AnchorCategory.QUANTITY:
                        yield Anchor(category, text, key, m.seq)


def _text_anchors(text: str, role: Role, seq: int) -> Iterator[Anchor]:
    for category, shown, key in structured(text):
        yield Anchor(category, shown, key, seq)
    if role is Role.USER:
        for s in constraints(text):
            yield Anchor(AnchorCategory.CONSTRAINT, s, sentence_key(s), seq)
    for t in open_tasks(text):
        yield Anchor(AnchorCategory.OPEN_TASK, t, sentence_key(t), seq)


def span_anchors(messages: Iterable[Message]) -> tuple[Anchor, ...]:
    """Every anchor of ``messages`` (in seq order) once, in order of first
    appearance; a user question no assistant text answers later in the span
    is an open task."""
    return finish(span_anchor_steps(messages))


def span_anchor_steps(messages: Iterable[Message]) -> Steps[tuple[Anchor, ...]]:
    """``span_anchors`` in steps (core.stepwise)."""
    seen: set[tuple[AnchorCategory, str]] = set()
    out: list[Anchor] = []
    pending: list[Anchor] = []

    def add(a: Anchor) -> None:
        if (a.category, a.key) not in seen:
            seen.add((a.category, a.key))
            out.append(a)

    for i, m in enumerate(messages):
        if i % ANCHOR_EVERY == ANCHOR_EVERY - 1:
            yield
        for a in message_anchors(m):
            add(a)
        if m.history_only or m.failed:
            continue
        if m.role is Role.ASSISTANT and m.text.strip():
            pending.clear()
        elif m.role is Role.USER:
            q = question(m.text)
            if q is not None:
                pending.append(Anchor(AnchorCategory.OPEN_TASK, q, sentence_key(q), m.seq))
    for a in pending:
        add(a)
    return tuple(out)


def anchors_of_text(text: str, role: Role = Role.USER) -> tuple[Anchor, ...]:
    """The anchors of a free text, as if a message of ``role`` held it."""
    return span_anchors([Message(role=role, content=(ContentBlock.of_text(text),))])
