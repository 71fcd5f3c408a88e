"""OpenAI Responses input items <-> ctxwarden messages, item for item and exactly.

ctxwarden's Responses ingest (``AppendModelOutput``, format OPENAI_RESPONSES) maps
items onto messages; this module applies the same mapping on the client, one
message per item, so that an item comes back exactly as it went in:

- a ``message`` of role user or assistant is a USER or ASSISTANT message: a string
  content one text block, a part list its parts in order (``input_text``,
  ``output_text`` and ``refusal`` text blocks, ``input_image`` with a data URL an
  image block, any other part a PROVIDER block of family ``openai-responses``);
- ``function_call`` an assistant message with one tool call (``call_id``, ``name``,
  ``arguments`` as sent); ``function_call_output`` a tool result;
- ``reasoning`` one thinking block: the summary texts joined by a blank line, the
  item's ``id``, ``encrypted_content`` and (with several parts) the parts' lengths
  in the signature as ctxwarden's ingest writes it
  (``{"id":...,"encrypted_content":...,"summary":[...]}``);
- every other item (``system`` and ``developer`` messages, built-in tool calls,
  ``compaction`` items, foreign dicts such as encrypted envelopes) is an assistant
  message holding the item verbatim in one PROVIDER block, which ctxwarden renders
  back as the item itself, in its place.

What the content blocks do not hold (``id``, ``status``, ``type``, empty
``annotations``, whether content was a string or a part list) is kept as a small
JSON envelope, the item minus its content, in the message's metadata under
:data:`ENVELOPE_KEY`; the texts, calls and images themselves are ordinary content,
so token counting, truncation and compaction work on them. A message without an
envelope (a compaction summary, or one another client appended) is rendered the
way ctxwarden's Responses renderer renders it.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Mapping
from typing import Any

from ..v1 import message_pb2 as m

__all__ = ["ENVELOPE_KEY", "FAMILY", "item_to_message", "message_to_items", "opaque_message"]

ENVELOPE_KEY = "ctxwarden.responses_item"
"""Metadata key of the envelope: the item without what its content blocks hold."""
FAMILY = "openai-responses"

Item = dict[str, Any]
_TEXT_KEYS = {"input_text": "text", "output_text": "text", "refusal": "refusal"}
_EMPTY_OK = ("annotations", "logprobs")


def _dumps(value: object) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _text(text: str) -> m.ContentBlock:
    return m.ContentBlock(text=m.TextContent(text=text))


def _provider(value: object) -> m.ContentBlock:
    return m.ContentBlock(provider=m.ProviderContent(family=FAMILY, json=_dumps(value)))


def _data_url_image(url: str) -> m.ContentBlock | None:
    head, sep, data = url.partition(",")
    if not sep or not head.startswith("data:") or not head.endswith(";base64"):
        return None
    try:
        raw = base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        return None
    mime = head.removeprefix("data:").removesuffix(";base64")
    if not raw or not mime or _image_url(mime, raw) != url:
        return None
    return m.ContentBlock(image=m.ImageContent(mime_type=mime, data=raw))


def _image_url(mime: str, data: bytes) -> str:
    return f"data:{mime};base64,{base64.b64encode(data).decode()}"


def _parts(content: object) -> tuple[list[m.ContentBlock], object] | None:
    """(blocks, template) of a message content or a tool output; None: keep verbatim."""
    if isinstance(content, str):
        return [_text(content)], None
    if not isinstance(content, list) or not content:
        return None
    blocks: list[m.ContentBlock] = []
    template: list[object] = []
    for part in content:
        if not isinstance(part, dict):
            return None
        kind = part.get("type")
        key = _TEXT_KEYS.get(kind) if isinstance(kind, str) else None
        extra = [k for k in _EMPTY_OK if part.get(k)]
        if key is not None and isinstance(part.get(key), str) and not extra:
            blocks.append(_text(part[key]))
            template.append({k: v for k, v in part.items() if k != key})
            continue
        image = None
        if kind == "input_image" and isinstance(part.get("image_url"), str):
            image = _data_url_image(part["image_url"])
        if image is not None:
            blocks.append(image)
            template.append({k: v for k, v in part.items() if k != "image_url"})
        else:
            blocks.append(_provider(part))
            template.append(None)
    return blocks, template


def _fill(template: object, blocks: list[m.ContentBlock]) -> object:
    """The content or tool output a template and its blocks stand for."""
    if template is None:
        return blocks[0].text.text if blocks else ""
    assert isinstance(template, list)
    out: list[object] = []
    for part, block in zip(template, blocks, strict=True):
        kind = block.WhichOneof("block")
        if part is None or kind == "provider":
            out.append(json.loads(block.provider.json))
        elif kind == "image":
            out.append({**part, "image_url": _image_url(block.image.mime_type, block.image.data)})
        else:
            out.append({**part, _TEXT_KEYS.get(part.get("type"), "text"): block.text.text})
    return out


def _message(role: m.Role.ValueType, blocks: list[m.ContentBlock], envelope: Item) -> m.Message:
    return m.Message(role=role, content=blocks, metadata={ENVELOPE_KEY: _dumps(envelope)})


def opaque_message(item: Mapping[str, Any]) -> m.Message:
    """An item kept verbatim: an assistant message with the item as one PROVIDER block."""
    return m.Message(role=m.ROLE_ASSISTANT, content=[_provider(item)])


def _without(item: Mapping[str, Any], *keys: str) -> Item:
    return {k: v for k, v in item.items() if k not in keys}


def _arguments_ok(arguments: object) -> bool:
    if not isinstance(arguments, str):
        return False
    if not arguments:
        return True
    try:
        return isinstance(json.loads(arguments), dict)
    except ValueError:
        return False


def _nonempty(item: Mapping[str, Any], *keys: str) -> bool:
    return all(isinstance(item.get(k), str) and item[k] for k in keys)


def _reasoning(item: Mapping[str, Any]) -> m.Message | None:
    summary = item.get("summary", [])
    if not _nonempty(item, "id") or not isinstance(summary, list) or item.get("content"):
        return None
    if not all(isinstance(p, dict) and p.get("type") == "summary_text" for p in summary):
        return None
    texts = [p.get("text") for p in summary]
    if not all(isinstance(t, str) for t in texts):
        return None
    encrypted = item.get("encrypted_content")
    if encrypted is not None and not isinstance(encrypted, str):
        return None
    signature: dict[str, object] = {"id": item["id"]}
    if encrypted:
        signature["encrypted_content"] = encrypted
    if len(texts) > 1 or (texts and not texts[0]):  # where the parts begin, as ingest keeps it
        signature["summary"] = [len(t) for t in texts]
    envelope = _without(item, "id", "summary")
    if encrypted:
        del envelope["encrypted_content"]
    envelope["summary"] = [{**_without(p, "text"), "$len": len(p["text"])} for p in summary]
    thinking = m.ThinkingContent(thinking="\n\n".join(texts), signature=_dumps(signature))
    return _message(m.ROLE_ASSISTANT, [m.ContentBlock(thinking=thinking)], envelope)


def item_to_message(item: Mapping[str, Any], tool_names: Mapping[str, str] = {}) -> m.Message:
    """The ctxwarden message of one Responses input item (see the module docstring).

    ``tool_names`` maps call IDs to tool names, for the ``tool_name`` of results."""
    kind = item.get("type", "message" if "role" in item else None)
    found: m.Message | None = None
    if kind == "message" and item.get("role") in ("user", "assistant"):
        parts = _parts(item.get("content"))
        if parts is not None:
            role = m.ROLE_USER if item["role"] == "user" else m.ROLE_ASSISTANT
            found = _message(role, parts[0], {**_without(item, "content"), "content": parts[1]})
    elif kind == "function_call" and _nonempty(item, "call_id", "name"):
        if _arguments_ok(item.get("arguments", "")):
            call = m.ToolCall(
                id=item["call_id"], name=item["name"], arguments_json=item.get("arguments", "")
            )
            envelope = _without(item, "call_id", "name", "arguments")
            envelope["$arguments"] = "arguments" in item
            found = _message(m.ROLE_ASSISTANT, [m.ContentBlock(tool_call=call)], envelope)
    elif kind == "function_call_output" and _nonempty(item, "call_id"):
        parts = _parts(item.get("output"))
        if parts is not None:
            found = _message(
                m.ROLE_TOOL_RESULT, parts[0], {**_without(item, "call_id"), "output": parts[1]}
            )
            found.tool_call_id = item["call_id"]
            found.tool_name = tool_names.get(item["call_id"], "")
    elif kind == "reasoning":
        found = _reasoning(item)
    return found if found is not None else opaque_message(item)


def _split(text: str, lengths: list[int]) -> list[str] | None:
    out, pos = [], 0
    for n in lengths:
        out.append(text[pos : pos + n])
        pos += n + 2
    return out if pos - 2 == len(text) or (not lengths and not text) else None


def _signature(signature: str) -> dict[str, Any] | None:
    try:
        value = json.loads(signature)
    except ValueError:
        return None
    if not isinstance(value, dict) or not isinstance(value.get("id"), str):
        return None
    return value


def _from_envelope(message: m.Message, envelope: Item) -> Item | None:
    blocks = list(message.content)
    if message.role == m.ROLE_TOOL_RESULT:
        output = _fill(envelope["output"], blocks)
        return {**envelope, "call_id": message.tool_call_id, "output": output}
    if len(blocks) == 1 and blocks[0].WhichOneof("block") == "tool_call":
        call = blocks[0].tool_call
        item = {**_without(envelope, "$arguments"), "call_id": call.id, "name": call.name}
        if envelope.get("$arguments", True):
            item["arguments"] = call.arguments_json
        return item
    if len(blocks) == 1 and blocks[0].WhichOneof("block") == "thinking":
        thinking = blocks[0].thinking
        signature = _signature(thinking.signature)
        summary = envelope.get("summary", [])
        texts = _split(thinking.thinking, [p["$len"] for p in summary])
        if signature is None or texts is None:
            return None
        parts = [{**_without(p, "$len"), "text": t} for p, t in zip(summary, texts, strict=True)]
        item = {**envelope, "id": signature["id"], "summary": parts}
        if "encrypted_content" in signature:
            item["encrypted_content"] = signature["encrypted_content"]
        return item
    if "content" in envelope:
        return {**envelope, "content": _fill(envelope["content"], blocks)}
    return None


def _canonical_parts(message: m.Message) -> list[object]:
    parts: list[object] = []
    for block in message.content:
        kind = block.WhichOneof("block")
        if kind == "text":
            parts.append({"type": "input_text", "text": block.text.text})
        elif kind == "image":
            url = _image_url(block.image.mime_type, block.image.data)
            parts.append({"type": "input_image", "image_url": url, "detail": "auto"})
        elif kind == "provider" and block.provider.family == FAMILY:
            parts.append(json.loads(block.provider.json))
    return parts


def _canonical(message: m.Message) -> list[Item]:
    """As ctxwarden's Responses renderer renders a message (reasoning with its id kept)."""
    blocks = list(message.content)
    if message.role in (m.ROLE_USER, m.ROLE_TOOL_RESULT):
        only_text = all(b.WhichOneof("block") == "text" for b in blocks)
        text = "".join(b.text.text for b in blocks)
        content: object = text if only_text else _canonical_parts(message)
        if message.role == m.ROLE_USER:
            return [{"role": "user", "content": content}]
        return [
            {"type": "function_call_output", "call_id": message.tool_call_id, "output": content}
        ]
    items: list[Item] = []
    for block in blocks:
        kind = block.WhichOneof("block")
        if kind == "text" and block.text.text:
            items.append({"role": "assistant", "content": block.text.text})
        elif kind == "tool_call":
            call = block.tool_call
            items.append(
                {
                    "type": "function_call",
                    "call_id": call.id,
                    "name": call.name,
                    "arguments": call.arguments_json or "{}",
                }
            )
        elif kind == "thinking" and (signature := _signature(block.thinking.signature)):
            items.append(_canonical_reasoning(block.thinking.thinking, signature))
        elif kind == "provider" and block.provider.family == FAMILY:
            value = json.loads(block.provider.json)
            items.extend(value if isinstance(value, list) else [value])
    return items


