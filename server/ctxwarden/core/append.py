"""Planning an append: what it produces, the planning itself (over a hot
session, ``core.context.SessionContext``), and the tool-call bookkeeping that
tool results are checked against."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Protocol

from ctxwarden.core.calibration import Calibration, prompt_tokens, usable
from ctxwarden.core.errors import FailedPrecondition
from ctxwarden.core.fast_replace import replacer
from ctxwarden.core.messages import Message, MessageState, Role, pack_message
from ctxwarden.core.reasons import ErrorReason
from ctxwarden.core.session import EffectivePolicy, Session
from ctxwarden.core.tokens import CountingProfile
from ctxwarden.core.usage_ledger import ledger_after_messages
from ctxwarden.core.view import make_entry


@dataclass(frozen=True, slots=True)
class AppendPlan:
    """Result of planning an append: stored duplicates and new messages."""

    messages: tuple[Message, ...]
    """Every requested message, in request order, as it is (or will be) stored."""
    new: tuple[Message, ...]
    """Only the messages to insert."""
    last_seq: int
    context_tokens: int
    session: Session
    """The session as the append leaves it (next version, last_seq, tokens,
    failures, calibration): what the store writes and the context installs."""
    calibration: Calibration = field(default_factory=Calibration)


@dataclass(slots=True)
class CallState:
    """An active tool call: the seq of its assistant message, and whether it has a result."""

    seq: int
    answered: bool
    name: str = ""
    """The tool called (a result that does not name it gets this one)."""


class PlanCalls:
    """The session's call index as an append being planned sees it: the plan's
    changes are kept aside, the index itself is left as committed (no copy of
    it per append: it grows with the session)."""

    __slots__ = ("_base", "_changed")

    def __init__(self, base: Mapping[str, CallState]) -> None:
        self._base = base
        self._changed: dict[str, CallState] = {}

    def get(self, tool_call_id: str) -> CallState | None:
        return self._changed.get(tool_call_id) or self._base.get(tool_call_id)

    def add(self, tool_call_id: str, seq: int, name: str) -> None:
        self._changed[tool_call_id] = CallState(seq, False, name)

    def answer(self, tool_call_id: str, i: int) -> None:
        """Mark the call a tool result (``messages[i]``) answers.

        A result whose call is not active (rolled back, compacted away, never
        appended) is stored all the same: the view leaves it out with the notice
        ORPHANED_TOOL_RESULT_OMITTED. A second result for an active call is refused.
        """
        call = self.get(tool_call_id)
        if call is None:
            return
        if call.answered:
            raise FailedPrecondition(
                f"messages[{i}]: tool call {tool_call_id!r} already has a result",
                reason=ErrorReason.TOOL_CALL_ALREADY_ANSWERED,
                field=f"messages[{i}].tool_call_id",
            )
        self._changed[tool_call_id] = CallState(call.seq, True, call.name)


_replace_message = replacer(Message)
_replace_session = replacer(Session)


def failures_after(count: int, new: Sequence[Message]) -> int:
    """A successful assistant answer resets the consecutive-failure count."""
    for m in new:
        if m.role is Role.ASSISTANT and not m.failed:
            count = 0
    return count


def session_after(
    session: Session,
    last_seq: int,
    context_tokens: int,
    now_us: int,
    new: Sequence[Message],
    calibration: Calibration,
) -> Session:
    """The session as an append of ``new`` leaves it: the next version, its
    last_seq and context tokens, the failure count, and the calibration this
    append learned (stored with it: a restart right after must not fall back
    to the previous one), and the usage the new messages report."""
    return _replace_session(
        session,
        version=session.version + 1,
        last_seq=last_seq,
        context_tokens=context_tokens,
        update_time_us=now_us,
        consecutive_failures=failures_after(session.consecutive_failures, new),
        estimate_ratio=calibration.ratio,
        estimate_samples=calibration.samples,
        usage=ledger_after_messages(session.usage, new, session.model),
    )


class AppendBase(Protocol):
    """What planning an append reads of the hot session (SessionContext)."""

    @property
    def session(self) -> Session: ...
    @property
    def calibration(self) -> Calibration: ...
    @property
    def fixed_tokens(self) -> int: ...
    @property
    def message_tokens(self) -> int: ...
    @property
    def calls(self) -> Mapping[str, CallState]: ...
    @property
    def policy(self) -> EffectivePolicy: ...
    @property
    def profile(self) -> CountingProfile: ...
    def find_duplicate(self, message_id: str) -> Message | None: ...
    def count(self, message: Message) -> int: ...


@dataclass(slots=True)
class _Pass:
    """What planning carries from one request of a run to the next: what
    applying the earlier plans would have left in the hot session."""

    session: Session
    calibration: Calibration
    tokens: int
    """Tokens of the kept messages (fixed part excluded)."""
    calls: PlanCalls
    earlier: dict[str, Message] = field(default_factory=dict)
    """The messages earlier requests of the run add, by message_id."""


def planned_append(
    base: AppendBase,
    messages: Sequence[Message],
    now_us: int,
    ids: Iterator[str],
    stored_duplicates: Mapping[str, Message],
) -> AppendPlan:
    """SessionContext.plan_append: ``messages`` as they will be stored after
    ``base``'s (new IDs from ``ids``), duplicates as they are stored."""
    return planned_run(base, (messages,), now_us, ids, stored_duplicates)[0]


