"""Builders and hypothesis strategies for model-input views to render."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from hypothesis import strategies as st

from ctxwarden.core.messages import ContentBlock, ContentKind, Message, Role, StopReason
from ctxwarden.core.render import Format, Rendered, render
from ctxwarden.core.render._common import dumps
from ctxwarden.core.session import ToolDefinition
from ctxwarden.core.summary import SUMMARY_METADATA_KEY
from ctxwarden.core.view import SYNTHETIC_METADATA_KEY, SYNTHETIC_RESULT_TEXT
from tests.render.sdk import ARRAY_KEY

MODEL = "model-a"
OTHER_MODEL = "model-b"
PROVIDER_FORMATS = [
    Format.OPENAI_CHAT,
    Format.OPENAI_RESPONSES,
    Format.ANTHROPIC_MESSAGES,
    Format.GEMINI,
]

READ = ToolDefinition(
    "read",
    "Read a file",
    '{"type":"object","properties":{"path":{"type":"string"}},"required":["path"]}',
)
LS = ToolDefinition("ls")


# -- builders ------------------------------------------------------------------


def text(t: str) -> ContentBlock:
    return ContentBlock.of_text(t)


def image(data: bytes = b"\x89PNG", mime: str = "image/png") -> ContentBlock:
    return ContentBlock(ContentKind.IMAGE, mime_type=mime, data=data)


def thinking(t: str = "hmm", signature: str = "c2ln", redacted: bool = False) -> ContentBlock:
    return ContentBlock(ContentKind.THINKING, text=t, signature=signature, redacted=redacted)


def call(call_id: str, name: str = "read", args: str = '{"path":"a.txt"}') -> ContentBlock:
    return ContentBlock.of_tool_call(call_id, name, args)


def user(*blocks: ContentBlock | str, seq: int = 0) -> Message:
    content = tuple(text(b) if isinstance(b, str) else b for b in blocks)
    return Message(Role.USER, content, seq=seq)


def assistant(*blocks: ContentBlock | str, seq: int = 0, model: str = MODEL) -> Message:
    content = tuple(text(b) if isinstance(b, str) else b for b in blocks)
    stop = (
        StopReason.TOOL_USE
        if any(b.kind is ContentKind.TOOL_CALL for b in content)
        else (StopReason.STOP)
    )
    return Message(Role.ASSISTANT, content, seq=seq, model=model, stop_reason=stop)


def result(
    call_id: str,
    *blocks: ContentBlock | str,
    name: str = "read",
    seq: int = 0,
    is_error: bool = False,
) -> Message:
    content = tuple(text(b) if isinstance(b, str) else b for b in blocks)
    return Message(
        Role.TOOL_RESULT,
        content,
        seq=seq,
        tool_call_id=call_id,
        tool_name=name,
        is_error=is_error,
    )


def synthetic(call_id: str, name: str = "read") -> Message:
    return Message(
        Role.TOOL_RESULT,
        (text(SYNTHETIC_RESULT_TEXT),),
        tool_call_id=call_id,
        tool_name=name,
        is_error=True,
        metadata={SYNTHETIC_METADATA_KEY: "true"},
    )


def summary(t: str = "Earlier we read a.txt.") -> Message:
    return Message(Role.USER, (text(t),), metadata={SUMMARY_METADATA_KEY: "cmp-1"})


def numbered(messages: Sequence[Message]) -> list[Message]:
    """Seqs 1, 2, ... as stored; summary and synthetic results keep seq 0."""
    out: list[Message] = []
    seq = 0
    for m in messages:
        if SUMMARY_METADATA_KEY in m.metadata or SYNTHETIC_METADATA_KEY in m.metadata:
            out.append(replace(m, seq=0))
        else:
            seq += 1
            out.append(replace(m, seq=seq))
    return out


def body(fmt: Format, rendered: Rendered) -> dict[str, Any]:
    value = json.loads(rendered.json)
    assert isinstance(value, dict)
    return value


def without_cache_control(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: without_cache_control(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        return [without_cache_control(v) for v in value]
    return value


def array_json(fmt: Format, rendered: Rendered) -> str:
    """The messages/input/contents array as rendered, without cache_control keys."""
    return dumps(without_cache_control(body(fmt, rendered)[ARRAY_KEY[fmt]]))


def render_all(
    fmt: Format,
    messages: Sequence[Message],
    *,
    system: str = "Be brief.",
    tools: Sequence[ToolDefinition] = (READ,),
    model: str = MODEL,
) -> Rendered:
    return render(fmt, system, tools, messages, model=model)


# -- strategies ------------------------------------------------------------------

_texts = st.text(max_size=12)
_mimes = st.sampled_from(
    ["image/png", "image/jpeg", "image/jpg", "image/gif", "image/webp", "image/bmp", "image/heic"]
)
_images = st.builds(image, data=st.binary(min_size=1, max_size=6), mime=_mimes)
_PROVIDER_ITEMS = {
    # Items each format's ingest keeps as PROVIDER blocks, where they go.
    "user": {
        "anthropic": {"type": "document", "source": {"type": "text", "data": "doc"}},
        "openai-chat": {"type": "file", "file": {"file_id": "file-1"}},
        "openai-responses": {"type": "input_file", "file_id": "file-1"},
        "google": {"fileData": {"mimeType": "application/pdf", "fileUri": "gs://b/f.pdf"}},
    },
    "assistant": {
        "anthropic": {
            "type": "server_tool_use",
            "id": "srvtoolu_1",
            "name": "web_search",
            "input": {"query": "q ü"},
        },
        "openai-responses": {
            "type": "web_search_call",
            "id": "ws_1",
            "status": "completed",
            "action": {"type": "search", "query": "q"},
        },
        "google": {"executableCode": {"language": "PYTHON", "code": "print(1)"}},
    },
}


def provider(family: str, item: Any) -> ContentBlock:
    return ContentBlock.of_provider(family, dumps(item))


def _providers(where: str) -> st.SearchStrategy[ContentBlock]:
    return st.sampled_from(sorted(_PROVIDER_ITEMS[where].items())).map(lambda fi: provider(*fi))


_media = st.one_of(st.builds(text, _texts), _images)
_media_kept = st.one_of(_media, _providers("user"))
_thinking = st.builds(
    thinking,
    t=_texts,
    signature=st.sampled_from(
        # base64 (Anthropic, Gemini), none, neither, an OpenAI Responses reasoning item
        ["", "c2lnbmF0dXJl", "c2ln", "not base64!", '{"id":"rs_1","encrypted_content":"RU5D"}']
    ),
    redacted=st.booleans(),
)
_tool_ids = st.one_of(
    st.from_regex(r"call_[a-z0-9]{1,4}", fullmatch=True),
    st.sampled_from(["toolu.1", "call:0", "a b", "x" * 70, "y" * 41 + "!", "call_0"]),
    st.text(min_size=1, max_size=80),
)
_args = st.sampled_from(["", "{}", '{"path":"a.txt"}', '{"n":1,"deep":{"list":[1,"x",null]}}'])
_models = st.sampled_from([MODEL, OTHER_MODEL, ""])


@st.composite
def user_steps(draw: st.DrawFn, kept: bool = False) -> list[Message]:
    media = _media_kept if kept else _media
    return [Message(Role.USER, tuple(draw(st.lists(media, min_size=1, max_size=3))))]


@st.composite
def assistant_steps(draw: st.DrawFn, kept: bool = False) -> list[Message]:
    """An assistant message with all its tool results (in any order); ``kept``:
    with PROVIDER blocks among the content."""
    media = _media_kept if kept else _media
    choices = ["text", "thinking", "call", *(["kept"] if kept else [])]
    kinds = draw(st.lists(st.sampled_from(choices), min_size=1, max_size=5))
    ids = iter(draw(st.lists(_tool_ids, min_size=5, max_size=5, unique=True)))
    content: list[ContentBlock] = []
    for kind in kinds:
        if kind == "text":
            content.append(text(draw(_texts)))
        elif kind == "thinking":
            content.append(draw(_thinking))
        elif kind == "kept":
            content.append(draw(_providers("assistant")))
        else:
            name = draw(st.sampled_from(["read", "ls"]))
            content.append(call(next(ids), name, draw(_args)))
    message = assistant(*content, model=draw(_models))
    calls = list(message.tool_calls)
    results: list[Message] = []
    for c in draw(st.permutations(calls)):
        if draw(st.integers(0, 5)) == 0:
            results.append(synthetic(c.tool_call_id, c.tool_name))
            continue
        blocks = draw(st.lists(media, min_size=1, max_size=3))
        name = draw(st.sampled_from([c.tool_name, ""]))
        results.append(result(c.tool_call_id, *blocks, name=name, is_error=draw(st.booleans())))
    return [message, *results]


@st.composite
def transcripts(draw: st.DrawFn, kept: bool = False) -> tuple[list[list[Message]], bool]:
    """Steps (a user message, or an assistant message with its results) and
    whether a summary message leads the view; ``kept``: with PROVIDER blocks
    (items ingest keeps, of every family) among the content."""
    one_step = st.one_of(user_steps(kept), assistant_steps(kept))
    steps = draw(st.lists(one_step, min_size=1, max_size=6))
    flat = numbered([m for step in steps for m in step])
    out: list[list[Message]] = []
    i = 0
    for step in steps:
        out.append(flat[i : i + len(step)])
        i += len(step)
    return out, draw(st.booleans())


def flatten(steps: Sequence[Sequence[Message]], with_summary: bool) -> list[Message]:
    messages = [m for step in steps for m in step]
    return [summary(), *messages] if with_summary else messages


tool_sets = st.sampled_from([(), (READ,), (READ, LS)])
system_prompts = st.sampled_from(["", "Be brief."])
render_models = st.sampled_from([MODEL, OTHER_MODEL])
