"""Strict validation of rendered bodies with the providers' official SDK types.

The openai and anthropic request types are TypedDicts: pydantic validates
them but ignores unknown keys (and validates ``Iterable`` fields lazily). So
the validated value is materialised (which runs the lazy validation) and must
equal the input: a misspelt key is dropped by validation and shows up as a
difference. google-genai's types are pydantic models with ``extra="forbid"``;
a rendered body must survive validation and a by-alias dump unchanged, which
also pins the camelCase field names.
"""

from __future__ import annotations

import base64
import functools
import itertools
import json
import re
from collections.abc import Iterable, Mapping
from typing import Any

import anthropic.types.message_create_params as anthropic_params
import openai.types.chat.completion_create_params as chat_params
import openai.types.responses.response_create_params as responses_params
from google.genai import types as gtypes
from pydantic import BaseModel, TypeAdapter

from ctxwarden.core.render import Format

MODEL_FIELDS: Mapping[Format, dict[str, Any]] = {
    Format.OPENAI_CHAT: {"model": "gpt-test"},
    Format.OPENAI_RESPONSES: {"model": "gpt-test"},
    Format.ANTHROPIC_MESSAGES: {"model": "claude-test", "max_tokens": 1024},
}

ARRAY_KEY: Mapping[Format, str] = {
    Format.OPENAI_CHAT: "messages",
    Format.OPENAI_RESPONSES: "input",
    Format.ANTHROPIC_MESSAGES: "messages",
    Format.GEMINI: "contents",
}


@functools.cache
def _adapter(fmt: Format) -> TypeAdapter[Any]:
    if fmt is Format.OPENAI_CHAT:
        return TypeAdapter(chat_params.CompletionCreateParamsNonStreaming)
    if fmt is Format.OPENAI_RESPONSES:
        return TypeAdapter(responses_params.ResponseCreateParamsNonStreaming)
    if fmt is Format.ANTHROPIC_MESSAGES:
        return TypeAdapter(anthropic_params.MessageCreateParamsNonStreaming)
    raise ValueError(fmt)


def materialize(value: Any) -> Any:
    """Plain dicts and lists, with pydantic's lazy iterators run to the end."""
    if isinstance(value, Mapping):
        return {k: materialize(v) for k, v in value.items()}
    if isinstance(value, (str, bytes, int, float, bool)) or value is None:
        return value
    if isinstance(value, Iterable):
        return [materialize(v) for v in value]
    raise AssertionError(f"unexpected validated value {value!r}")


def validate_typed(fmt: Format, body: dict[str, Any]) -> None:
    """Validate a whole OpenAI/Anthropic request (fragment plus model) strictly."""
    request = {**MODEL_FIELDS[fmt], **body}
    validated = materialize(_adapter(fmt).validate_python(request))
    assert validated == request, _first_difference(request, validated)


def _first_difference(want: Any, got: Any, path: str = "$") -> str:
    if isinstance(want, dict) and isinstance(got, dict):
        for key in want.keys() | got.keys():
            if key not in got:
                return f"{path}.{key}: not in the SDK type (dropped by validation)"
            if key not in want:
                return f"{path}.{key}: added by validation"
            diff = _first_difference(want[key], got[key], f"{path}.{key}")
            if diff:
                return diff
        return ""
    if isinstance(want, list) and isinstance(got, list):
        if len(want) != len(got):
            return f"{path}: {len(want)} items became {len(got)}"
        for i, (w, g) in enumerate(zip(want, got, strict=True)):
            diff = _first_difference(w, g, f"{path}[{i}]")
            if diff:
                return diff
        return ""
    return "" if want == got else f"{path}: {want!r} became {got!r}"


# -- Gemini ----------------------------------------------------------------------

_BYTES_FIELDS = {"data", "thoughtSignature"}
_PART_DATA = {"text", "inlineData", "functionCall", "functionResponse"}


def _decode(text: str) -> bytes:
    return base64.b64decode(text.replace("-", "+").replace("_", "/"), validate=True)


