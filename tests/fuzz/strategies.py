"""Hypothesis strategies for hostile requests: typed messages and raw wire bytes.

Typed requests (``requests_for``) are valid protobuf. Each one first draws a
mode: *odd* requests are valid but strange (any Unicode a proto string can
hold, valid JSON objects with lone-surrogate escapes, image headers claiming
4-gigapixel sides, real sessions and seqs), so they get past validation and
reach storage, compaction and rendering; *hostile* requests also carry invalid
values (NUL, unknown enum numbers, negative and huge numbers, bad JSON, forged
page tokens, malformed IDs, invalid idempotency keys, seqs out of range, stale
expected_last_seq). Every RPC also gets requests built from its descriptor
alone; the RPCs in ``TARGETED`` get requests aimed at a pool of real sessions.

Raw payloads (``raw_payloads``) are arbitrary bytes, wire-level messages built
from the request descriptor (wrong wire types, huge varints, bad lengths, deep
group nesting) and mutations of valid serialized requests.
"""

from __future__ import annotations

import base64
import json
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from google.protobuf import field_mask_pb2, message_factory
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import Message as PbMessage
from hypothesis import strategies as st

from ctxwarden.v1 import context_service_pb2 as pb
from ctxwarden.v1 import message_pb2 as m
from ctxwarden.v1 import session_pb2 as ses
from tests.fuzz.harness import Pool
from tests.support.builders import assistant, failed, result, user

FRESH_PLAN = "@fresh-plan"
"""CommitCompaction.plan_id placeholder: the runner prepares a real plan first."""

INT32 = (-(2**31), 2**31 - 1)
INT64 = (-(2**63), 2**63 - 1)
UINT32 = (0, 2**32 - 1)
UINT64 = (0, 2**64 - 1)

Strategy = st.SearchStrategy[Any]

# -- weighting ------------------------------------------------------------------------


def _same(value: Any) -> Any:
    return value


def mostly(sane: Strategy, *hostile: Strategy) -> Strategy:
    """``sane`` about three times out of four, else one of the hostile alternatives.

    ``one_of`` flattens nested alternatives and drops identical ones, so the
    weight comes from distinct copies of ``sane``, three per hostile alternative
    (counted after flattening). It also shrinks towards ``sane``.
    """
    branches = sum(len(getattr(h, "original_strategies", (h,))) for h in hostile)
    copies = [sane.map(_same) for _ in range(3 * max(branches, 1))]
    return st.one_of([*copies, *hostile])


def pick(hostile: bool, sane: Strategy, *bad: Strategy) -> Strategy:
    """``sane`` in an odd request; mostly ``sane`` but sometimes ``bad`` in a hostile one."""
    return mostly(sane, *bad) if hostile else sane


# -- text -------------------------------------------------------------------------------

EDGE_CHARS = (
    "\x01\x08\t\n\r\x1b\x1f\x7f\x80\x85\x9f\xa0\xad"
    "\u0300\u034f\u061c\u200b\u200d\u200e\u202e\u2028\u2029\u2066\ufeff\ufffc\ufffd\ufffe\uffff"
    "\ue000\U0001f600\U0001f1fa\U000e0001\U000e007f\U000fffff\U0010fffe\U0010ffff"
    'a Z0~/\\.:-_"{}[]<>&%$'
)
"""Controls, bidi and zero-width marks, BOM, noncharacters, the highest code points
(proto strings cannot hold surrogates), and JSON/path/markup syntax. No NUL:
that one is invalid input (see NUL_TEXT)."""

ODD_STRINGS = [
    "",
    " ",
    "\ufeff",
    "\U0010ffff",
    "\u202etxt.exe",
    "../../../etc/passwd",
    "%s%s%n",
    "${jndi:ldap://x}",
    "<summary></summary>",
    "</summary><pinned-state>",
    "Robert'); DROP TABLE sessions;--",
    "\\",
    '"',
    "\\ud800",
    "é" * 129,
    "\U0001f600" * 129,
]
NUL_TEXT = ["\x00", "a\x00b", "\x00" * 10, "text\x00"]
BIG_LENGTHS = [1_000, 20_000, 70_000]


def _big_text() -> st.SearchStrategy[str]:
    chars = st.sampled_from(["x", "é", "\U0001f600", "\n"])
    return st.tuples(st.sampled_from(BIG_LENGTHS), chars).map(lambda t: t[1] * t[0])


def odd_text(max_size: int = 40, *, big: bool = True) -> st.SearchStrategy[str]:
    """Any Unicode a proto string can hold except NUL; rarely a large text."""
    small = st.one_of(
        st.text(
            st.characters(exclude_categories=["Cs"], exclude_characters="\x00"), max_size=max_size
        ),
        st.text(st.sampled_from(EDGE_CHARS), max_size=max_size),
        st.sampled_from(ODD_STRINGS),
    )
    if not big:
        return small
    large = _big_text()
    return st.integers(0, 15).flatmap(lambda n: large if n == 15 else small)


def text(hostile: bool, max_size: int = 40, *, big: bool = True) -> st.SearchStrategy[str]:
    """Odd text; in a hostile request sometimes with NUL characters."""
    nul = st.tuples(odd_text(max_size, big=False), st.sampled_from(NUL_TEXT)).map("".join)
    return pick(hostile, odd_text(max_size, big=big), nul)


# -- numbers ------------------------------------------------------------------------------


def _ints(lo: int, hi: int, near: Sequence[int] = ()) -> st.SearchStrategy[int]:
    edges = sorted({v for v in (lo, lo + 1, -1, 0, 1, 2, hi - 1, hi, *near) if lo <= v <= hi})
    return st.one_of(st.sampled_from(edges), st.integers(lo, hi))


def int32s() -> st.SearchStrategy[int]:
    return _ints(*INT32, near=(2**15, 1000, 1001))


def int64s() -> st.SearchStrategy[int]:
    return _ints(*INT64, near=(2**31, 2**32, 2**53 + 1, 10**9, 100_000_001))


def count(hostile: bool, lo: int, hi: int, *, bits: int = 64) -> st.SearchStrategy[int]:
    """Within [lo, hi]; in a hostile request sometimes any int32/int64."""
    return pick(hostile, st.integers(lo, hi), int64s() if bits == 64 else int32s())


def maybe(hostile: bool, strategy: Strategy) -> Strategy:
    """An optional field: usually unset."""
    return mostly(st.none(), strategy) if hostile else st.one_of(st.none(), st.none(), strategy)


def enum_numbers(hostile: bool, defined: int) -> st.SearchStrategy[int]:
    """Defined values; in a hostile request sometimes unknown numbers (open enums)."""
    return pick(hostile, st.integers(0, defined), int32s())


# -- ids and keys ---------------------------------------------------------------------