def _reasoning_parts(text: str, lengths: object) -> list[str] | None:
    """``text`` cut where a reasoning signature's part ``lengths`` say (None: no fit)."""
    if not isinstance(lengths, list) or not all(isinstance(n, int) for n in lengths):
        return None
    parts = _split(text, lengths)
    if parts is None or "\n\n".join(parts) != text:
        return None
    return parts


def _canonical_reasoning(text: str, signature: Mapping[str, Any]) -> Item:
    """A reasoning item as ctxwarden's renderer rebuilds it from its thinking block: the
    signature's ``summary`` (or ``content``) part lengths cut the text into its parts."""
    item: Item = {"type": "reasoning", "id": signature["id"]}
    content = _reasoning_parts(text, signature.get("content"))
    if content is not None:
        item["summary"] = []
        item["content"] = [{"type": "reasoning_text", "text": t} for t in content]
    else:
        summary = _reasoning_parts(text, signature.get("summary"))
        if summary is None:
            summary = [text] if text else []
        item["summary"] = [{"type": "summary_text", "text": t} for t in summary]
    if signature.get("encrypted_content"):
        item["encrypted_content"] = signature["encrypted_content"]
    return item


def message_to_items(message: m.Message) -> list[Item]:
    """The Responses items of a stored message: the item it was made from when it has
    an envelope, else the items ctxwarden's renderer would send."""
    raw = message.metadata.get(ENVELOPE_KEY)
    if raw:
        try:
            envelope = json.loads(raw)
        except ValueError:
            envelope = None
        if isinstance(envelope, dict):
            try:
                item = _from_envelope(message, envelope)
            except (ValueError, KeyError, TypeError, AssertionError):
                item = None  # the content was changed (a truncated or stubbed tool output)
            if item is not None:
                return [item]
    return _canonical(message)
