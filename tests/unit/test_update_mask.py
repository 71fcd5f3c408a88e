"""api.update_mask.mask_paths: the one check of UpdateSession's and UpdateMemory's masks."""

from __future__ import annotations

import pytest
from google.protobuf.field_mask_pb2 import FieldMask

from ctxwarden.api.update_mask import mask_paths
from ctxwarden.core.errors import InvalidArgument
from ctxwarden.core.reasons import ErrorReason

UPDATABLE = ("title", "labels")


def test_named_paths_are_kept_and_star_names_every_updatable_field() -> None:
    assert mask_paths(FieldMask(paths=["labels"]), UPDATABLE) == ["labels"]
    assert mask_paths(FieldMask(paths=["*"]), UPDATABLE) == ["title", "labels"]


def test_an_empty_mask_is_refused_with_the_fields_to_choose_from() -> None:
    with pytest.raises(InvalidArgument) as raised:
        mask_paths(FieldMask(), UPDATABLE)
    assert raised.value.reason == ErrorReason.MISSING_FIELD
    assert raised.value.field == "update_mask"
    assert "e.g. [title, labels] (or '*' for all of them)" in str(raised.value)


def test_a_field_that_cannot_change_is_refused() -> None:
    with pytest.raises(InvalidArgument) as raised:
        mask_paths(FieldMask(paths=["title", "last_seq"]), UPDATABLE)
    assert raised.value.reason == ErrorReason.INVALID_UPDATE_MASK
    assert raised.value.field == "update_mask"
    assert "'last_seq' cannot be updated; allowed: title, labels" in str(raised.value)