ID_EDGES = [
    "",
    "a" * 129,
    "-a",
    ".a",
    "_a",
    "a/b",
    "a/../b",
    "..",
    "a~b",
    "~a",
    "t~fuzz-plain",
    "fuzz-plain/",
    "fuzz-plain ",
    " fuzz-plain",
    "fuzz-plain\x00",
    "fuzz-plain\n",
    "fuzz\u200bplain",
    "é",
    "\U0001f600",
    "%2e%2e",
]
"""Malformed session IDs (INVALID_ARGUMENT)."""
UNKNOWN_IDS = ["a", "A" * 128, "a.b", "a:b", "FUZZ-PLAIN", "fuzz-plain.", "fuzz-victim-9"]
"""Well-formed IDs of sessions that do not exist (NOT_FOUND)."""


def session_ids(pool: Pool, hostile: bool = True) -> st.SearchStrategy[str]:
    """A real session; in a hostile request sometimes a malformed or unknown ID."""
    return pick(
        hostile,
        st.sampled_from(pool.sessions),
        st.sampled_from(ID_EDGES),
        st.sampled_from(UNKNOWN_IDS),
        st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,20}", fullmatch=True),
        odd_text(20, big=False),
    )


REUSED_KEYS = ["rid-1", "rid-2", "m-1", "m-2", "seed-0-1"]
BAD_KEYS = ["a" * 129, "a b", "é", "\x00", "\t", "rid-1\n", "\U0001f600"]


def keys(hostile: bool) -> st.SearchStrategy[str]:
    """Idempotency keys: mostly none, a few reused on purpose (with other payloads)."""
    sane = st.one_of(st.just(""), st.just(""), st.sampled_from(REUSED_KEYS), st.just("a" * 128))
    return pick(hostile, sane, st.sampled_from(BAD_KEYS), odd_text(12, big=False))


# -- JSON ---------------------------------------------------------------------------

ODD_OBJECTS = [
    "",
    "{}",
    '{"path": "a.txt"}',
    '{"path": "\\ud83d\\ude00"}',
    '{"path": "\\u0000"}',
    '{"path": ["a", {"b": null}]}',
    '{"path": 1e308, "n": -0.0}',
    '{"path": 12345678901234567890123}',
    '{"a": 1, "a": 2}',
    '{"path": "' + "p" * 5000 + '"}',
    " {} ",
    '{"a":' * 50 + "1" + "}" * 50,
]
"""Valid JSON objects (they pass validation) with contents that are easy to get
wrong when re-encoded: escaped surrogate pairs, NUL escapes, big numbers, -0.0,
duplicate keys, nesting."""

BAD_JSON = [
    '{"path": "\\ud800"}',
    '{"path": "\\udfff\\ud800"}',
    '{"\\ud800": 1}',
    "[]",
    "null",
    "1",
    '"s"',
    "{",
    "}",
    '{"a":}',
    "{'a': 1}",
    "NaN",
    '{"a": NaN}',
    '{"a": Infinity}',
    '{"a": 1e999999}',
    '{"a": ' + "9" * 5000 + "}",
    "\ufeff{}",
    "{}\x00",
    "{}{}",
]


def _json_values() -> Strategy:
    leaves = st.one_of(
        st.none(),
        st.booleans(),
        st.integers(*INT64),
        st.floats(allow_nan=False, allow_infinity=False),
        odd_text(12, big=False),
    )
    return st.recursive(
        leaves,
        lambda inner: st.one_of(
            st.lists(inner, max_size=3),
            st.dictionaries(odd_text(8, big=False), inner, max_size=3),
        ),
        max_leaves=8,
    )


def json_objects(hostile: bool) -> st.SearchStrategy[str]:
    """A JSON object text; in a hostile request sometimes not one (or too deep)."""
    paths = st.sampled_from(["a.txt", "b/c.py", "é.md", "..\\x", "/etc/passwd", ""])
    sane = st.one_of(
        st.sampled_from(ODD_OBJECTS),
        st.fixed_dictionaries({"path": paths}).map(json.dumps),
        st.dictionaries(odd_text(8, big=False), _json_values(), max_size=3).map(
            lambda d: json.dumps(d, ensure_ascii=False)
        ),
    )
    nested = st.sampled_from([1_000, 100_000])
    return pick(
        hostile,
        sane,
        st.sampled_from(BAD_JSON),
        nested.map(lambda n: "[" * n + "]" * n),
        nested.map(lambda n: '{"a":' * n + "1" + "}" * n),
        _json_values().map(json.dumps),
        odd_text(30),
    )


# -- images ---------------------------------------------------------------------------

DIMENSIONS = st.one_of(
    st.sampled_from([0, 1, 383, 384, 385, 768, 769, 1568, 2048, 3073, 16383, 65535, 2**32 - 1]),
    st.integers(0, 2**32 - 1),
)


def _png(width: int, height: int) -> bytes:
    return b"\x89PNG\r\n\x1a\n" + struct.pack(">I4sII", 13, b"IHDR", width, height) + b"\x08\x06"


def _gif(width: int, height: int) -> bytes:
    return b"GIF89a" + struct.pack("<HH", width & 0xFFFF, height & 0xFFFF) + b"\x00" * 4


def _jpeg(width: int, height: int) -> bytes:
    sof = struct.pack(">BBHBHH", 0xFF, 0xC0, 17, 8, height & 0xFFFF, width & 0xFFFF)
    return b"\xff\xd8\xff\xe0\x00\x10JFIF\x00" + b"\x00" * 9 + sof + b"\x03" * 12


def _webp(width: int, height: int) -> bytes:
    body = b"\x00" * 4 + ((width - 1) & 0xFFFFFF).to_bytes(3, "little")
    body += ((height - 1) & 0xFFFFFF).to_bytes(3, "little")
    return b"RIFF" + struct.pack("<I", 30) + b"WEBPVP8X" + struct.pack("<I", 10) + body


def image_bytes() -> st.SearchStrategy[bytes]:
    """Headers with extreme sizes, truncated headers, garbage (never empty)."""
    sized = st.tuples(st.sampled_from([_png, _gif, _jpeg, _webp]), DIMENSIONS, DIMENSIONS).map(
        lambda t: t[0](t[1], t[2])
    )
    return st.one_of(
        sized,
        sized.flatmap(lambda b: st.integers(1, len(b)).map(lambda n: b[:n])),
        st.binary(min_size=1, max_size=64),
        st.sampled_from([b"\xff\xd8", b"\xff\xd8\xff\xd9", b"\xff\xd8" + b"\xff" * 64, b"RIFF"]),
    )


