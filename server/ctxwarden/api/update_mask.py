"""The field mask of an Update RPC (UpdateSession, UpdateMemory)."""

from __future__ import annotations

from collections.abc import Sequence

from google.protobuf.field_mask_pb2 import FieldMask

from ctxwarden.core.errors import InvalidArgument
from ctxwarden.core.reasons import ErrorReason


def mask_paths(mask: FieldMask, updatable: Sequence[str]) -> list[str]:
    """The fields to change: the mask's paths, or all of ``updatable`` for
    ``*``; INVALID_ARGUMENT for an empty mask or a field that cannot change."""
    paths = list(mask.paths)
    if not paths:
        raise InvalidArgument(
            f"update_mask is required: list the fields to change, e.g. [{', '.join(updatable)}] "
            "(or '*' for all of them)",
            reason=ErrorReason.MISSING_FIELD,
            field="update_mask",
        )
    if paths == ["*"]:
        return list(updatable)
    for path in paths:
        if path not in updatable:
            raise InvalidArgument(
                f"update_mask path {path!r} cannot be updated; allowed: {', '.join(updatable)}",
                reason=ErrorReason.INVALID_UPDATE_MASK,
                field="update_mask",
            )
    return paths