def planned_run(
    base: AppendBase,
    requests: Sequence[Sequence[Message]],
    now_us: int,
    ids: Iterator[str],
    stored_duplicates: Mapping[str, Message],
) -> list[AppendPlan]:
    """One plan per request, in one pass: exactly the plans that planning the
    first request, applying it (SessionContext.apply_append), planning the
    second, ... would give. Raises what planning the first failing request
    raises (its index is the caller's to know: the messages' fields are named
    within their request)."""
    run = _Pass(base.session, base.calibration, base.message_tokens, PlanCalls(base.calls))
    return [_plan_one(base, run, messages, now_us, ids, stored_duplicates) for messages in requests]


def _plan_one(
    base: AppendBase,
    run: _Pass,
    messages: Sequence[Message],
    now_us: int,
    ids: Iterator[str],
    stored_duplicates: Mapping[str, Message],
) -> AppendPlan:
    """One request of a run, after those planned into ``run`` (advanced)."""
    seq = run.session.last_seq
    calibration = run.calibration
    fixed = base.fixed_tokens
    calls = run.calls
    out: list[Message] = []
    new: list[Message] = []
    tokens = run.tokens
    for i, incoming in enumerate(messages):
        mid = incoming.message_id
        dup = base.find_duplicate(mid) or _earlier(run, mid) or stored_duplicates.get(mid)
        if dup is not None:
            out.append(dup)
            continue
        assistant = incoming.role is Role.ASSISTANT and not incoming.history_only
        if incoming.role is Role.TOOL_RESULT and not incoming.history_only:
            calls.answer(incoming.tool_call_id, i)
            if not incoming.tool_name and (call := calls.get(incoming.tool_call_id)):
                incoming = replace(incoming, tool_name=call.name)
        seq += 1
        observed = None
        if assistant and usable(incoming):
            assert incoming.usage is not None
            # The usage measured the context this reply was made from.
            calibration = calibration.observe(prompt_tokens(incoming.usage), fixed + tokens)
            observed = (calibration.ratio, calibration.samples)
        message_id = mid or next(ids)
        message = _admitted(base, incoming, seq, message_id, now_us, observed)
        if assistant:
            for block in message.tool_calls:
                calls.add(block.tool_call_id, seq, block.tool_name)
        tokens += make_entry(message, base.policy, base.profile).token_count
        out.append(message)
        new.append(message)
    after = session_after(run.session, seq, fixed + tokens, now_us, new, calibration)
    run.session, run.calibration, run.tokens = after, calibration, tokens
    run.earlier.update((m.message_id, m) for m in new)
    return AppendPlan(tuple(out), tuple(new), seq, fixed + tokens, after, calibration)


def _earlier(run: _Pass, message_id: str) -> Message | None:
    """A message an earlier request of the run adds, as the hot session would
    hold it once installed (its find_duplicate answer)."""
    found = run.earlier.get(message_id) if message_id else None
    return None if found is None else pack_message(found)


def _admitted(
    base: AppendBase,
    incoming: Message,
    seq: int,
    message_id: str,
    now_us: int,
    calibration: tuple[float, int] | None,
) -> Message:
    """The message as it will be stored: its seq, ID, time, token count and
    the calibration it changed (None: it changed none)."""
    # One copy: the count reads only the content and the visibility, which the
    # copy keeps.
    return _replace_message(
        incoming,
        seq=seq,
        message_id=message_id,
        state=MessageState.ACTIVE,
        create_time_us=now_us,
        token_count=base.count(incoming),
        counted_with=base.profile.key,
        calibration=incoming.calibration if calibration is None else calibration,
    )
