"""Domain enums against the API's: one map each way, and the stored integers."""

from __future__ import annotations

import json

import pytest

from ctxwarden.api.convert import method_to_pb, trigger_from_pb, trigger_to_pb
from ctxwarden.core.model_input import TokenCountMethod
from ctxwarden.core.session import Checkpoint, CompactionTrigger
from ctxwarden.store.checkpoint_codec import checkpoint_details
from ctxwarden.v1 import context_service_pb2 as pb


@pytest.mark.parametrize("trigger", list(CompactionTrigger))
def test_every_trigger_maps_to_its_proto_value_and_back(trigger: CompactionTrigger) -> None:
    value = pb.CompactionTrigger.Value(f"COMPACTION_TRIGGER_{trigger.name}")
    assert trigger_to_pb(trigger) == value
    assert trigger_from_pb(value) is trigger


def test_trigger_from_pb_defaults_to_manual_and_rejects_unknown_values() -> None:
    assert trigger_from_pb(pb.COMPACTION_TRIGGER_UNSPECIFIED) is CompactionTrigger.MANUAL
    assert trigger_from_pb(99) is None
    assert len(CompactionTrigger) == len(pb.CompactionTrigger.values()) - 1


@pytest.mark.parametrize("method", list(TokenCountMethod))
def test_every_token_count_method_maps_to_its_proto_value(method: TokenCountMethod) -> None:
    assert method_to_pb(method) == pb.TokenCountMethod.Value(f"TOKEN_COUNT_METHOD_{method.name}")
    assert len(TokenCountMethod) == len(pb.TokenCountMethod.values()) - 1


def test_stored_triggers_stay_the_same_integers() -> None:
    """Checkpoints and compaction plans store the trigger as an integer."""
    assert {t.name: int(t) for t in CompactionTrigger} == {
        "MANUAL": 1,
        "THRESHOLD": 2,
        "OVERFLOW": 3,
        "BACKGROUND": 4,
    }
    c = Checkpoint("c1", "s1", "sum", 10, 9000, 0, trigger=CompactionTrigger.THRESHOLD)
    assert json.loads(checkpoint_details(c))["trigger"] == 2