MIME_TYPES = ["image/png", "image/jpeg", "image/gif", "image/webp"]
ODD_MIME_TYPES = [
    "",
    "image/svg+xml",
    "text/html",
    "application/octet-stream",
    "IMAGE/PNG",
    'image/png"}],"x":[{"',
    "image/" + "x" * 300,
]


def images(hostile: bool) -> st.SearchStrategy[m.ContentBlock]:
    mime = st.one_of(st.sampled_from(MIME_TYPES), st.sampled_from(ODD_MIME_TYPES))
    data = pick(hostile, image_bytes(), st.just(b""))
    return st.builds(
        lambda t, d: m.ContentBlock(image=m.ImageContent(mime_type=t, data=d)),
        pick(hostile, mime, st.sampled_from(["image/png\x00"])),
        data,
    )


# -- content and messages ------------------------------------------------------------

CALL_IDS = ["call-1", "call-2", "call-3", "call-9", "toolu_01", "call/../x", "a" * 300, "é"]
TOOL_NAMES = ["read", "write", "edit", "bash", "r" * 200, "é", "read files"]


def call_ids(hostile: bool) -> st.SearchStrategy[str]:
    return pick(hostile, st.sampled_from(CALL_IDS), st.sampled_from(["", "c\x00"]))


def tool_names(hostile: bool) -> st.SearchStrategy[str]:
    sane = st.one_of(st.sampled_from(TOOL_NAMES), odd_text(12, big=False).filter(bool))
    return pick(hostile, sane, st.sampled_from(["", "read\x00"]))


def tool_calls(hostile: bool) -> st.SearchStrategy[m.ToolCall]:
    return st.builds(
        m.ToolCall,
        id=call_ids(hostile),
        name=tool_names(hostile),
        arguments_json=json_objects(hostile),
    )


def usages(hostile: bool) -> st.SearchStrategy[m.Usage]:
    n = pick(hostile, st.integers(0, 100_000_000), int64s(), st.just(100_000_001))
    return st.builds(
        m.Usage,
        input_tokens=n,
        output_tokens=n,
        cache_read_tokens=n,
        cache_write_tokens=n,
        total_tokens=n,
    )


def metadata(hostile: bool) -> st.SearchStrategy[dict[str, str]]:
    key = st.one_of(
        st.sampled_from(["ctxwarden.summary", "ctxwarden.synthetic", "k"]),
        text(hostile, 10, big=False),
    )
    return st.dictionaries(key, text(hostile, 20), max_size=3)


@st.composite
def _with_extras(draw: st.DrawFn, msg: m.Message, hostile: bool) -> m.Message:
    """Optional fields every message may carry, including output-only ones."""
    if draw(st.booleans()):
        msg.metadata.update(draw(metadata(hostile)))
    if draw(st.booleans()):
        msg.seq = draw(int64s())
        msg.state = draw(enum_numbers(True, 2))  # type: ignore[assignment]
        msg.token_count = draw(int64s())
        msg.create_time.seconds = draw(int64s())
    if hostile and draw(st.booleans()):
        msg.message_id = draw(keys(True))
    return msg


@st.composite
def user_messages(draw: st.DrawFn, hostile: bool) -> m.Message:
    msg = user(draw(text(hostile, 60).filter(bool)), draw(st.sampled_from(["", "", "m-1", "m-2"])))
    msg.content.extend(draw(st.lists(images(hostile), max_size=2)))
    return msg


@st.composite
def assistant_messages(draw: st.DrawFn, hostile: bool) -> m.Message:
    blocks: list[m.ContentBlock] = []
    if draw(st.booleans()):
        thinking = m.ThinkingContent(
            thinking=draw(text(hostile, 60)),
            signature=draw(text(hostile, 20, big=False)),
            redacted=draw(st.booleans()),
        )
        blocks.append(m.ContentBlock(thinking=thinking))
    words = draw(text(hostile, 60))
    if words or not blocks:
        blocks.append(m.ContentBlock(text=m.TextContent(text=words or "ok")))
    calls = draw(st.lists(tool_calls(hostile), max_size=2, unique_by=lambda c: c.id))
    blocks += [m.ContentBlock(tool_call=c) for c in calls]
    msg = m.Message(
        role=m.ROLE_ASSISTANT,
        content=blocks,
        stop_reason=m.STOP_REASON_TOOL_USE if calls else m.STOP_REASON_STOP,
        model=draw(st.sampled_from(["", "gpt-4o", "claude-sonnet-4-5", "gemini-2.5-pro"])),
        provider=draw(st.sampled_from(["", "openai", "anthropic", "google"])),
    )
    if draw(st.booleans()):
        msg.usage.CopyFrom(draw(usages(hostile)))
    return msg


@st.composite
def tool_results(draw: st.DrawFn, hostile: bool) -> m.Message:
    msg = result(
        draw(call_ids(hostile)),
        draw(text(hostile, 200)),
        draw(st.sampled_from(["read", "", "bash"])),
    )
    msg.is_error = draw(st.booleans())
    if draw(st.booleans()):
        msg.content.extend(draw(st.lists(images(hostile), max_size=1)))
    return msg


@st.composite
def failed_messages(draw: st.DrawFn, hostile: bool) -> m.Message:
    error = st.sampled_from(["429 rate limit", "prompt is too long", "overloaded", "boom", ""])
    msg = failed(draw(st.one_of(error, text(hostile, 40))))
    msg.stop_reason = draw(st.sampled_from([m.STOP_REASON_ERROR, m.STOP_REASON_ABORTED]))
    if draw(st.booleans()):
        msg.content.append(m.ContentBlock(text=m.TextContent(text=draw(text(hostile, 30)))))
    return msg


@st.composite
def malformed_messages(draw: st.DrawFn) -> m.Message:
    """Anything goes: unknown roles and stop reasons, blocks a role may not carry."""
    blocks = st.one_of(
        st.builds(lambda t: m.ContentBlock(text=m.TextContent(text=t)), text(True)),
        images(True),
        st.builds(lambda c: m.ContentBlock(tool_call=c), tool_calls(True)),
        st.just(m.ContentBlock()),
    )
    msg = m.Message(
        role=draw(enum_numbers(True, 3)),  # type: ignore[arg-type]
        content=draw(st.lists(blocks, max_size=3)),
        stop_reason=draw(enum_numbers(True, 5)),  # type: ignore[arg-type]
        error_message=draw(text(True, 30)),
        tool_call_id=draw(call_ids(True)),
        tool_name=draw(text(True, 10, big=False)),
        model=draw(text(True, 20, big=False)),
        provider=draw(text(True, 10, big=False)),
    )
    if draw(st.booleans()):
        msg.usage.CopyFrom(draw(usages(True)))
    return msg


