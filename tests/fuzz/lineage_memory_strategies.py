"""Targeted requests for the fork, archive and long-term memory RPCs.

Kept apart from ``strategies`` (which merges ``LINEAGE_MEMORY_TARGETED`` into its
``TARGETED`` table) so neither module grows past a readable size. Forks start from
real pool sessions at real and impossible seqs; archiving only touches victims, so
the pool stays writable; memory requests aim at the pool's seeded memories.
"""

from __future__ import annotations

from collections.abc import Callable

from google.protobuf import field_mask_pb2
from hypothesis import strategies as st

from ctxwarden.v1 import context_service_pb2 as pb
from ctxwarden.v1 import memory_pb2 as mem
from tests.fuzz.harness import Pool
from tests.fuzz.strategies import (
    ID_EDGES,
    UNKNOWN_IDS,
    Strategy,
    count,
    enum_numbers,
    int64s,
    keys,
    metadata,
    odd_text,
    pick,
    session_ids,
    text,
)

SCOPES = ["", "alice", "bob", "proj-1", "a" * 128, "a" * 300, "user/../x", "é"]
"""user_id / project_id values: the pool's own, empty, oversized and odd ones."""

MEMORY_KEYS = ["", "", "editor", "lang", "k" * 128, "k" * 129, "a b", "é", "\x00"]
MEMORY_PATHS = ["text", "labels", "pinned", "state", "key", "*"]
BAD_MEMORY_PATHS = ["", "memory_id", "user_id", "etag", "create_time", "TEXT", "labels.k"]
UNKNOWN_MEMORY_IDS = ["01J00000000000000000000000", "m", "0" * 26, "z" * 40]


def _fork(pool: Pool, h: bool) -> Strategy:
    def build(sid: str, at_seq: int, new_id: str, key: str) -> pb.ForkSessionRequest:
        return pb.ForkSessionRequest(
            session_id=sid, at_seq=at_seq, new_session_id=new_id, request_id=key
        )

    new_ids = pick(
        h,
        st.just(""),
        st.sampled_from(pool.sessions),  # ALREADY_EXISTS
        st.sampled_from(ID_EDGES),
        st.from_regex(r"fork-[a-z0-9]{1,8}", fullmatch=True),
    )
    return st.builds(
        build, session_ids(pool, h), pick(h, count(False, 0, 12), int64s()), new_ids, keys(h)
    )


def _archived_ids(pool: Pool, h: bool) -> Strategy:
    """Victims only: an archived pool session would refuse every later fuzzed write."""
    return pick(h, st.sampled_from(pool.victims), st.sampled_from(ID_EDGES + UNKNOWN_IDS))


def _memory_ids(pool: Pool, h: bool) -> Strategy:
    known = st.sampled_from(pool.memories) if pool.memories else st.just(UNKNOWN_MEMORY_IDS[0])
    return pick(
        h, known, st.sampled_from(UNKNOWN_MEMORY_IDS), st.sampled_from(ID_EDGES), odd_text(20)
    )


def _memory(pool: Pool, h: bool, memory_id: Strategy) -> st.SearchStrategy[mem.Memory]:
    return st.builds(
        mem.Memory,
        memory_id=memory_id,
        user_id=pick(h, st.sampled_from(SCOPES[:4]), st.sampled_from(SCOPES)),
        project_id=pick(h, st.sampled_from(SCOPES[:4]), st.sampled_from(SCOPES)),
        key=st.sampled_from(MEMORY_KEYS) if h else st.sampled_from(MEMORY_KEYS[:5]),
        text=pick(h, st.sampled_from(["Prefers tabs.", "Uses Python 3.11."]), text(h, 80)),
        labels=metadata(h),
        pinned=st.booleans(),
        state=enum_numbers(h, 2),
    )


def _create_memory(pool: Pool, h: bool) -> Strategy:
    return st.builds(mem.CreateMemoryRequest, memory=_memory(pool, h, st.just("")))


def _update_memory(pool: Pool, h: bool) -> Strategy:
    paths = pick(
        h,
        st.lists(st.sampled_from(MEMORY_PATHS), min_size=1, max_size=3, unique=True),
        st.lists(st.sampled_from(MEMORY_PATHS + BAD_MEMORY_PATHS), max_size=3),
    )
    return st.builds(
        mem.UpdateMemoryRequest,
        memory=_memory(pool, h, _memory_ids(pool, h)),
        update_mask=paths.map(lambda p: field_mask_pb2.FieldMask(paths=p)),
        etag=pick(h, st.just(""), st.sampled_from(['"1"', "1", "x" * 300]), odd_text(8)),
    )


def _list_memories(pool: Pool, h: bool) -> Strategy:
    return st.builds(
        mem.ListMemoriesRequest,
        user_id=pick(h, st.sampled_from(SCOPES[:4]), st.sampled_from(SCOPES)),
        project_id=pick(h, st.sampled_from(SCOPES[:4]), st.sampled_from(SCOPES)),
        labels=metadata(h),
        state=enum_numbers(h, 2),
        page_size=count(h, 0, 3, bits=32),
        page_token=pick(h, st.just(""), odd_text(30)),
        key=st.sampled_from(MEMORY_KEYS) if h else st.sampled_from(MEMORY_KEYS[:5]),
    )


LINEAGE_MEMORY_TARGETED: dict[str, Callable[[Pool, bool], Strategy]] = {
    "ForkSession": _fork,
    "ArchiveSession": lambda p, h: st.builds(
        pb.ArchiveSessionRequest, session_id=_archived_ids(p, h)
    ),
    "UnarchiveSession": lambda p, h: st.builds(
        pb.UnarchiveSessionRequest, session_id=st.one_of(_archived_ids(p, h), session_ids(p, h))
    ),
    "CreateMemory": _create_memory,
    "GetMemory": lambda p, h: st.builds(mem.GetMemoryRequest, memory_id=_memory_ids(p, h)),
    "ListMemories": _list_memories,
    "UpdateMemory": _update_memory,
    "DeleteMemory": lambda p, h: st.builds(mem.DeleteMemoryRequest, memory_id=_memory_ids(p, h)),
    # The usage ledger: a session's, or the tenant's ("").
    "GetUsage": lambda p, h: st.builds(
        pb.GetUsageRequest, session_id=st.one_of(st.just(""), session_ids(p, h))
    ),
}
"""``(pool, hostile) -> strategy`` for the RPCs of forks, archiving and memories."""
