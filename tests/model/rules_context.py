"""Rules that change what the model input holds besides appends: rollbacks (plain and
``to_seq``), agent-side and server compactions with layered clearing, forks of forks,
memory writes and refreshes."""

from __future__ import annotations

import grpc
from hypothesis import strategies as st
from hypothesis.stateful import precondition, rule

from ctxwarden.v1 import context_service_pb2 as pb
from ctxwarden.v1 import memory_pb2 as mem
from tests.model import checks
from tests.model.base import PICK, STATS, WORDS, Base, logged
from tests.model.reference import Ref


class ContextRules(Base):
    @precondition(lambda self: self.writable())
    @rule(n=PICK, back=st.integers(0, 6), plain=st.booleans())
    @logged
    def rollback(self, n: int, back: int, plain: bool) -> None:
        ref = self.pick(self.writable(), n)
        req = pb.RollbackTurnRequest(session_id=ref.sid)
        if not plain:
            if ref.last_seq == 0:
                return
            req.to_seq = max(1, ref.last_seq - back)
        try:
            resp = self.stub.RollbackTurn(req)
        except grpc.RpcError as err:
            if err.code() != grpc.StatusCode.FAILED_PRECONDITION:
                raise
            return  # nothing to roll back
        seqs = list(resp.rolled_back_seqs)
        latest = self.cache.latest[ref.sid]
        # A rewind to before the checkpoint supersedes it and drops the replica's copy.
        across = not plain and bool(latest.compaction_id)
        across = across and req.to_seq < latest.first_kept_seq - 1
        if seqs or across:
            self.cache.wrote(self.replica, ref.sid, "rollback")
            self.handed_over(ref, req.to_seq + 1 if across else min(seqs))
        if across:
            self.cache.dropped(self.replica, ref.sid)
        ref.rolled_back(seqs)

    def handed_over(self, parent: Ref, from_seq: int) -> None:
        """Forks made at the parent's last seq take the rows it marks rolled back over
        first (store.lineage.hand_over): a write of theirs, on no replica."""
        for child in self.live():
            at_end = child.parent == parent.sid and child.fork_seq == parent.last_seq + 1
            if at_end and child.parent_seq >= from_seq:
                self.cache.bumped(child.sid, "handover")
                child.parent_seq = from_seq - 1

    @precondition(lambda self: self.writable())
    @rule(n=PICK, keep=st.integers(0, 200), server=st.booleans())
    @logged
    def compact(self, n: int, keep: int, server: bool) -> None:
        ref = self.pick(self.writable(), n)
        try:
            if server:
                self.stub.Compact(pb.CompactRequest(session_id=ref.sid, keep_recent_tokens=keep))
            else:
                plan = self.stub.PrepareCompaction(
                    pb.PrepareCompactionRequest(session_id=ref.sid, keep_recent_tokens=keep)
                )
                self.stub.CommitCompaction(
                    pb.CommitCompactionRequest(
                        session_id=ref.sid,
                        plan_id=plan.plan_id,
                        summary=f"summary {n}",
                        turn_prefix_summary="prefix" if plan.split_turn else "",
                    )
                )
        except grpc.RpcError as err:
            if err.code() != grpc.StatusCode.FAILED_PRECONDITION:
                raise
            return  # nothing to compact
        self.cache.wrote(self.replica, ref.sid, "compaction")
        STATS["compactions"] += 1

    @precondition(lambda self: self.writable())
    @rule(n=PICK)
    @logged
    def auto_compact(self, n: int) -> None:
        ref = self.pick(self.writable(), n)
        self.build(ref.sid, auto_compact=True, max_output_tokens=3900)

    @precondition(lambda self: self.live())
    @rule(n=PICK, at=PICK)
    @logged
    def fork(self, n: int, at: int) -> None:
        source = self.pick(self.live(), n)
        if source.archived:
            return
        k = 1 + at % (source.last_seq + 1)
        forked = self.stub.ForkSession(pb.ForkSessionRequest(session_id=source.sid, at_seq=k))
        self.cache.created(forked.session_id, self.replica, model=forked.model)
        child = source.fork(forked.session_id, k)
        assert forked.parent_seq == child.parent_seq, (forked.parent_seq, child.parent_seq)
        if self.watch.watches(source.sid):
            self.watch.watch(self.stub, child.sid)
        got = checks.normalized(self.build(child.sid, settle=False))
        assert got == child.latest, f"fork != replay:\n{checks.diff(child.latest, got)}"
        self.refs[child.sid] = child
        self.after_growth(child.sid)
        STATS["forks"] += 1

    @precondition(lambda self: self.live())
    @rule(n=PICK, text=WORDS, pinned=st.booleans())
    @logged
    def write_memory(self, n: int, text: str, pinned: bool) -> None:
        ref = self.pick(self.live(), n)
        self.stub.CreateMemory(
            mem.CreateMemoryRequest(
                memory=mem.Memory(user_id=ref.user_id, text=f"remember {text}", pinned=pinned)
            )
        )

    @precondition(lambda self: self.writable())
    @rule(n=PICK)
    @logged
    def refresh_memory(self, n: int) -> None:
        ref = self.pick(self.writable(), n)
        self.build(ref.sid, refresh_memory=True)
