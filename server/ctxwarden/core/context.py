"""The in-memory state of one hot session and the operations on it.

Every mutation is split in two: ``plan_*`` computes the change without
touching the state (so a failed database write leaves nothing behind), and
``apply_*`` installs it once the write has committed.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import replace

from ctxwarden.core.append import AppendPlan, CallState, planned_append
from ctxwarden.core.calibration import Calibration, anchored
from ctxwarden.core.clearing import view_entry
from ctxwarden.core.context_view import ViewCache
from ctxwarden.core.messages import Message, Role, pack_message
from ctxwarden.core.model_input import (
    ModelInputView,
    counting_profile,
    prefix_hash,
    token_breakdown,
    tools_text,
)
from ctxwarden.core.program_prefix import program_prefix
from ctxwarden.core.rollback import rolled_back
from ctxwarden.core.session import Checkpoint, Session, effective_policy
from ctxwarden.core.summary import trim_summary
from ctxwarden.core.tokens import Tokenizer, count_text
from ctxwarden.core.view import (
    SYNTHETIC_RESULT_TEXT,
    Entry,
    View,
    ViewEntry,
    base_digest,
    compact,
)

# The service layer imports these from here.
__all__ = ["AppendPlan", "ModelInputView", "SessionContext", "counting_profile", "tools_text"]


class SessionContext:
    """One hot session: settings, latest checkpoint and the kept active messages."""

    def __init__(
        self,
        session: Session,
        checkpoint: Checkpoint | None,
        kept: Iterable[Message],
        tokenizer: Tokenizer,
        *,
        recount: bool = False,
    ) -> None:
        self.checkpoint = checkpoint
        self.tokenizer = tokenizer
        self._entries: list[Entry] = []
        # message_id -> stored message, built on first use: most clients never
        # send message_ids, and thousands of hot sessions need not pay for it.
        self._by_message_id: dict[str, Message] | None = None
        self._calls: dict[str, CallState] = {}
        self.session = session
        self.checked_at = float("-inf")
        """When this copy was last known to be the stored version (the service's
        clock; core never reads it)."""
        self.policy = effective_policy(session.policy, session.model)
        self._refresh_fixed_costs()
        key = self.profile.key
        for message in kept:
            if recount or (message.counted_with and message.counted_with != key):
                # Counted with an earlier tokenizer or model of this session (e.g.
                # a message back in view after a rollback across a checkpoint).
                message = replace(message, token_count=self.count(message), counted_with=key)
            self._add(message)
        self._message_tokens = sum(e.token_count for e in self._entries)

    def restore_steps(
        self, kept: Sequence[Message], *, recount: bool = False, step: int = 256
    ) -> Iterator[None]:
        """What the constructor does with ``kept`` (on a context made with none),
        then the view built ahead, ``step`` messages per iteration: the caller
        may let other work run between two (the service's event loop)."""
        key = self.profile.key
        for start in range(0, len(kept), step):
            for message in kept[start : start + step]:
                if recount or (message.counted_with and message.counted_with != key):
                    message = replace(message, token_count=self.count(message), counted_with=key)
                self._add(message)
            yield
        self._message_tokens = sum(e.token_count for e in self._entries)
        if self._views.incremental:  # else that view is built whole for every input anyway
            yield from self._views.build_steps(self._entries, self._base(), step)

    # -- settings ---------------------------------------------------------

    def _refresh_fixed_costs(self) -> None:
        tok = self.tokenizer
        self.profile = counting_profile(self.session.model, tok)
        system = count_text(self.session.system_prompt, tok)
        if system:
            system += self.profile.framing
        # The reply priming is billed once per request; it lives with the system part.
        self.system_tokens = system + self.profile.reply
        self.tools_tokens = count_text(tools_text(self.session.tools), tok)
        fixed = program_prefix(self.session, self.checkpoint, self.profile)
        self._summary: Message | None = fixed.summary
        self.summary_tokens, self.memory_tokens = fixed.summary_tokens, fixed.memory_tokens
        self._prefix = fixed.messages
        self.synthetic_tokens = count_text(SYNTHETIC_RESULT_TEXT, tok) + self.profile.framing
        cp = self.checkpoint  # tool results up to cleared_through are stubs (core.clearing)
        self.cleared_through = cp.tool_results_cleared_through if cp is not None else 0
        self._prefix_hash = prefix_hash(
            self.session, self._summary.text if self._summary is not None else ""
        )
        # The summary or the synthetic result may have changed: the view starts anew.
        self._views = ViewCache(self.synthetic_tokens, self.policy.keep_tool_results, self.profile)

    def replace_session(self, session: Session, tokenizer: Tokenizer | None = None) -> None:
        """Install new settings; a new tokenizer or policy re-derives the view entries."""
        old_policy = self.policy
        self.session = session
        self.policy = effective_policy(session.policy, session.model)
        if tokenizer is not None:
            self.tokenizer = tokenizer
        self._refresh_fixed_costs()
        if tokenizer is not None or self.policy != old_policy:
            self._entries = [self._entry(e.original) for e in self._entries]
            self._message_tokens = sum(e.token_count for e in self._entries)

    @property
    def calibration(self) -> Calibration:
        return Calibration(self.session.estimate_ratio, self.session.estimate_samples)

    def _anchored(self, view_messages: Sequence[Message]) -> int:
        floor = self.checkpoint.at_seq if self.checkpoint is not None else 0
        return anchored(view_messages, floor, self.calibration)

    @property
    def entries(self) -> Sequence[Entry]:
        return self._entries

    @property
    def message_tokens(self) -> int:
        """Tokens of the kept messages as stored (before view repairs)."""
        return self._message_tokens

    @property
    def calls(self) -> Mapping[str, CallState]:
        """The active tool calls by ID, as committed."""
        return self._calls

    @property
    def fixed_tokens(self) -> int:
        """System prompt, tools, memory and summary: the part every input starts with."""
        return self.system_tokens + self.tools_tokens + self.memory_tokens + self.summary_tokens

    @property
    def first_kept_seq(self) -> int:
        if self.checkpoint is not None:
            return self.checkpoint.first_kept_seq
        return self._entries[0].message.seq if self._entries else 0

    @property
    def context_tokens(self) -> int:
        """Tokens of the effective context as stored (before view repairs)."""
        return self.fixed_tokens + self._message_tokens

    @property
    def active_messages(self) -> list[Message]:
        """Kept active messages as stored (untruncated), in seq order."""
        return [e.original for e in self._entries]

    def count(self, message: Message) -> int:
        return 0 if message.history_only else self.profile.message(message)  # never seen

    def open_calls(self) -> list[tuple[str, str]]:
        """(id, name) of the active tool calls still waiting for a result, in call order."""
        return [(call_id, c.name) for call_id, c in self._calls.items() if not c.answered]

    # -- append -----------------------------------------------------------

    def find_duplicate(self, message_id: str) -> Message | None:
        if not message_id:
            return None
        if self._by_message_id is None:
            self._by_message_id = {e.original.message_id: e.original for e in self._entries}
        return self._by_message_id.get(message_id)

    def plan_append(
        self,
        messages: Sequence[Message],
        *,
        now_us: int,
        new_message_id: Iterable[str],
        stored_duplicates: dict[str, Message] | None = None,
    ) -> AppendPlan:
        """Assign seqs and token counts; check tool results against their calls.

        ``stored_duplicates`` are messages found in storage by message_id
        (older than the kept history); they are returned as they are.
        """
        ids = iter(new_message_id)
        return planned_append(self, messages, now_us, ids, stored_duplicates or {})

    def apply_append(self, plan: AppendPlan) -> None:
        """Install a committed append (planned here: counted with this profile)."""
        self._install(plan.new, plan.session)

    def install_appended(self, session: Session, messages: Sequence[Message]) -> None:
        """Install appends committed after this copy's version, ``session`` as they
        left it: the same context a restore would make when nothing but appends
        changed the session since (another replica's appends, read back, recounted
        as a restore recounts them when another tokenizer counted them)."""
        key = self.profile.key
        self._install(
            [
                replace(m, token_count=self.count(m), counted_with=key)
                if m.counted_with and m.counted_with != key
                else m
                for m in messages
            ],
            session,
        )

    def _install(self, messages: Sequence[Message], session: Session) -> None:
        for message in messages:
            self._add(message)
            self._message_tokens += self._entries[-1].token_count
        self.session = session

    def _reset(self, kept: Iterable[Message]) -> None:
        """Rebuild the entries, call index and token total from ``kept``."""
        self._by_message_id = None
        self._entries = []
        self._calls = {}
        for message in kept:
            self._add(message)
        self._message_tokens = sum(e.token_count for e in self._entries)

    def _entry(self, message: Message) -> Entry:
        """The entry as kept: long texts compressed, the message itself if shown as stored."""
        entry = view_entry(message, self.policy, self.profile, self.cleared_through)
        stored = None if entry.stored is None else pack_message(entry.stored)
        return compact(
            ViewEntry(pack_message(entry.message), entry.token_count, entry.notice, stored)
        )

    def _add(self, message: Message) -> None:
        entry = self._entry(message)
        self._entries.append(entry)
        if self._by_message_id is not None:
            self._by_message_id[message.message_id] = entry.original
        if message.history_only:
            return  # no call, no answer
        if message.role is Role.ASSISTANT:
            for block in message.tool_calls:
                self._calls[block.tool_call_id] = CallState(message.seq, False, block.tool_name)
        elif message.role is Role.TOOL_RESULT:
            call = self._calls.get(message.tool_call_id)
            if call is not None:
                call.answered = True

    # -- rollback ---------------------------------------------------------

    def plan_rollback(self, to_seq: int | None) -> list[int]:
        return rolled_back(self.active_messages, self.session.last_seq, to_seq)

    def crosses_checkpoint(self, to_seq: int | None) -> bool:
        """A rewind to before the checkpoint's first kept seq invalidates it."""
        return (
            to_seq is not None
            and self.checkpoint is not None
            and to_seq < self.checkpoint.first_kept_seq - 1
        )

    def apply_rollback(self, seqs: Sequence[int], consecutive_failures: int, now_us: int) -> None:
        gone = set(seqs)
        self._reset([e.original for e in self._entries if e.message.seq not in gone])
        self.session = replace(
            self.session,
            context_tokens=self.context_tokens,
            consecutive_failures=consecutive_failures,
            update_time_us=now_us,
        )

    # -- the model input ----------------------------------------------------

    def view_tokens(self) -> int:
        """Total tokens of the current model input (what compaction shrinks)."""
        return self.model_input().tokens.total_tokens

    def _view(self) -> View:
        return self._views.view(self._entries, self._base)

    def _base(self) -> int:
        s = self.session  # its creation time tells incarnations of a reused ID apart
        c = (self.cleared_through,) if self.cleared_through else ()  # as before clearing
        return base_digest(s.session_id, s.create_time_us, self._prefix_hash, s.revision, *c)

    def view_behind(self) -> int:
        """Messages the next model input has to add to its view (all of them for a
        session only appended to so far): what ``view_steps`` would do."""
        return self._views.behind(self._entries)

    def view_steps(self, step: int = 256) -> Iterator[None]:
        """The view brought up to date ahead, ``step`` messages per iteration: the
        caller may let other work run between two (the service's event loop)."""
        return self._views.catch_up_steps(self._entries, self._base, step)

    def forked(self, session: Session, checkpoint: Checkpoint | None) -> SessionContext:
        """The context of a fork made at this session's end: ``session`` with these
        settings, ``checkpoint`` its copy of this one's. It starts from this one's
        entries and view so far (shared references; nothing derived again), so it
        costs the same whatever the history's length."""
        fork = SessionContext(session, checkpoint, (), self.tokenizer)
        if (fork.profile.key, fork.policy, fork.cleared_through) != (
            self.profile.key,
            self.policy,
            self.cleared_through,
        ):
            return SessionContext(session, checkpoint, self.active_messages, self.tokenizer)
        fork._entries, fork._message_tokens = list(self._entries), self._message_tokens
        # Answered calls never change again: only the open ones need copies.
        fork._calls = dict(self._calls)
        for call_id, call in self._calls.items():
            if not call.answered:
                fork._calls[call_id] = CallState(call.seq, False, call.name)
        if self._views.incremental:  # else every view is built anew anyway
            self._view()
            fork._views.resume(self._views, fork._entries, fork._base())
        return fork

    def model_input(self, max_output_tokens: int = 0) -> ModelInputView:
        view = self._view()
        messages = (*self._prefix, *view.messages)
        tokens = token_breakdown(
            self.system_tokens,
            self.tools_tokens,
            self.summary_tokens,
            view.message_tokens,
            anchored=self._anchored(view.messages),
            calibration=self.calibration,
            exact=self.tokenizer.exact,
            context_window=self.policy.context_window,
            threshold=self.threshold(max_output_tokens),
            memory_tokens=self.memory_tokens,
        )
        return ModelInputView(
            session=self.session,
            messages=messages,
            notices=view.notices,
            tokens=tokens,
            compaction_recommended=tokens.total_tokens > tokens.compaction_threshold,
            first_kept_seq=self.first_kept_seq,
            last_seq=self.session.last_seq,
            compaction_id=self.checkpoint.compaction_id if self.checkpoint else "",
            prefix_hash=self._prefix_hash,
            summary=self.checkpoint.carried_summary if self.checkpoint else "",
            live=True,
            stable_messages=view.stable + len(self._prefix),
            summary_messages=len(self._prefix),
            digests=view.digests,
        )

    # -- compaction ---------------------------------------------------------

    def threshold(self, max_output_tokens: int = 0) -> int:
        return self.policy.context_window - max(self.policy.reserve_tokens, max_output_tokens)

    def apply_checkpoint(self, checkpoint: Checkpoint) -> None:
        """Switch the effective context to a new checkpoint (after it committed)."""
        kept = [m for m in self.active_messages if m.seq >= checkpoint.first_kept_seq]
        self.checkpoint = checkpoint
        self._refresh_fixed_costs()
        self._reset(kept)
        self.session = replace(self.session, context_tokens=self.context_tokens)

    def trim_summary(self, text: str, budget: int) -> tuple[str, bool]:
        """Cut a summary to at most ``budget`` tokens, with a marker."""
        return trim_summary(text, budget, self.tokenizer)

    def tokens_with(self, checkpoint: Checkpoint, session: Session | None = None) -> int:
        """Tokens of the effective context if ``checkpoint`` (and ``session``) were in effect."""
        probe = SessionContext(
            session or self.session,
            checkpoint,
            [m for m in self.active_messages if m.seq >= checkpoint.first_kept_seq],
            self.tokenizer,
        )
        return probe.view_tokens()
