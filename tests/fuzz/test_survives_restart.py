"""After the fuzzing, every session is readable and restores to the same bytes.

Runs last in this folder (file order), over every session created since the
fuzzed server started: the database invariants hold, GetSession,
BuildModelInput, ListMessages and ListCompactions answer for each one and agree
with the database, and after a restart BuildModelInput returns byte-identical
input, so nothing hostile that was stored changes meaning on its way through
the database.
"""

from __future__ import annotations

from google.protobuf.message import Message

from ctxwarden.v1 import context_service_pb2 as pb
from tests.fuzz.consistency import api_problems
from tests.fuzz.harness import FuzzTarget


def differences(before: Message, after: Message, path: str = "") -> list[str]:
    """Field paths whose values differ, e.g. ``messages[3].token_count: 7 -> 9``."""
    out: list[str] = []
    for field in before.DESCRIPTOR.fields:
        name = f"{path}{field.name}"
        old, new = getattr(before, field.name), getattr(after, field.name)
        if old == new:
            continue
        if field.message_type is not None and not field.is_repeated:
            out += differences(old, new, f"{name}.")
        elif field.message_type is not None and field.message_type.GetOptions().map_entry:
            out.append(f"{name}: {dict(old)} -> {dict(new)}")
        elif field.message_type is not None:
            for i, (a, b) in enumerate(zip(old, new, strict=False)):
                out += differences(a, b, f"{name}[{i}].")
            if len(old) != len(new):
                out.append(f"{name}: {len(old)} -> {len(new)} items")
        else:
            out.append(f"{name}: {str(old)[:80]!r} -> {str(new)[:80]!r}")
    return out


def test_every_session_reads_back_the_same_after_a_restart(fuzz: FuzzTarget) -> None:
    fuzz.assert_consistent()
    problems, before = api_problems(fuzz.channel, fuzz.url, fuzz.since_us)
    assert not problems, "\n".join(problems[:20])
    assert len(before) >= len(fuzz.pool.sessions)
    fuzz.server.restart()
    fuzz.assert_healthy()
    problems, after = api_problems(fuzz.channel, fuzz.url, fuzz.since_us)
    assert not problems, "\n".join(problems[:20])
    changed = {
        sid: differences(pb.ModelInput.FromString(raw), pb.ModelInput.FromString(after[sid]))
        for sid, raw in before.items()
        if after.get(sid) != raw
    }
    assert not changed, "BuildModelInput changed across a restart:\n" + "\n".join(
        f"{sid}: {diff[:8]}" for sid, diff in list(changed.items())[:10]
    )
    fuzz.assert_consistent()