def messages(hostile: bool) -> st.SearchStrategy[m.Message]:
    odd = st.one_of(
        user_messages(hostile),
        assistant_messages(hostile),
        tool_results(hostile),
        failed_messages(hostile),
    ).flatmap(lambda msg: _with_extras(msg, hostile))
    return pick(hostile, odd, malformed_messages())


def message_lists(hostile: bool) -> st.SearchStrategy[list[m.Message]]:
    return pick(
        hostile,
        st.lists(messages(hostile), min_size=1, max_size=3),
        st.just([]),
        st.integers(1001, 1003).map(lambda n: [user("x")] * n),  # over the per-request limit
    )


# -- sessions ---------------------------------------------------------------------------

MODELS = [
    "",
    "gpt-4o",
    "gpt-4",
    "o3-mini",
    "claude-sonnet-4-5",
    "gemini-2.5-pro",
    "gemini-",
    "openai/gpt-4o",
    "models/gemini-2.5-pro",
    "deepseek-chat",
    "unknown-model",
    "m" * 128,
    "é" * 128,
]
TOKENIZERS = ["", "", "heuristic", "tiktoken:o200k_base", "tiktoken:cl100k_base"]
BAD_TOKENIZERS = [
    "tiktoken:nope",
    "tiktoken:",
    "HEURISTIC",
    " heuristic",
    "hf:",
    "hf: ",
    "hf:\x00",
    "hf:/nonexistent/tokenizer.json",
    "hf:../../tokenizer.json",
    "hf:~/tokenizer.json",
]
"""Never a path the server could block on reading (no /proc, /dev or FIFOs)."""


def models(hostile: bool) -> st.SearchStrategy[str]:
    return pick(
        hostile, st.sampled_from(MODELS), st.sampled_from(["m" * 129]), text(True, 20, big=False)
    )


def tokenizers(hostile: bool) -> st.SearchStrategy[str]:
    return pick(
        hostile,
        st.sampled_from(TOKENIZERS),
        st.sampled_from(BAD_TOKENIZERS),
        odd_text(12, big=False),
        _big_text(),
    )


def tool_definitions(hostile: bool) -> st.SearchStrategy[ses.ToolDefinition]:
    return st.builds(
        ses.ToolDefinition,
        name=tool_names(hostile),
        description=text(hostile, 30),
        parameters_json=json_objects(hostile),
    )


def policies(hostile: bool) -> st.SearchStrategy[ses.ContextPolicy]:
    tokens = pick(
        hostile, st.sampled_from([0, 0, 0, 1, 2, 50, 200, 1200, 100_000, 2**62]), int64s()
    )
    return st.builds(
        ses.ContextPolicy,
        context_window=tokens,
        reserve_tokens=tokens,
        keep_recent_tokens=tokens,
        tool_output_max_bytes=tokens,
        tool_output_max_lines=tokens,
        tokenizer=tokenizers(hostile),
        keep_tool_results=count(hostile, 0, 3),
        clear_tool_results_at_least=tokens,
        clear_tool_results_keep=count(hostile, 0, 3),
        background_compaction_percent=count(hostile, 0, 99),
        cache_lifetime_seconds=count(hostile, 0, 86_400),
    )


def sessions(session_id: st.SearchStrategy[str], hostile: bool) -> st.SearchStrategy[ses.Session]:
    tools = st.lists(tool_definitions(hostile), max_size=3, unique_by=lambda t: t.name)
    return st.builds(
        ses.Session,
        session_id=session_id,
        user_id=pick(hostile, st.sampled_from(["", "u1", "u" * 128]), st.just("u" * 129)),
        project_id=pick(hostile, st.sampled_from(["", "p1", "é" * 128]), text(True, 20, big=False)),
        title=text(hostile, 30),
        system_prompt=text(hostile, 60),
        tools=pick(hostile, tools, st.just([ses.ToolDefinition(name="a")] * 2)),
        model=models(hostile),
        policy=policies(hostile),
        pinned_state=text(hostile, 30),
        labels=metadata(hostile),
        last_seq=st.one_of(st.just(0), int64s()),
        context_tokens=st.one_of(st.just(0), int64s()),
        etag=st.sampled_from(["", '"1"', "x"]),
    )


# -- page tokens ------------------------------------------------------------------------

TOKEN_SHAPES: dict[str, dict[str, Any]] = {
    "ListSessions": {"u": "", "p": "", "t": 0, "i": "fuzz-plain"},
    "ListMessages": {"s": "fuzz-plain", "r": False, "a": 1},
    "ListCompactions": {"s": "fuzz-claude", "t": 0, "i": "x"},
}
"""What the server's tokens decode to (urlsafe base64 of JSON), to forge near-misses."""

ODD_TOKEN_VALUES: list[object] = [
    None,
    10**30,
    -1,
    2**63,
    1.5,
    "9" * 30,
    "x",
    "é",
    "\ud800",
    [],
    {},
    True,
]


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


@st.composite
def _forged(draw: st.DrawFn, shape: dict[str, Any]) -> str:
    """A token that matches the request except for one or two broken or missing keys."""
    token = dict(shape)
    for key in draw(st.lists(st.sampled_from(sorted(shape)), min_size=1, max_size=2)):
        if draw(st.booleans()):
            token.pop(key, None)
        else:
            token[key] = draw(st.one_of(st.sampled_from(ODD_TOKEN_VALUES), _json_values()))
    return _b64(json.dumps(token).encode())


def page_tokens(
    pool: Pool, rpc: str, hostile: bool, request: dict[str, Any] | None = None
) -> st.SearchStrategy[str]:
    """Empty or a real token; in a hostile request garbage and forged near-misses.

    ``request`` overrides keys of the forged token so it matches the request's
    filters (else the server rejects it before reading the other keys).
    """
    real = pool.page_tokens.get(rpc, "")
    sane = st.sampled_from(["", real]) if real else st.just("")
    bad: list[Strategy] = [
        odd_text(30),
        st.sampled_from([100, 100_000]).map(lambda n: _b64(b"[" * n)),
        st.binary(max_size=40).map(_b64),
        _json_values().map(lambda v: _b64(json.dumps(v).encode())),
    ]
    if rpc in TOKEN_SHAPES:
        bad.append(_forged({**TOKEN_SHAPES[rpc], **(request or {})}))
    if real:
        bad.append(
            st.tuples(st.integers(0, len(real)), st.sampled_from(["", "A", "=", "é", "\x00"])).map(
                lambda t: real[: t[0]] + t[1] + real[t[0] + 1 :]
            )
        )
    return st.one_of(sane, *bad) if hostile else sane


# -- requests per RPC ------------------------------------------------------------------


