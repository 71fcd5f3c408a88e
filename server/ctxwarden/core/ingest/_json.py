"""Reading parsed provider JSON with the path of every value, for errors."""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from ctxwarden.core.errors import InvalidArgument
from ctxwarden.core.reasons import ErrorReason
from ctxwarden.core.surrogates import escapes_surrogate, has_lone_surrogate

JsonObject = dict[str, Any]


def bad(path: str, message: str) -> InvalidArgument:
    """The one error of this package: ``field`` is the JSON path of the culprit."""
    return InvalidArgument(
        f"{path}: {message}", reason=ErrorReason.INVALID_MODEL_OUTPUT, field=path
    )


def unsupported(path: str, what: str) -> InvalidArgument:
    return bad(path, f"{what} is not supported: ctxwarden cannot store it yet")


def _kind(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


def dumps(value: object) -> str:
    """Compact JSON, key order kept (as the renderers write it)."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


@dataclass(frozen=True, slots=True)
class Obj:
    """A JSON object and its path. ``camel`` objects (Gemini) also answer to the
    snake_case spelling of a key, as the google-genai SDK dumps them."""

    value: JsonObject
    path: str
    camel: bool = False

    def key(self, key: str) -> str:
        """How ``key`` is spelt in this object."""
        if key in self.value or not self.camel:
            return key
        snake = "".join(f"_{c.lower()}" if c.isupper() else c for c in key)
        return snake if snake in self.value else key

    def has(self, key: str) -> bool:
        return self.get(key) is not None

    def get(self, key: str) -> object:
        return self.value.get(self.key(key))

    def at(self, key: str) -> str:
        return f"{self.path}.{self.key(key)}"

    def obj(self, key: str) -> Obj:
        return as_obj(self.get(key), self.at(key), camel=self.camel)

    def opt_obj(self, key: str) -> Obj | None:
        return None if self.get(key) is None else self.obj(key)

    def arr(self, key: str) -> Arr:
        return as_arr(self.get(key), self.at(key), camel=self.camel)

    def opt_arr(self, key: str) -> Arr:
        """The array, or an empty one when the key is missing or null."""
        if self.get(key) is None:
            return Arr([], self.at(key), self.camel)
        return self.arr(key)

    def string(self, key: str) -> str:
        """A required string."""
        value = self.get(key)
        if not isinstance(value, str):
            raise bad(self.at(key), f"must be a string, got {_kind(value)}")
        return value

    def opt_str(self, key: str) -> str:
        """A string; "" when missing or null."""
        return "" if self.get(key) is None else self.string(key)

    def nonempty_str(self, key: str) -> str:
        value = self.string(key)
        if not value:
            raise bad(self.at(key), "must not be empty")
        return value

    def count(self, key: str) -> int:
        """A non-negative integer; 0 when missing or null."""
        value = self.get(key)
        if value is None:
            return 0
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise bad(self.at(key), f"must be a non-negative integer, got {_kind(value)}")
        return value

    def opt_int(self, key: str) -> int | None:
        return None if self.get(key) is None else self.count(key)

    def flag(self, key: str) -> bool:
        value = self.get(key)
        if value is None:
            return False
        if not isinstance(value, bool):
            raise bad(self.at(key), f"must be a boolean, got {_kind(value)}")
        return value

    def kind(self) -> str:
        return self.string("type")


@dataclass(frozen=True, slots=True)
class Arr:
    value: list[Any]
    path: str
    camel: bool = False

    def __len__(self) -> int:
        return len(self.value)

    def at(self, index: int) -> str:
        return f"{self.path}[{index}]"

    def objs(self) -> Iterator[Obj]:
        for i, item in enumerate(self.value):
            yield as_obj(item, self.at(i), camel=self.camel)

    def first_obj(self) -> Obj | None:
        return as_obj(self.value[0], self.at(0), camel=self.camel) if self.value else None


def as_obj(value: object, path: str, *, camel: bool = False) -> Obj:
    if not isinstance(value, dict):
        raise bad(path, f"must be an object, got {_kind(value)}")
    return Obj(value, path, camel)


def as_arr(value: object, path: str, *, camel: bool = False) -> Arr:
    if not isinstance(value, list):
        raise bad(path, f"must be an array, got {_kind(value)}")
    return Arr(value, path, camel)


def _no_constants(name: str) -> object:
    raise ValueError(f"non-standard JSON constant {name}")


def arguments_json(text: str, path: str) -> str:
    """Tool-call arguments given as JSON text: kept byte for byte, if an object
    (the document was checked for lone surrogates; this JSON inside it is too)."""
    if not text.strip():
        return "{}"
    try:
        value = json.loads(text, parse_constant=_no_constants)
    except (ValueError, RecursionError) as exc:
        raise bad(path, f"tool-call arguments are not valid JSON: {exc}") from None
    if not isinstance(value, dict):
        raise bad(path, f"tool-call arguments must be a JSON object, got {_kind(value)}")
    if escapes_surrogate(text) and has_lone_surrogate(value):
        raise bad(
            path,
            "tool-call arguments escape a lone surrogate (\\ud800-\\udfff), which is not a "
            "character and cannot be encoded as UTF-8; send the character or a surrogate pair",
        )
    return text


def arguments_object(value: object, path: str) -> str:
    """Tool-call arguments given as a parsed object, as compact JSON text."""
    if value is None:
        return "{}"
    if not isinstance(value, dict):
        raise bad(path, f"tool-call arguments must be an object, got {_kind(value)}")
    try:
        return dumps(value)
    except (ValueError, RecursionError) as exc:
        raise bad(path, f"tool-call arguments cannot be written as JSON: {exc}") from None


def decode_base64(text: str, path: str) -> bytes:
    """Standard or URL-safe base64 (google-genai dumps bytes URL-safe)."""
    for altchars in (None, b"-_"):
        try:
            return base64.b64decode(text, altchars=altchars, validate=True)
        except (binascii.Error, ValueError):
            continue
    raise bad(path, "is not valid base64")


def image_data_url(url: str, path: str) -> tuple[str, bytes]:
    """(media type, bytes) of a ``data:<type>;base64,<data>`` URL."""
    head, sep, data = url.partition(",")
    if not (sep and head.startswith("data:") and head.endswith(";base64")):
        raise unsupported(path, "an image by URL (only base64 data: URLs)")
    return head[len("data:") : -len(";base64")], decode_base64(data, path)
