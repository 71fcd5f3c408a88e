"""JSON object states (google.protobuf.Struct) <-> domain mappings."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from google.protobuf import json_format
from google.protobuf.struct_pb2 import Struct

from ctxwarden.core.errors import InvalidArgument
from ctxwarden.core.reasons import ErrorReason
from ctxwarden.core.state import check_state


def _finite(value: object, field: str) -> None:
    """JSON has no NaN or infinity; a Struct number may be either."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, float) and not math.isfinite(item):
            raise InvalidArgument(
                f"{field} holds a number that is not finite (NaN or infinity), which JSON "
                "cannot carry",
                reason=ErrorReason.INVALID_JSON,
                field=field,
            )
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)


def struct_to_dict(value: Struct, field: str) -> dict[str, Any]:
    """A client's JSON object (its size and depth checked)."""
    decoded: dict[str, Any] = json_format.MessageToDict(value)
    _finite(decoded, field)
    check_state(decoded, field)
    return decoded


def dict_to_struct(value: Mapping[str, Any]) -> Struct:
    out = Struct()
    if value:
        out.update(dict(value))
    return out