def _append(pool: Pool, h: bool) -> Strategy:
    def build(
        sid: str, msgs: list[m.Message], expected: int | None, key: str
    ) -> pb.AppendMessagesRequest:
        req = pb.AppendMessagesRequest(session_id=sid, messages=msgs, request_id=key)
        if expected is not None:
            req.expected_last_seq = expected
        return req

    return st.builds(
        build, session_ids(pool, h), message_lists(h), maybe(h, count(h, 0, 60)), keys(h)
    )


PROVIDER_BODIES = [
    json.dumps(
        {
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "created": 1,
            "model": "gpt-4o",
            "choices": [
                {
                    "index": 0,
                    "finish_reason": "stop",
                    "message": {"role": "assistant", "content": "ok"},
                }
            ],
        }
    ),
    json.dumps(
        {
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "model": "claude-sonnet-4-5",
            "content": [{"type": "text", "text": "ok"}],
            "stop_reason": "end_turn",
            "usage": {"input_tokens": 3, "output_tokens": 1},
        }
    ),
    json.dumps({"candidates": [{"content": {"role": "model", "parts": [{"text": "ok"}]}}]}),
    json.dumps({"id": "resp_1", "object": "response", "status": "completed", "output": []}),
    json.dumps([{"type": "message_start"}, {"type": "message_stop"}]),
    "[]",
]
PROVIDER_ITEMS = [
    json.dumps([{"role": "user", "content": "hi"}]),
    json.dumps([{"role": "tool", "tool_call_id": "call_1", "content": "x"}]),
    json.dumps([{"type": "function_call_output", "call_id": "c", "output": "x"}]),
    json.dumps(
        [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": "x"}]}]
    ),
    json.dumps(
        [{"role": "user", "parts": [{"functionResponse": {"name": "read", "response": {}}}]}]
    ),
]


def _model_output(pool: Pool, h: bool) -> Strategy:
    def build(
        sid: str, fmt: int, which: bool, body: str, key: str, expected: int | None
    ) -> pb.AppendModelOutputRequest:
        req = pb.AppendModelOutputRequest(session_id=sid, format=fmt, request_id=key)  # type: ignore[arg-type]
        if which:
            req.response_json = body
        else:
            req.items_json = body
        if expected is not None:
            req.expected_last_seq = expected
        return req

    bodies = pick(
        h,
        st.sampled_from(PROVIDER_BODIES + PROVIDER_ITEMS),
        json_objects(h),
        st.lists(st.sampled_from(PROVIDER_BODIES), max_size=3).map(
            lambda b: "[" + ",".join(b) + "]"
        ),
    )
    return st.builds(
        build,
        session_ids(pool, h),
        enum_numbers(h, 5),
        st.booleans(),
        bodies,
        keys(h),
        maybe(h, count(h, 0, 60)),
    )


def _create(pool: Pool, h: bool) -> Strategy:
    new_ids = st.one_of(
        st.just(""), st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,30}", fullmatch=True)
    )
    return st.builds(
        pb.CreateSessionRequest,
        session=sessions(text(h, 10, big=False), h),
        session_id=pick(h, new_ids, st.sampled_from(ID_EDGES + pool.sessions)),
        request_id=keys(h),
    )


UPDATABLE = ["title", "system_prompt", "tools", "model", "policy", "pinned_state", "labels"]
BAD_PATHS = ["", "session_id", "last_seq", "etag", "policy.context_window", "labels.k", "TITLE"]


def _update(pool: Pool, h: bool) -> Strategy:
    paths = pick(
        h,
        st.one_of(st.lists(st.sampled_from(UPDATABLE), min_size=1, max_size=3), st.just(["*"])),
        st.lists(st.sampled_from(UPDATABLE + BAD_PATHS + ["*"]), max_size=4),
        st.lists(odd_text(12, big=False), max_size=2),
    )
    return st.builds(
        pb.UpdateSessionRequest,
        session=sessions(session_ids(pool, h), h),
        update_mask=paths.map(lambda p: field_mask_pb2.FieldMask(paths=p)),
        etag=pick(h, st.just(""), st.sampled_from(['"1"', '"2"', '"999"', "1"]), odd_text(8)),
    )


def _rollback(pool: Pool, h: bool) -> Strategy:
    def build(sid: str, to_seq: int | None, error: str, key: str) -> pb.RollbackTurnRequest:
        req = pb.RollbackTurnRequest(session_id=sid, error_message=error, request_id=key)
        if to_seq is not None:
            req.to_seq = to_seq
        return req

    errors = st.one_of(
        st.sampled_from(["", "429 Too Many Requests", "prompt is too long", "503", "overloaded"]),
        text(h, 30),
    )
    return st.builds(build, session_ids(pool, h), maybe(h, _rewind_to(h)), errors, keys(h))


def _build_input(pool: Pool, h: bool) -> Strategy:
    def build(
        sid: str, max_out: int, auto: bool, fmt: int, as_of: int | None
    ) -> pb.BuildModelInputRequest:
        req = pb.BuildModelInputRequest(
            session_id=sid,
            max_output_tokens=max_out,
            auto_compact=auto,
            format=fmt,  # type: ignore[arg-type]
        )
        if as_of is not None:
            req.as_of_seq = as_of
        return req

    return st.builds(
        build,
        session_ids(pool, h),
        pick(h, st.sampled_from([0, 0, 1, 4096, 10**6, 2**62]), int64s()),
        st.booleans(),
        enum_numbers(h, 5),
        maybe(h, count(h, 1, 60)),
    )


def _commit(pool: Pool, h: bool) -> Strategy:
    plan_ids = pick(
        h,
        st.just(FRESH_PLAN),
        st.sampled_from(["", "01J0000000000000000000000", "p" * 64, "p" * 65]),
        odd_text(20, big=False),
    )
    summaries = st.one_of(text(h, 60), st.sampled_from(["", " ", "\n\t", "## Goal\nok"]))
    return st.builds(
        pb.CommitCompactionRequest,
        session_id=session_ids(pool, h),
        plan_id=plan_ids,
        summary=summaries,
        turn_prefix_summary=summaries,
    )


@dataclass(frozen=True)
class WithPrelude:
    """Append ``prelude`` first (it must succeed), then send ``request``."""

    prelude: pb.AppendMessagesRequest
    request: PbMessage


