"""Rules over whole sessions: create (with labels), label updates and the console's
label search, archive/unarchive, export -> import, delete and purge, restarts."""

from __future__ import annotations

import grpc
from google.protobuf import field_mask_pb2
from hypothesis import strategies as st
from hypothesis.stateful import precondition, rule

from ctxwarden.v1 import context_service_pb2 as pb
from ctxwarden.v1 import session_pb2 as ses
from tests.model import background, checks
from tests.model.background import configure as configure_background
from tests.model.base import PICK, STATS, Base, logged, new_id
from tests.model.reference import Ref

TEAMS = st.sampled_from(["red", "blü", "a=b"])
"""Label values: plain, not ASCII, holding the console's key=value separator."""
TIERS = st.sampled_from(["", "gold", "free"])
"""'' leaves the label out."""
OTHER_TOKENIZER = {"heuristic": "tiktoken:o200k_base", "tiktoken:o200k_base": "heuristic"}
OTHER_MODEL = {"gpt-4o": "claude-sonnet-4-5", "claude-sonnet-4-5": "gpt-4o"}
"""Each counts every message otherwise (its own framing): UpdateSession recounts them."""


class SessionRules(Base):
    def labels(self, team: str, tier: str) -> dict[str, str]:
        return {"run": self.run, "team": team, **({"tier": tier} if tier else {})}

    @rule(
        memory=st.booleans(),
        clearing=st.booleans(),
        team=TEAMS,
        tier=TIERS,
        background=st.sampled_from(background.MODES),
    )
    @logged
    def create_session(
        self, memory: bool, clearing: bool, team: str, tier: str, background: str
    ) -> None:
        STATS["steps"] += 1
        user_id = self.users[len(self.refs) % 2]
        policy = ses.ContextPolicy(
            tokenizer="heuristic",
            context_window=4000,
            keep_recent_tokens=60,
            memory_max_tokens=120 if memory else 0,
            clear_tool_results_at_least=40 if clearing else 0,
        )
        configure_background(policy, background)
        tools = [ses.ToolDefinition(name="read", description="Read", parameters_json="{}")]
        labels = self.labels(team, tier)
        session = self.stub.CreateSession(
            pb.CreateSessionRequest(
                session_id=f"m-{new_id()[:12]}",
                session=ses.Session(
                    system_prompt="Model test.",
                    model="gpt-4o",
                    policy=policy,
                    tools=tools,
                    user_id=user_id,
                    title='it\'s a "title" \\ with quotes',
                    labels=labels,
                ),
            )
        )
        self.cache.created(session.session_id, self.replica)
        self.refs[session.session_id] = Ref(sid=session.session_id, user_id=user_id, labels=labels)
        self.touched = session.session_id
        if background != "off":
            self.watch.watch(self.stub, session.session_id)
            STATS[f"background sessions: {background}"] += 1

    @precondition(lambda self: self.live())
    @rule(n=PICK, team=TEAMS, tier=TIERS)
    @logged
    def update_labels(self, n: int, team: str, tier: str) -> None:
        """UpdateSession replaces the labels (an archived session is read-only)."""
        ref = self.pick(self.live(), n)
        session = ses.Session(session_id=ref.sid, labels=self.labels(team, tier))
        self.update(ref, session, "labels")

    @precondition(lambda self: self.live())
    @rule(n=PICK, what=st.sampled_from(["tokenizer", "model"]))
    @logged
    def change_counting(self, n: int, what: str) -> None:
        """UpdateSession of the tokenizer, or of the model (counted with other framing):
        every kept message is counted anew, the bytes a provider gets stay the same.
        (A rule of its own: the fixed examples stay as they were, and never draw it;
        ``test_scenarios.py`` drives it every run.)"""
        ref = self.pick(self.live(), n)
        current = self.stub.GetSession(pb.GetSessionRequest(session_id=ref.sid))
        session = ses.Session(session_id=ref.sid)
        if what == "tokenizer":
            session.policy.CopyFrom(current.policy)
            session.policy.tokenizer = OTHER_TOKENIZER[current.policy.tokenizer]
        else:
            session.model = OTHER_MODEL[current.model]
        self.update(ref, session, what)

    def update(self, ref: Ref, session: ses.Session, what: str) -> None:
        """UpdateSession of ``what`` (labels, tokenizer or model) as ``session`` has it;
        an archived session refuses it."""
        paths = [{"labels": "labels", "tokenizer": "policy", "model": "model"}[what]]
        req = pb.UpdateSessionRequest(
            session=session, update_mask=field_mask_pb2.FieldMask(paths=paths)
        )
        try:
            updated = self.stub.UpdateSession(req)
        except grpc.RpcError as err:
            refused = err.code() == grpc.StatusCode.FAILED_PRECONDITION
            if not (ref.archived and refused):
                raise
            return
        assert not ref.archived
        wanted = {"labels": dict(session.labels), "tokenizer": session.policy.tokenizer}
        got = {"labels": dict(updated.labels), "tokenizer": updated.policy.tokenizer}
        wanted["model"], got["model"] = session.model, updated.model
        assert got[what] == wanted[what], (what, got, wanted)
        self.cache.wrote(self.replica, ref.sid, what)
        self.cache.models[ref.sid] = updated.model
        ref.labels = dict(updated.labels)
        STATS[f"updates: {what}"] += 1

    @precondition(lambda self: self.refs)
    @rule(
        by=st.sampled_from(["run", "team", "tier", "any tier"]),
        team=TEAMS,
        tier=TIERS,
        user=st.integers(0, 1),
        archived=st.sampled_from(["all", "live", "archived"]),
    )
    @logged
    def search_labels(self, by: str, team: str, tier: str, user: int, archived: str) -> None:
        """The console's session search by label finds exactly the sessions the
        reference's filter does (this example's: its run label, or its users)."""
        STATS["steps"] += 1
        params = {"archived": archived}
        if by == "run":
            params["label"] = f"run={self.run}"
        else:
            params["user"] = self.users[user]
            value = {"team": team, "tier": tier or "gold", "any tier": ""}[by]
            params["label"] = f"{by.split()[-1]}={value}" if value else "tier"

        def wanted(ref: Ref) -> bool:
            key, _, value = params["label"].partition("=")
            shown = {"all": True, "live": not ref.archived, "archived": ref.archived}
            same_user = ref.user_id == params.get("user", ref.user_id)
            has = key in ref.labels and (not value or ref.labels[key] == value)
            return has and same_user and shown[archived]

        want = {r.sid: r.archived for r in self.live() if wanted(r)}
        got = self.harness.search(**params)
        assert got == want, (params, got, want)
        STATS["label searches"] += 1

    @precondition(lambda self: self.live())
    @rule(n=PICK)
    @logged
    def archive_toggle(self, n: int) -> None:
        ref = self.pick(self.live(), n)
        if ref.archived:
            self.stub.UnarchiveSession(pb.UnarchiveSessionRequest(session_id=ref.sid))
        else:
            self.stub.ArchiveSession(pb.ArchiveSessionRequest(session_id=ref.sid))
        ref.archived = not ref.archived
        self.cache.set_archived(self.replica, ref.sid, ref.archived)
        self.aged.discard(ref.sid)  # unarchived, or archived anew: its rule starts again

    @precondition(lambda self: self.live())
    @rule(n=PICK, roll=st.integers(0, 2))
    @logged
    def export_import(self, n: int, roll: int) -> None:
        """(One draw in three: two CLI runs.)"""
        if roll:
            return
        ref = self.pick(self.live(), n)
        new_sid = f"i-{new_id()[:12]}"
        self.harness.export_import(ref.sid, new_sid, self.tmp / f"{new_sid}.json")
        twin = ref.copy_as(new_sid)
        self.cache.created(new_sid, None, self.cache.stored[ref.sid], self.cache.models[ref.sid])
        if self.watch.watches(ref.sid):
            self.watch.watch(self.stub, new_sid)
        imported = checks.normalized(self.build(new_sid, settle=False))
        self.refs[new_sid] = twin
        self.after_growth(new_sid)  # settled before the next build: see compacted_meanwhile
        assert imported == checks.normalized(self.build(ref.sid, settle=False))
        self.after_growth(ref.sid)
        STATS["export -> import"] += 1

    @precondition(lambda self: len(self.live()) > 1)
    @rule(n=PICK, archived=st.booleans(), roll=st.integers(0, 2))
    @logged
    def delete_and_purge(self, n: int, archived: bool, roll: int) -> None:
        """A session leaves (deleted, or archived) and the retention rules purge it; its
        forks and every other session are untouched. (One draw in three: a CLI run.)"""
        if roll:
            return
        ref = self.pick(self.live(), n)
        if archived:
            if not ref.archived:
                self.stub.ArchiveSession(pb.ArchiveSessionRequest(session_id=ref.sid))
                self.cache.set_archived(self.replica, ref.sid, True)
                ref.archived = True
            self.harness.age(ref.sid, "archive_time_us", 2)
            self.aged.add(ref.sid)
        else:
            self.stub.DeleteSession(pb.DeleteSessionRequest(session_id=ref.sid))
            self.cache.dropped(self.replica, ref.sid)
            self.watch.forget(ref.sid)
            self.harness.age(ref.sid, "delete_time_us", 2)
            self.deleted.add(ref.sid)
        self.purged()
        STATS["purges"] += 1
        self.touched = ""

    def purged(self) -> None:
        """Run the retention rules. An archived session past its rule goes unless a
        fork still reads from it (it stays archived and visible until its forks are
        gone, docs/concepts/forks.md); no purge leaves a fork without its source."""
        forks, _ = self.harness.stored(sorted(r.sid for r in self.refs.values() if r.parent))
        read = {self.refs[sid].parent for sid in forks}
        aged = sorted(self.aged)
        self.harness.purge()
        present, orphans = self.harness.stored(aged)
        assert not orphans, f"forks whose source was purged: {orphans}"
        for sid in aged:
            if sid in present:
                assert sid in read, f"archived {sid} outlived its rule with no fork reading it"
                STATS["archived sessions kept for their forks"] += 1
                continue
            self.aged.discard(sid)
            self.deleted.add(sid)

    @rule(roll=st.integers(0, 5))
    @logged
    def restart(self, roll: int) -> None:
        """Every replica restarts: each session comes back byte-identical, and each
        replica's previous inputs and unwritten ledger counts are gone. (One draw in
        six: a restart costs seconds.) Two other draws in six, the database ends every
        replica's connections instead (``lose_connections``; draws of this rule rather
        than a rule of its own, which would change every fixed example and take as many
        steps as any other rule)."""
        if roll in (1, 2):
            self.lose_connections()
            return
        if roll or not self.refs:
            return
        STATS["steps"] += 1
        before = {r.sid: self.build(r.sid) for r in self.live()}
        self.harness.restart()
        self.cache.restarted()
        self.compactions = self.harness.settle()  # counted from 0 again
        for sid, was in before.items():
            after = self.build(sid, settle=False)
            for mi in (after, was):
                mi.resume_token = ""
                mi.ClearField("cache_prefix")
            assert after == was, f"{sid} differs after a restart"
            self.after_growth(sid)
        STATS["restarts"] += 1

    def lose_connections(self) -> None:
        """The database ends every replica's connections between two calls (a failover,
        a proxy restart, an idle timeout): no call after it may fail or lose anything,
        and no hot copy is dropped for it (the ledger's unwritten counts stay, which the
        next ledger comparison checks). Nothing to end on SQLite."""
        STATS["database connections ended"] += self.harness.lose_connections()
        STATS["connection losses"] += 1