def _standard_base64(value: Any) -> Any:
    """Bytes fields in one alphabet: pydantic dumps URL-safe base64, the
    renderer writes standard base64 (and passes a URL-safe signature on)."""
    if isinstance(value, dict):
        return {
            k: (
                base64.b64encode(_decode(v)).decode()
                if k in _BYTES_FIELDS and isinstance(v, str)
                else _standard_base64(v)
            )
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [_standard_base64(v) for v in value]
    return value


def _gemini_roundtrip(model: type[BaseModel], value: dict[str, Any]) -> None:
    parsed = model.model_validate_json(json.dumps(value))
    dumped = _standard_base64(parsed.model_dump(mode="json", by_alias=True, exclude_none=True))
    want = _standard_base64(value)
    assert dumped == want, _first_difference(want, dumped)


def validate_gemini(body: dict[str, Any]) -> None:
    assert set(body) <= {"systemInstruction", "contents", "tools"}, body.keys()
    config: dict[str, Any] = {k: body[k] for k in ("systemInstruction", "tools") if k in body}
    _gemini_roundtrip(gtypes.GenerateContentConfig, config)
    for content in body["contents"]:
        _gemini_roundtrip(gtypes.Content, content)
        assert content["role"] in {"user", "model"}, content["role"]
        assert content["parts"], "a content needs parts"
        for part in content["parts"]:
            assert len(_PART_DATA & part.keys()) == 1, part
            if "functionResponse" in part:
                assert content["role"] == "user"
            if "functionCall" in part or part.get("thought"):
                assert content["role"] == "model"


def validate(fmt: Format, body: dict[str, Any]) -> None:
    if fmt is Format.GEMINI:
        validate_gemini(body)
    else:
        validate_typed(fmt, body)


# -- provider rules the types cannot express ----------------------------------------

ANTHROPIC_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")


def check_anthropic_rules(body: dict[str, Any]) -> None:
    messages = body["messages"]
    roles = [m["role"] for m in messages]
    if roles:
        assert roles[0] == "user"
    assert all(a != b for a, b in itertools.pairwise(roles)), roles
    breakpoints = json.dumps(body).count('"cache_control"')
    assert breakpoints <= 4
    seen: set[str] = set()
    for i, message in enumerate(messages):
        assert message["content"], f"messages[{i}] is empty"
        kinds = [b["type"] for b in message["content"]]
        if "tool_result" in kinds:
            # results first, then any text
            first_other = next((j for j, k in enumerate(kinds) if k != "tool_result"), len(kinds))
            assert "tool_result" not in kinds[first_other:], kinds
        for block in message["content"]:
            if block["type"] == "text":
                assert block["text"], "empty text block"
            if block["type"] == "tool_use":
                assert ANTHROPIC_ID.fullmatch(block["id"]), block["id"]
                assert block["id"] not in seen, f"repeated tool_use id {block['id']}"
                seen.add(block["id"])
                answered = {
                    b["tool_use_id"]
                    for b in messages[i + 1]["content"]
                    if b["type"] == "tool_result"
                }
                assert block["id"] in answered


def check_chat_rules(body: dict[str, Any]) -> None:
    messages = body["messages"]
    for i, message in enumerate(messages):
        if message["role"] == "assistant":
            assert message["content"] is not None or message.get("tool_calls")
        calls = [c["id"] for c in message.get("tool_calls", [])]
        for call_id in calls:
            assert 1 <= len(call_id) <= 40, call_id
        answers = [m["tool_call_id"] for m in messages[i + 1 : i + 1 + len(calls)]]
        assert sorted(answers) == sorted(calls), (calls, answers)


def check_responses_rules(body: dict[str, Any]) -> None:
    items = body["input"]
    outputs = [it["call_id"] for it in items if it.get("type") == "function_call_output"]
    calls = [it["call_id"] for it in items if it.get("type") == "function_call"]
    assert sorted(outputs) == sorted(calls)
    assert len(set(calls)) == len(calls)
    for call_id in calls:
        assert 1 <= len(call_id) <= 64, call_id


def check_gemini_rules(body: dict[str, Any]) -> None:
    contents = body["contents"]
    roles = [c["role"] for c in contents]
    if roles:
        assert roles[0] == "user"
    assert all(a != b for a, b in itertools.pairwise(roles)), roles
    for content in contents:
        for part in content["parts"]:
            if "thoughtSignature" in part:
                assert part["thoughtSignature"], "empty thought signature"


def check_rules(fmt: Format, body: dict[str, Any]) -> None:
    {
        Format.OPENAI_CHAT: check_chat_rules,
        Format.OPENAI_RESPONSES: check_responses_rules,
        Format.ANTHROPIC_MESSAGES: check_anthropic_rules,
        Format.GEMINI: check_gemini_rules,
    }[fmt](body)