@st.composite
def exchanges(draw: st.DrawFn, session_id: str, hostile: bool) -> pb.AppendMessagesRequest:
    """Complete turns (every tool call answered), so the session stays compactable,
    with odd content: file paths in tool arguments, images, thinking, big outputs."""
    out: list[m.Message] = []
    for _ in range(draw(st.integers(1, 3))):
        question = draw(user_messages(False))
        question.message_id = ""
        out.append(question)
        calls = draw(st.lists(tool_calls(False), max_size=2, unique_by=lambda c: c.id))
        for c in calls:
            c.name = draw(st.sampled_from(["read", "write", "edit", "bash"]))
        reply = draw(assistant_messages(False))
        kept = [b for b in reply.content if b.WhichOneof("block") != "tool_call"]
        del reply.content[:]
        reply.content.extend(kept + [m.ContentBlock(tool_call=c) for c in calls])
        reply.stop_reason = m.STOP_REASON_TOOL_USE if calls else m.STOP_REASON_STOP
        out.append(reply)
        for c in calls:
            answer = result(c.id, draw(odd_text(200)), c.name)
            answer.content.extend(draw(st.lists(images(False), max_size=1)))
            out.append(answer)
        if calls:
            out.append(assistant(draw(odd_text(60).filter(bool))))
    return pb.AppendMessagesRequest(session_id=session_id, messages=out)


def _compaction(
    make: Callable[[Pool, bool], Strategy],
) -> Callable[[Pool, bool], Strategy]:
    """A compaction RPC's requests, and the same after fresh turns on a compactable session."""

    def requests(pool: Pool, h: bool) -> Strategy:
        if not pool.compactable:
            return make(pool, h)

        @st.composite
        def scenario(draw: st.DrawFn) -> WithPrelude:
            sid = draw(st.sampled_from(pool.compactable))
            request = draw(make(pool, h))
            request.session_id = sid
            return WithPrelude(draw(exchanges(sid, h)), request)

        return st.one_of(make(pool, h), scenario())

    return requests


@st.composite
def _list_sessions(draw: st.DrawFn, pool: Pool, h: bool) -> pb.ListSessionsRequest:
    user_id = draw(pick(h, st.sampled_from(["", "u1"]), text(True, 20)))
    project_id = draw(pick(h, st.sampled_from(["", "p1"]), text(True, 20, big=False)))
    token = page_tokens(pool, "ListSessions", h, {"u": user_id, "p": project_id})
    return pb.ListSessionsRequest(
        user_id=user_id,
        project_id=project_id,
        page_size=draw(count(h, 0, 3, bits=32)),
        page_token=draw(token),
    )


@st.composite
def _list_messages(draw: st.DrawFn, pool: Pool, h: bool) -> pb.ListMessagesRequest:
    sid = draw(session_ids(pool, h))
    rolled_back = draw(st.booleans())
    token = page_tokens(pool, "ListMessages", h, {"s": sid, "r": rolled_back})
    return pb.ListMessagesRequest(
        session_id=sid,
        page_size=draw(count(h, 0, 3, bits=32)),
        page_token=draw(token),
        include_rolled_back=rolled_back,
    )


@st.composite
def _list_compactions(draw: st.DrawFn, pool: Pool, h: bool) -> pb.ListCompactionsRequest:
    sid = draw(session_ids(pool, h))
    return pb.ListCompactionsRequest(
        session_id=sid,
        page_size=draw(count(h, 0, 3, bits=32)),
        page_token=draw(page_tokens(pool, "ListCompactions", h, {"s": sid})),
    )


def _victim_ids(pool: Pool, h: bool) -> Strategy:
    return pick(h, st.sampled_from(pool.victims), st.sampled_from(ID_EDGES + UNKNOWN_IDS))


def _keep(h: bool) -> Strategy:
    return pick(h, st.sampled_from([10, 1, 40, 200, 0, 2**62]), int64s())


def _rewind_to(h: bool) -> Strategy:
    """A to_seq: mostly near the end of a session (a rewind to 0 empties it)."""
    return pick(h, st.integers(0, 60).map(lambda n: 60 - n), int64s())


TARGETED: dict[str, Callable[[Pool, bool], Strategy]] = {
    "CreateSession": _create,
    "GetSession": lambda p, h: st.builds(pb.GetSessionRequest, session_id=session_ids(p, h)),
    "ListSessions": _list_sessions,
    "UpdateSession": _update,
    "DeleteSession": lambda p, h: st.builds(pb.DeleteSessionRequest, session_id=_victim_ids(p, h)),
    "AppendMessages": _append,
    "AppendModelOutput": _model_output,
    "StreamMessages": lambda p, h: st.lists(_append(p, h), min_size=1, max_size=4),
    "ListMessages": _list_messages,
    "BuildModelInput": _build_input,
    "RollbackTurn": _rollback,
    "Compact": _compaction(
        lambda p, h: st.builds(
            pb.CompactRequest,
            session_id=session_ids(p, h),
            instructions=text(h, 40),
            keep_recent_tokens=_keep(h),
            request_id=keys(h),
            trigger=enum_numbers(h, 3),
        )
    ),
    "PrepareCompaction": _compaction(
        lambda p, h: st.builds(
            pb.PrepareCompactionRequest,
            session_id=session_ids(p, h),
            instructions=text(h, 40),
            keep_recent_tokens=_keep(h),
        )
    ),
    "CommitCompaction": _compaction(_commit),
    "ListCompactions": _list_compactions,
    "GetToolOutput": lambda p, h: st.builds(
        pb.GetToolOutputRequest,
        session_id=session_ids(p, h),
        seq=pick(h, st.one_of(st.sampled_from([3, 5]), st.integers(1, 60)), int64s()),
        offset=count(h, 0, 300),
        limit=count(h, 0, 300),
    ),
    "CountTokens": lambda p, h: st.builds(
        pb.CountTokensRequest,
        model=models(h),
        tokenizer=st.one_of(st.just(""), tokenizers(h)),
        messages=st.lists(messages(h), max_size=4),
        tools=st.lists(tool_definitions(h), max_size=3),
        text=text(h, 60),
    ),
}
"""Requests aimed at real sessions and known edge cases: ``(pool, hostile) -> strategy``."""


def _register_lineage_and_memory() -> None:
    """The fork, archive and memory RPCs' strategies live in their own module, which
    builds on this one's helpers (so it is imported once they all exist)."""
    from tests.fuzz.lineage_memory_strategies import LINEAGE_MEMORY_TARGETED

    TARGETED.update(LINEAGE_MEMORY_TARGETED)


def targeted_requests(rpc_name: str, pool: Pool) -> Strategy | None:
    make = TARGETED.get(rpc_name)
    if make is None:
        return None
    return st.booleans().flatmap(lambda hostile: make(pool, hostile))


# -- requests from the descriptor alone ----------------------------------------------

_INT_RANGES = {
    FieldDescriptor.TYPE_INT32: INT32,
    FieldDescriptor.TYPE_SINT32: INT32,
    FieldDescriptor.TYPE_SFIXED32: INT32,
    FieldDescriptor.TYPE_INT64: INT64,
    FieldDescriptor.TYPE_SINT64: INT64,
    FieldDescriptor.TYPE_SFIXED64: INT64,
    FieldDescriptor.TYPE_UINT32: UINT32,
    FieldDescriptor.TYPE_FIXED32: UINT32,
    FieldDescriptor.TYPE_UINT64: UINT64,
    FieldDescriptor.TYPE_FIXED64: UINT64,
}


def _is_map(f: FieldDescriptor) -> bool:
    return f.message_type is not None and f.message_type.GetOptions().map_entry


def _scalar(f: FieldDescriptor, pool: Pool, depth: int) -> st.SearchStrategy[Any]:
    t = f.type
    if t in _INT_RANGES:
        return _ints(*_INT_RANGES[t])
    if t == FieldDescriptor.TYPE_BOOL:
        return st.booleans()
    if t in (FieldDescriptor.TYPE_DOUBLE, FieldDescriptor.TYPE_FLOAT):
        return st.floats(width=64 if t == FieldDescriptor.TYPE_DOUBLE else 32)
    if t == FieldDescriptor.TYPE_ENUM:
        assert f.enum_type is not None
        return enum_numbers(True, max(v.number for v in f.enum_type.values))
    if t == FieldDescriptor.TYPE_BYTES:
        return st.one_of(st.binary(max_size=64), image_bytes())
    if t == FieldDescriptor.TYPE_STRING:
        if f.name.endswith("session_id"):
            return session_ids(pool, True)
        if f.name.endswith("_json"):
            return json_objects(True)
        return text(True)
    assert f.message_type is not None
    return from_descriptor(f.message_type, pool, depth + 1)


def from_descriptor(desc: Descriptor, pool: Pool, depth: int = 0) -> st.SearchStrategy[Any]:
    """Any message type, every field hostile (nested messages up to a few levels)."""
    cls = message_factory.GetMessageClass(desc)
    fields: dict[str, st.SearchStrategy[Any]] = {}
    for f in desc.fields:
        if f.message_type is not None and depth >= 3 and not _is_map(f):
            continue
        if _is_map(f):
            assert f.message_type is not None
            key_f, value_f = (
                f.message_type.fields_by_name["key"],
                f.message_type.fields_by_name["value"],
            )
            fields[f.name] = st.dictionaries(
                _scalar(key_f, pool, depth), _scalar(value_f, pool, depth), max_size=3
            )
        elif f.is_repeated:
            fields[f.name] = st.lists(_scalar(f, pool, depth), max_size=3)
        else:
            fields[f.name] = _scalar(f, pool, depth)

    def build(values: dict[str, Any]) -> PbMessage:
        msg = cls()
        for name, value in values.items():
            f = desc.fields_by_name[name]
            target = getattr(msg, name) if f.is_repeated else None
            if _is_map(f):
                assert f.message_type is not None
                for k, v in value.items():
                    if f.message_type.fields_by_name["value"].message_type is not None:
                        target[k].CopyFrom(v)  # type: ignore[index]
                    else:
                        target[k] = v  # type: ignore[index]
            elif target is not None:
                target.extend(value)
            elif f.message_type is not None:
                getattr(msg, name).CopyFrom(value)
            else:
                setattr(msg, name, value)
        return msg

    return st.fixed_dictionaries({}, optional=fields).map(build)


def requests_for(rpc_name: str, desc: Descriptor, streaming: bool, pool: Pool) -> Any:
    """Typed hostile requests for one RPC (a list of requests for a streaming RPC)."""
    generic: st.SearchStrategy[Any] = from_descriptor(desc, pool)
    if streaming:
        generic = st.lists(generic, min_size=1, max_size=3)
    targeted = targeted_requests(rpc_name, pool)
    if targeted is None:
        return generic
    return mostly(targeted, generic)


# -- raw wire bytes ---------------------------------------------------------------------


def varint(value: int) -> bytes:
    value &= (1 << 64) - 1
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def tag(number: int, wire_type: int) -> bytes:
    return varint((number << 3) | wire_type)


_WIRE_TYPE = {
    FieldDescriptor.TYPE_DOUBLE: 1,
    FieldDescriptor.TYPE_FIXED64: 1,
    FieldDescriptor.TYPE_SFIXED64: 1,
    FieldDescriptor.TYPE_FLOAT: 5,
    FieldDescriptor.TYPE_FIXED32: 5,
    FieldDescriptor.TYPE_SFIXED32: 5,
    FieldDescriptor.TYPE_STRING: 2,
    FieldDescriptor.TYPE_BYTES: 2,
    FieldDescriptor.TYPE_MESSAGE: 2,
    FieldDescriptor.TYPE_GROUP: 3,
}

HUGE_VARINTS = [
    b"\xff" * 9 + b"\x01",  # 2**64 - 1
    b"\xff" * 10 + b"\x01",  # 11 bytes: too long
    b"\x80" * 9 + b"\x00",  # overlong zero
    b"\xff" * 4,  # unterminated
]

INVALID_UTF8 = [b"\xff", b"\xc0\x80", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"a\xe2\x82", b"\x80"]


@st.composite
def wire_messages(draw: st.DrawFn, desc: Descriptor | None, depth: int = 0) -> bytes:
    """A message assembled field by field: real and unknown numbers, right and wrong types."""
    out = bytearray()
    numbers = [f.number for f in desc.fields] if desc is not None else []
    for _ in range(draw(st.integers(0, 5))):
        choices: list[st.SearchStrategy[int]] = [
            st.integers(1, 2**29 - 1),
            st.sampled_from([0, 2**29 - 1, 2**29, 19000, 19999]),
        ]
        if numbers:
            choices[:0] = [st.sampled_from(numbers)] * 3
        number = draw(st.one_of(choices))
        f = desc.fields_by_number.get(number) if desc is not None else None
        right = _WIRE_TYPE.get(f.type, 0) if f is not None else 0
        wire = draw(st.one_of(st.just(right), st.just(right), st.integers(0, 7)))
        out += tag(number, wire)
        if wire == 0:
            out += draw(
                st.one_of(
                    st.integers(*UINT64).map(varint),
                    st.integers(*INT64).map(varint),
                    st.sampled_from(HUGE_VARINTS),
                )
            )
        elif wire == 1:
            out += draw(st.binary(min_size=8, max_size=8))
        elif wire == 5:
            out += draw(st.binary(min_size=4, max_size=4))
        elif wire == 2:
            sub = f.message_type if f is not None else None
            body_options: list[st.SearchStrategy[bytes]] = [
                st.binary(max_size=40),
                text(True, 30, big=False).map(lambda s: s.encode("utf-8")),
                st.sampled_from(INVALID_UTF8),
            ]
            if depth < 3:
                body_options.append(wire_messages(sub, depth + 1))
            body = draw(st.one_of(body_options))
            length = draw(
                st.one_of(
                    st.just(len(body)),
                    st.just(len(body)),
                    st.sampled_from([len(body) + 1, len(body) + 1000, 2**31, 2**63, 2**64 - 1]),
                    st.integers(0, len(body)),
                )
            )
            out += varint(length) + body
        elif wire == 3 and depth < 3:
            out += draw(wire_messages(None, depth + 1))
            if draw(st.booleans()):
                out += tag(number, 4)
    return bytes(out)


def _deep_groups(depth: int) -> bytes:
    return tag(1000, 3) * depth + tag(1000, 4) * depth


def _deep_lengths(depth: int) -> bytes:
    body = b""
    for _ in range(depth):
        body = tag(1000, 2) + varint(len(body)) + body
    return body


SPECIAL_PAYLOADS = [
    b"",
    b"\x00",
    b"\x08",
    b"\x0a",
    b"\x0a\xff\xff\xff\xff\x0f",
    b"\x0b",  # start group, never ended
    b"\x0c",  # end group without a start
    b"\x0f",  # wire type 7
    tag(2**29 - 1, 0) + b"\x01",
    varint(2**35) + b"\x01",  # field number beyond the limit
    _deep_groups(50),
    _deep_groups(101),
    _deep_groups(10_000),
    _deep_lengths(200),
    b"\xff" * 64,
]


def plausible(desc: Descriptor, pool: Pool, depth: int = 0) -> PbMessage:
    """A request of any type with every field set to something sensible."""
    cls = message_factory.GetMessageClass(desc)
    msg = cls()
    oneofs: set[str] = set()
    for f in desc.fields:
        if f.containing_oneof is not None:
            if f.containing_oneof.name in oneofs:
                continue
            oneofs.add(f.containing_oneof.name)
        if _is_map(f):
            assert f.message_type is not None
            value_type = f.message_type.fields_by_name["value"].message_type
            if value_type is None:
                getattr(msg, f.name)["k"] = "v"
            elif depth < 4:  # e.g. a google.protobuf.Struct's fields
                getattr(msg, f.name)["k"].CopyFrom(plausible(value_type, pool, depth + 1))
            continue
        if f.message_type is not None:
            if depth >= 4:
                continue
            value = plausible(f.message_type, pool, depth + 1)
            if f.is_repeated:
                getattr(msg, f.name).add().CopyFrom(value)
            else:
                getattr(msg, f.name).CopyFrom(value)
            continue
        value = _plausible_scalar(f, pool)
        if f.is_repeated:
            getattr(msg, f.name).append(value)
        else:
            setattr(msg, f.name, value)
    return msg


def _plausible_scalar(f: FieldDescriptor, pool: Pool) -> Any:
    if f.type == FieldDescriptor.TYPE_STRING:
        if f.name.endswith("session_id"):
            return pool.sessions[0]
        if f.name.endswith("_json"):
            return "{}"
        named = {"tokenizer": "heuristic", "mime_type": "image/png", "paths": "title"}
        return named.get(f.name, "" if f.name.endswith(("_id", "_token", "etag")) else "x")
    if f.type == FieldDescriptor.TYPE_BYTES:
        return _png(10, 10)
    if f.type == FieldDescriptor.TYPE_BOOL:
        return False
    if f.type == FieldDescriptor.TYPE_ENUM:
        return 1
    if f.type in (FieldDescriptor.TYPE_DOUBLE, FieldDescriptor.TYPE_FLOAT):
        return 1.0
    return 1


def seed_requests(rpc_name: str, desc: Descriptor, pool: Pool) -> list[bytes]:
    """Valid serialized requests to mutate: one from the descriptor, plus hand-made ones."""
    sid = pool.sessions[0]
    seeds: list[PbMessage] = [plausible(desc, pool), message_factory.GetMessageClass(desc)()]
    if desc.full_name == pb.AppendMessagesRequest.DESCRIPTOR.full_name:
        seeds += [
            pb.AppendMessagesRequest(session_id=sid, messages=[user("hello")]),
            pb.AppendMessagesRequest(
                session_id=sid,
                messages=[
                    assistant("x", [("call-7", "read", {"path": "a"})]),
                    result("call-7", "y"),
                ],
                request_id="rid-raw",
            ),
        ]
    elif rpc_name == "BuildModelInput":
        seeds.append(
            pb.BuildModelInputRequest(
                session_id=sid, format=pb.MODEL_INPUT_FORMAT_OPENAI_CHAT, as_of_seq=2
            )
        )
    elif rpc_name == "RollbackTurn":
        seeds.append(pb.RollbackTurnRequest(session_id=sid, to_seq=3))
    elif rpc_name == "CreateSession":
        seeds.append(
            pb.CreateSessionRequest(
                session=ses.Session(
                    title="t", tools=[ses.ToolDefinition(name="read")], labels={"a": "b"}
                )
            )
        )
    return [s.SerializeToString() for s in seeds]


@st.composite
def mutations(draw: st.DrawFn, seeds: Sequence[bytes]) -> bytes:
    """A valid request, damaged a few times over."""
    data = bytearray(draw(st.sampled_from(list(seeds))))
    for _ in range(draw(st.integers(1, 4))):
        op = draw(
            st.sampled_from(
                [
                    "flip",
                    "truncate",
                    "insert",
                    "delete",
                    "splice",
                    "double",
                    "set",
                    "varint",
                    "wire",
                ]
            )
        )
        n = len(data)
        pos = draw(st.integers(0, n)) if n else 0
        if op == "flip" and n:
            i = min(pos, n - 1)
            data[i] ^= 1 << draw(st.integers(0, 7))
        elif op == "cut":
            del data[pos:]
        elif op == "insert":
            data[pos:pos] = draw(
                st.one_of(st.binary(min_size=1, max_size=16), *map(st.just, INVALID_UTF8))
            )
        elif op == "delete":
            del data[pos : pos + draw(st.integers(1, 8))]
        elif op == "splice":
            other = draw(st.sampled_from(list(seeds)))
            data = data[:pos] + other[draw(st.integers(0, len(other))) :]
        elif op == "double":
            data = data + data
        elif op == "set" and n:
            data[min(pos, n - 1)] = draw(st.integers(0, 255))
        elif op == "varint":
            data[pos:pos] = draw(st.sampled_from(HUGE_VARINTS))
        elif op == "wire" and n:
            i = min(pos, n - 1)
            data[i] = (data[i] & ~7) | draw(st.integers(0, 7))
    return bytes(data)


def raw_payloads(desc: Descriptor, seeds: Sequence[bytes]) -> st.SearchStrategy[bytes]:
    return st.one_of(
        st.binary(max_size=200),
        mutations(seeds),
        mutations(seeds),
        wire_messages(desc),
        st.sampled_from(SPECIAL_PAYLOADS),
    )


_register_lineage_and_memory()
