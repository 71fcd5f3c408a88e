"""SessionManager: every RPC's use case, over hot sessions and the repository."""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import os
import re
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, TypeVar

from sqlalchemy.exc import DBAPIError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeout

from ctxwarden import ids
from ctxwarden.config import Settings
from ctxwarden.core.calibration import ModelCalibration
from ctxwarden.core.compaction.types import Summarizer
from ctxwarden.core.context import (
    AppendPlan,
    ModelInputView,
    SessionContext,
    counting_profile,
    tools_text,
)
from ctxwarden.core.errors import (
    Aborted,
    AlreadyExists,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    ResourceExhausted,
    Unavailable,
)
from ctxwarden.core.messages import Message, Role
from ctxwarden.core.models import lookup_model
from ctxwarden.core.recovery import RecoveryAction, decide_recovery
from ctxwarden.core.render import Format, render_view
from ctxwarden.core.rollback import last_failure_message
from ctxwarden.core.session import Session, ToolDefinition, effective_policy
from ctxwarden.core.tenancy import scoped_id, tenant_of, visible_id
from ctxwarden.core.tokens import Tokenizer, count_text
from ctxwarden.core.validation import (
    check_key,
    check_messages,
    check_no_nul,
    check_session_fields,
    check_session_id,
)
from ctxwarden.observability.metrics import metrics
from ctxwarden.service.compaction import TRIGGER_THRESHOLD, Compactor
from ctxwarden.service.hot import HotSessions
from ctxwarden.store.errors import (
    ConcurrentWrite,
    DuplicateKey,
    QuotaExceeded,
    StoreRejected,
    StoreUnavailable,
    TooLarge,
)
from ctxwarden.store.repository import Repository, RequestRecord, RequestScope, StoredRequest
from ctxwarden.tokenizers import cached_tokenizer, load_tokenizer

log = logging.getLogger(__name__)
T = TypeVar("T")

BIG_WORK_CHARS = 64 * 1024
"""Tokenizing more text than this runs in a worker thread, off the event loop."""


@dataclass(frozen=True, slots=True)
class AppendResult:
    messages: tuple[Message, ...]
    last_seq: int
    context_tokens: int


@dataclass(frozen=True, slots=True)
class RollbackResult:
    rolled_back_seqs: tuple[int, ...]
    action: RecoveryAction
    retry_after_seconds: float
    reason: str


@dataclass(frozen=True, slots=True)
class IdempotencyKey:
    """AIP-155 request_id plus a hash of the request, to detect reuse."""

    request_id: str
    request_hash: str


def _encode_token(value: dict[str, Any]) -> str:
    raw = json.dumps(value, separators=(",", ":"), sort_keys=True).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _invalid_token() -> InvalidArgument:
    return InvalidArgument(
        "page_token is not a token this server issued",
        reason="INVALID_PAGE_TOKEN",
        field="page_token",
    )


def _decode_token(token: str) -> dict[str, Any]:
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        value = json.loads(raw)
        if not isinstance(value, dict):
            raise ValueError
        return value
    except (ValueError, UnicodeDecodeError, RecursionError):
        raise _invalid_token() from None


_TOKEN_ID = re.compile(r"[\x21-\x7e]{1,200}")
"""IDs in tokens (session and compaction IDs) are printable ASCII, like the columns."""


def token_int(token: dict[str, Any], key: str) -> int:
    """A non-negative int64 the server put in ``token`` (else INVALID_PAGE_TOKEN)."""
    value = token.get(key)
    if type(value) is not int or not 0 <= value < 2**63:
        raise _invalid_token()
    return value


def token_id(token: dict[str, Any], key: str) -> str:
    """An ID the server put in ``token`` (else INVALID_PAGE_TOKEN)."""
    value = token.get(key)
    if not isinstance(value, str) or not _TOKEN_ID.fullmatch(value):
        raise _invalid_token()
    return value


def _page_size(requested: int, default: int, maximum: int = 1000) -> int:
    if requested < 0:
        raise InvalidArgument(
            "page_size must be >= 0", reason="INVALID_PAGE_SIZE", field="page_size"
        )
    return min(requested or default, maximum)


LIST_PAGE_BYTES = 4 * 1024 * 1024
"""A ListMessages page reads at most this much message data (plus one message)."""


def quota_error(exc: QuotaExceeded) -> ResourceExhausted:
    if exc.quota == "sessions":
        return ResourceExhausted(
            f"this tenant already has {exc.used} sessions, the quota is {exc.limit}; delete "
            "sessions you no longer need",
            reason="SESSION_QUOTA_EXCEEDED",
            metadata={"quota": str(exc.limit)},
        )
    used = f"{exc.used:,} bytes" if exc.used >= 0 else "nearly all of it"
    return ResourceExhausted(
        f"this tenant's storage quota is {exc.limit:,} bytes and it stores {used}; this "
        "write would cross it. Delete (and purge) sessions you no longer need",
        reason="STORAGE_QUOTA_EXCEEDED",
        metadata={"quota_bytes": str(exc.limit)},
    )


def message_page_token(session_id: str, include_rolled_back: bool, after_seq: int) -> str:
    """ListMessages' next_page_token: the page after ``after_seq``."""
    return _encode_token({"s": session_id, "r": include_rolled_back, "a": after_seq})


def store_error(exc: Exception) -> Exception:
    """The domain error for a store failure (the one map from store to domain)."""
    if isinstance(exc, (StoreUnavailable, PoolTimeout, TimeoutError, OSError)):
        return Unavailable(
            "the database is unavailable; retry shortly", reason="DATABASE_UNAVAILABLE"
        )
    if isinstance(exc, TooLarge):
        return InvalidArgument(
            f"{exc.field} is {exc.size:,} bytes as stored; the limit is {exc.limit:,} bytes",
            reason="MESSAGE_TOO_LARGE",
            field=exc.field,
            metadata={"limit_bytes": str(exc.limit), "size_bytes": str(exc.size)},
        )
    if isinstance(exc, QuotaExceeded):
        return quota_error(exc)
    if isinstance(exc, StoreRejected):
        return InvalidArgument(
            f"the database refused to store this request: {str(exc)[:300]}",
            reason="WRITE_REJECTED",
        )
    return exc


def _chars(messages: Sequence[Message]) -> int:
    return sum(len(b.text) + len(b.arguments_json) for m in messages for b in m.content)


def check_client_tokenizer(
    spec: str, allowed_dirs: Sequence[str], field: str = "policy.tokenizer"
) -> None:
    """A client may name an ``hf:`` tokenizer only inside an operator-allowed directory
    (otherwise a client could make the server open arbitrary paths)."""
    if not spec.startswith("hf:"):
        return
    check_no_nul(spec, field)  # os.path.realpath raises ValueError on NUL
    path = os.path.realpath(spec[3:])
    for base in allowed_dirs:
        root = os.path.realpath(base)
        if path == root or path.startswith(root + os.sep):
            return
    raise InvalidArgument(
        "hf: tokenizers must live under a directory the operator allowed with "
        "--hf-tokenizer-dir (or be configured in the model table)",
        reason="TOKENIZER_NOT_ALLOWED",
        field=field,
    )


async def _tokenizer(spec: str) -> Tokenizer:
    cached = cached_tokenizer(spec)
    if cached is not None:
        return cached  # no thread hop for the common case
    try:
        return await asyncio.to_thread(load_tokenizer, spec)
    except ValueError as exc:
        raise InvalidArgument(
            str(exc), reason="UNKNOWN_TOKENIZER", field="policy.tokenizer"
        ) from None


class SessionManager:
    def __init__(
        self,
        repo: Repository,
        settings: Settings,
        summarizer: Summarizer | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """``clock`` (seconds) times how long a verified hot copy may be served
        unchecked (``settings.max_read_staleness_seconds``)."""
        self.clock = clock
        self.repo = repo
        self.settings = settings
        self.hot = HotSessions(settings.max_hot_sessions, settings.db_timeout_seconds)
        self.restores = 0
        self.compactor = Compactor(self, summarizer)
        self.model_calibration = ModelCalibration()
        self.db_timeout = settings.db_timeout_seconds

    # -- plumbing -------------------------------------------------------------

    async def _db(self, op: Callable[[], Awaitable[T]]) -> T:
        """Run a store call within the database timeout; a lost, hung or saturated
        database is UNAVAILABLE (safe to retry), a refused write a clear error."""
        try:
            if self.db_timeout > 0:
                async with asyncio.timeout(self.db_timeout):
                    return await op()
            return await op()
        except (ConcurrentWrite, DuplicateKey):
            raise
        except (StoreUnavailable, PoolTimeout, TimeoutError, OSError) as exc:
            log.warning("database unavailable: %s", exc)
            raise store_error(exc) from exc
        except (TooLarge, QuotaExceeded, StoreRejected) as exc:
            raise store_error(exc) from exc
        except (OperationalError, DBAPIError) as exc:
            if (
                isinstance(exc, DBAPIError)
                and not exc.connection_invalidated
                and not isinstance(exc, OperationalError)
            ):
                raise
            log.warning("database unavailable: %s", exc)
            raise store_error(StoreUnavailable(str(exc))) from exc

    async def _context(self, session_id: str, *, verify: bool = True) -> SessionContext:
        """The hot session, restored from the database when it is not in memory.

        ``verify``: compare the copy's version with the stored one first (another
        replica may have changed the session); a stale copy is reloaded."""
        check_session_id(session_id)
        ctx = self.hot.get(session_id)
        if ctx is not None and (not verify or await self._current(ctx)):
            return ctx
        async with self.hot.lock(session_id):
            return await self._context_locked(session_id, verify=verify)

    async def _current(self, ctx: SessionContext) -> bool:
        """Whether the in-memory copy is the stored session's current version
        (checked in the database unless it was within the staleness bound)."""
        now = self.clock()
        if now - ctx.checked_at < self.settings.max_read_staleness_seconds:
            return True
        sid = ctx.session.session_id
        stored = await self._db(lambda: self.repo.session_version(sid))
        if stored is None or stored[1]:
            self.hot.evict(sid)
            raise self._not_found(sid)
        if stored[0] != ctx.session.version:
            return False
        ctx.checked_at = now
        return True

    async def _context_locked(self, session_id: str, *, verify: bool = False) -> SessionContext:
        """Like _context, for a caller that already holds the session's lock."""
        check_session_id(session_id)
        ctx = self.hot.get(session_id)
        if ctx is not None:
            if not verify or await self._current(ctx):
                return ctx
            self.hot.evict(session_id)
        snapshot = await self._db(lambda: self.repo.load_snapshot(session_id))
        if snapshot is None or snapshot.session.deleted:
            raise self._not_found(session_id)
        s = snapshot.session
        tokenizer = await _tokenizer(effective_policy(s.policy, s.model).tokenizer)

        def build() -> SessionContext:
            return SessionContext(s, snapshot.checkpoint, snapshot.kept, tokenizer)

        if len(snapshot.kept) > 2000:
            ctx = await asyncio.to_thread(build)
        else:
            ctx = build()
        self.restores += 1
        ctx.checked_at = self.clock()
        self.hot.put(session_id, ctx)
        return ctx

    @staticmethod
    def _not_found(session_id: str) -> NotFound:
        shown = visible_id(session_id)
        return NotFound(
            f"session {shown!r} does not exist (or was deleted)",
            reason="SESSION_NOT_FOUND",
            metadata={"session_id": shown},
        )

    def _concurrent(self, session_id: str) -> Aborted:
        self.hot.evict(session_id)
        shown = visible_id(session_id)
        return Aborted(
            f"session {shown!r} was changed by another writer; reload it and retry",
            reason="CONCURRENT_MODIFICATION",
            metadata={"session_id": shown},
        )

    async def _replay(
        self, scope: RequestScope, key: IdempotencyKey | None
    ) -> StoredRequest | None:
        if key is None:
            return None
        stored = await self._db(lambda: self.repo.get_request(scope, key.request_id))
        if stored is not None and stored.request_hash != key.request_hash:
            raise InvalidArgument(
                f"request_id {key.request_id!r} was already used for a different request",
                reason="REQUEST_ID_REUSED",
                field="request_id",
            )
        return stored

    @staticmethod
    def _record(
        scope: RequestScope, key: IdempotencyKey | None, outcome: dict[str, Any]
    ) -> RequestRecord | None:
        if key is None:
            return None
        return RequestRecord(scope, key.request_id, key.request_hash, outcome, ids.now_us())

    # -- sessions -------------------------------------------------------------

    async def create_session(
        self, session: Session, session_id: str, key: IdempotencyKey | None, tenant: str = ""
    ) -> Session:
        """``session_id`` is internal (tenant-prefixed); "" makes a sortable one."""
        if key is not None:
            check_key(key.request_id, "request_id")
        if session_id:
            check_session_id(session_id)
        check_session_fields(session)
        check_client_tokenizer(session.policy.tokenizer, self.settings.hf_tokenizer_dirs)
        sid = session_id or scoped_id(tenant, ids.new_id())
        policy = effective_policy(session.policy, session.model)
        tokenizer = await _tokenizer(policy.tokenizer)
        now = ids.now_us()
        prior = self.model_calibration.prior(tenant, session.model)
        fresh = replace(
            session,
            estimate_ratio=prior.ratio,
            estimate_samples=0,
            session_id=sid,
            last_seq=0,
            revision=1,
            version=1,
            consecutive_failures=0,
            create_time_us=now,
            update_time_us=now,
            delete_time_us=0,
        )
        ctx = SessionContext(fresh, None, (), tokenizer)
        fresh = replace(fresh, context_tokens=ctx.context_tokens)
        ctx.session = fresh
        scope = RequestScope("CreateSession", tenant_id=tenant)
        try:
            await self._db(
                lambda: self.repo.create_session(
                    fresh, self._record(scope, key, {"session_id": sid})
                )
            )
        except DuplicateKey:
            stored = await self._replay(scope, key)
            if stored is not None:
                return await self.get_session(str(stored.outcome["session_id"]))
            raise AlreadyExists(
                f"session {visible_id(sid)!r} already exists",
                reason="SESSION_ALREADY_EXISTS",
                metadata={"session_id": visible_id(sid)},
            ) from None
        ctx.checked_at = self.clock()
        self.hot.put(sid, ctx)
        return fresh

    async def get_session(self, session_id: str) -> Session:
        check_session_id(session_id)
        ctx = self.hot.get(session_id)
        if ctx is not None and await self._current(ctx):
            return ctx.session
        session = await self._db(lambda: self.repo.get_session(session_id))
        if session is None or session.deleted:
            raise self._not_found(session_id)
        return session

    async def list_sessions(
        self, user_id: str, project_id: str, page_size: int, page_token: str, tenant: str = ""
    ) -> tuple[list[Session], str]:
        size = _page_size(page_size, 50)
        before: tuple[int, str] | None = None
        if page_token:
            tok = _decode_token(page_token)
            if tok.get("u") != user_id or tok.get("p") != project_id:
                raise InvalidArgument(
                    "page_token was issued for different filters",
                    reason="INVALID_PAGE_TOKEN",
                    field="page_token",
                )
            before = (token_int(tok, "t"), token_id(tok, "i"))
        rows = await self._db(
            lambda: self.repo.list_sessions(
                tenant=tenant,
                user_id=user_id,
                project_id=project_id,
                limit=size + 1,
                before=before,
            )
        )
        token = ""
        if len(rows) > size:
            rows = rows[:size]
            last = rows[-1]
            token = _encode_token(
                {"u": user_id, "p": project_id, "t": last.create_time_us, "i": last.session_id}
            )
        # A hot session's row may lag its in-memory counters by nothing: rows are
        # written before memory changes, so the row is authoritative here.
        return rows, token

    async def update_session(self, updated: Session, paths: Sequence[str], etag: str) -> Session:
        sid = updated.session_id
        check_session_id(sid, "session.session_id")
        async with self.hot.lock(sid):
            ctx = await self._context_locked(sid, verify=True)
            current = ctx.session
            if etag and etag != current.etag:
                raise Aborted(
                    f"etag {etag} is stale (current {current.etag}); re-read the session",
                    reason="ETAG_MISMATCH",
                    metadata={"etag": current.etag},
                )
            changes: dict[str, Any] = {p: getattr(updated, p) for p in paths}
            if "policy" in changes:
                check_client_tokenizer(updated.policy.tokenizer, self.settings.hf_tokenizer_dirs)
            now = ids.now_us()
            new = replace(
                current,
                **changes,
                revision=current.revision + 1,
                version=current.version + 1,
                update_time_us=now,
            )
            check_session_fields(new)
            new_spec = effective_policy(new.policy, new.model).tokenizer
            tokenizer = ctx.tokenizer if new_spec == ctx.tokenizer.spec else None
            if tokenizer is None:
                tokenizer = await _tokenizer(new_spec)
            probe_profile = counting_profile(new.model, tokenizer)
            if probe_profile.key != ctx.profile.key:
                active = ctx.active_messages
                checkpoint = ctx.checkpoint
                tok = tokenizer
                # A new tokenizer or model: every kept message is recounted (once,
                # here) and the new counts are stored with the settings.
                rebuilt: SessionContext | None = await asyncio.to_thread(
                    lambda: SessionContext(new, checkpoint, active, tok, recount=True)
                )
                assert rebuilt is not None
                new = replace(new, context_tokens=rebuilt.context_tokens)
                rebuilt.session = new
                counts = [
                    (m.seq, m.token_count, probe_profile.key) for m in rebuilt.active_messages
                ]
            else:
                rebuilt = None
                probe = SessionContext(new, ctx.checkpoint, ctx.active_messages, ctx.tokenizer)
                new = replace(new, context_tokens=probe.context_tokens)
                counts = []
            try:
                await self._db(
                    lambda: self.repo.update_session(
                        new, expected_version=current.version, token_counts=counts
                    )
                )
            except ConcurrentWrite:
                raise self._concurrent(sid) from None
            except (Unavailable, asyncio.CancelledError):
                self.hot.evict(sid)
                raise
            if rebuilt is not None:
                self.hot.put(sid, rebuilt)
            else:
                ctx.replace_session(new)
                ctx.session = replace(ctx.session, context_tokens=ctx.context_tokens)
                new = ctx.session
            return new

    async def delete_session(self, session_id: str) -> None:
        check_session_id(session_id)
        async with self.hot.lock(session_id):
            deleted = await self._db(lambda: self.repo.delete_session(session_id, ids.now_us()))
            self.hot.evict(session_id)
        if not deleted:
            raise self._not_found(session_id)

    # -- messages -------------------------------------------------------------

    async def append(
        self,
        session_id: str,
        messages: Sequence[Message],
        expected_last_seq: int | None,
        key: IdempotencyKey | None,
    ) -> AppendResult:
        check_messages(messages, self.settings.limits.max_messages_per_request)
        if key is not None:
            check_key(key.request_id, "request_id")
        check_session_id(session_id)
        scope = RequestScope("AppendMessages", session_id, tenant_of(session_id))
        async with self.hot.lock(session_id):
            ctx = await self._context_locked(session_id)
            stored_dups: dict[str, Message] = {}
            for attempt in range(3):
                try:
                    plan = await self._plan(ctx, messages, stored_dups)
                    if not plan.new:
                        return AppendResult(plan.messages, ctx.session.last_seq, ctx.context_tokens)
                    if expected_last_seq is not None and expected_last_seq != ctx.session.last_seq:
                        if expected_last_seq > ctx.session.last_seq and attempt == 0:
                            # Our copy may be stale (another replica appended): reload.
                            ctx = await self._reload(session_id)
                            continue
                        raise Aborted(
                            f"expected_last_seq {expected_last_seq} does not match the "
                            f"session's last_seq {ctx.session.last_seq}; nothing was written",
                            reason="LAST_SEQ_MISMATCH",
                            metadata={"last_seq": str(ctx.session.last_seq)},
                        )
                except (Aborted, FailedPrecondition):
                    # A resend of a request that was applied (its answer was lost) no
                    # longer fits the session it changed (its tool call is answered,
                    # last_seq moved on): answer it from the request log.
                    stored = await self._replay(scope, key)
                    if stored is not None:
                        return await self._stored_append(ctx, session_id, stored.outcome)
                    raise
                now = ids.now_us()
                base = ctx.session
                new_session = replace(
                    base,
                    last_seq=plan.last_seq,
                    version=base.version + 1,
                    context_tokens=plan.context_tokens,
                    update_time_us=now,
                    consecutive_failures=ctx.failures_after(plan.new),
                    # The calibration this append learned is stored with it (a
                    # restart right after must not fall back to the previous one).
                    estimate_ratio=plan.calibration.ratio,
                    estimate_samples=plan.calibration.samples,
                )
                outcome = {
                    "seqs": [m.seq for m in plan.messages],
                    "last_seq": plan.last_seq,
                    "context_tokens": plan.context_tokens,
                }
                record = self._record(scope, key, outcome)
                try:
                    op = self.repo.encode_append(
                        new_session,
                        expected_version=base.version,
                        messages=plan.new,
                        record=record,
                    )
                except TooLarge as exc:
                    raise store_error(exc) from None
                try:
                    await self._db(lambda o=op: self.repo.append(o))  # type: ignore[misc]
                except ConcurrentWrite:
                    if attempt < 2:
                        # Another replica changed the session: reload and plan again
                        # on the current state (never write on a stale copy).
                        ctx = await self._reload(session_id)
                        continue
                    raise self._concurrent(session_id) from None
                except (Unavailable, asyncio.CancelledError):
                    # The commit may or may not have happened (a cancelled
                    # caller's write still goes on): forget our copy.
                    self.hot.evict(session_id)
                    raise
                except DuplicateKey:
                    stored = await self._replay(scope, key)
                    if stored is not None:
                        return await self._stored_append(ctx, session_id, stored.outcome)
                    wanted = [m.message_id for m in messages if m.message_id]
                    found = await self._db(
                        lambda w=wanted: self.repo.find_by_message_ids(session_id, w)  # type: ignore[misc]
                    )
                    if not found or found.keys() <= stored_dups.keys():
                        raise self._concurrent(session_id) from None
                    stored_dups = found
                    continue
                samples_before = base.estimate_samples
                ctx.apply_append(plan, now, new_session.version)
                ctx.checked_at = self.clock()
                if plan.calibration.samples > samples_before:
                    self.model_calibration.learn(
                        tenant_of(session_id), ctx.session.model, plan.calibration.ratio
                    )
                metrics.observe_append(len(plan.new))
                return AppendResult(plan.messages, plan.last_seq, plan.context_tokens)
            raise self._concurrent(session_id)

    async def _reload(self, session_id: str) -> SessionContext:
        """Drop the in-memory copy and restore the session (caller holds the lock)."""
        self.hot.evict(session_id)
        return await self._context_locked(session_id)

    async def _plan(
        self, ctx: SessionContext, messages: Sequence[Message], dups: dict[str, Message]
    ) -> AppendPlan:
        def plan() -> AppendPlan:
            return ctx.plan_append(
                messages,
                now_us=ids.now_us(),
                new_message_id=iter(ids.new_id, None),
                stored_duplicates=dups,
            )

        if _chars(messages) > BIG_WORK_CHARS:
            return await asyncio.to_thread(plan)
        return plan()

    async def _stored_append(
        self, ctx: SessionContext, session_id: str, outcome: dict[str, Any]
    ) -> AppendResult:
        seqs = [int(s) for s in outcome["seqs"]]
        by_seq = {m.seq: m for m in ctx.active_messages}
        missing = [s for s in seqs if s not in by_seq]
        if missing:
            for m in await self._db(lambda: self.repo.get_messages(session_id, missing)):
                by_seq[m.seq] = m
        return AppendResult(
            tuple(by_seq[s] for s in seqs if s in by_seq),
            int(outcome["last_seq"]),
            int(outcome["context_tokens"]),
        )

    async def list_messages(
        self, session_id: str, page_size: int, page_token: str, include_rolled_back: bool
    ) -> tuple[list[Message], str]:
        await self.get_session(session_id)
        size = _page_size(page_size, 100)
        after = 0
        if page_token:
            tok = _decode_token(page_token)
            if tok.get("s") != session_id or tok.get("r") != include_rolled_back:
                raise InvalidArgument(
                    "page_token was issued for a different session or filter",
                    reason="INVALID_PAGE_TOKEN",
                    field="page_token",
                )
            after = token_int(tok, "a")
        rows, more = await self._db(
            lambda: self.repo.list_messages(
                session_id,
                after_seq=after,
                limit=size,
                include_rolled_back=include_rolled_back,
                max_bytes=LIST_PAGE_BYTES,
            )
        )
        token = message_page_token(session_id, include_rolled_back, rows[-1].seq) if more else ""
        return rows, token

    # -- model input ------------------------------------------------------------

    async def build_model_input(
        self,
        session_id: str,
        max_output_tokens: int,
        auto_compact: bool = False,
        as_of_seq: int | None = None,
        fmt: int = 0,
    ) -> ModelInputView:
        view = await self._build_model_input(session_id, max_output_tokens, auto_compact, as_of_seq)
        if fmt in (0, Format.NATIVE):
            return view
        try:
            target = Format(fmt)
        except ValueError:
            raise InvalidArgument(
                f"format {fmt} is unknown", reason="INVALID_FORMAT", field="format"
            ) from None
        rendered = await asyncio.to_thread(render_view, target, view)
        return replace(
            view, rendered_json=rendered.json, notices=view.notices + tuple(rendered.notices)
        )

    async def _build_model_input(
        self,
        session_id: str,
        max_output_tokens: int,
        auto_compact: bool,
        as_of_seq: int | None,
    ) -> ModelInputView:
        if max_output_tokens < 0:
            raise InvalidArgument(
                "max_output_tokens must be >= 0",
                reason="INVALID_MAX_OUTPUT_TOKENS",
                field="max_output_tokens",
            )
        ctx = await self._context(session_id)
        if as_of_seq is not None:
            return await self._replay_input(ctx, as_of_seq, max_output_tokens)
        view = ctx.model_input(max_output_tokens)
        if auto_compact and view.compaction_recommended and self.compactor.summarizer is not None:
            try:
                await self.compactor.compact(session_id, "", 0, None, TRIGGER_THRESHOLD)
            except FailedPrecondition as exc:
                if exc.reason != "NOTHING_TO_COMPACT":
                    raise
            ctx = await self._context(session_id)
            view = ctx.model_input(max_output_tokens)
        metrics.observe_model_input(view.tokens)
        return view

    async def _replay_input(
        self, live: SessionContext, as_of_seq: int, max_output_tokens: int
    ) -> ModelInputView:
        """The input exactly as it was just before message ``as_of_seq`` was appended."""
        sid = live.session.session_id
        last = live.session.last_seq
        if not 1 <= as_of_seq <= last + 1:
            raise InvalidArgument(
                f"as_of_seq must be between 1 and last_seq + 1 ({last + 1})",
                reason="INVALID_SEQ",
                field="as_of_seq",
            )
        snap = await self._db(lambda: self.repo.replay_snapshot(sid, as_of_seq))
        if snap is None:
            raise self._not_found(sid)
        s = snap.session
        tokenizer = await _tokenizer(effective_policy(s.policy, s.model).tokenizer)

        def build() -> ModelInputView:
            # Counts are recomputed with the tokenizer and model of that time
            # (a later change of either re-counted the stored ones).
            ctx = SessionContext(s, snap.checkpoint, snap.kept, tokenizer, recount=True)
            # A one-off input: its encodings would only crowd out those of hot sessions.
            return replace(ctx.model_input(max_output_tokens), render_cache=None)

        return await asyncio.to_thread(build)

    # -- rollback ---------------------------------------------------------------

    async def rollback(
        self,
        session_id: str,
        to_seq: int | None,
        error_message: str,
        key: IdempotencyKey | None,
    ) -> RollbackResult:
        if key is not None:
            check_key(key.request_id, "request_id")
        check_session_id(session_id)
        scope = RequestScope("RollbackTurn", session_id, tenant_of(session_id))
        async with self.hot.lock(session_id):
            ctx = await self._context_locked(session_id, verify=True)
            stored = await self._replay(scope, key)
            if stored is not None:
                return _rollback_from_outcome(stored.outcome)
            if ctx.crosses_checkpoint(to_seq):
                assert to_seq is not None
                return await self._rollback_across(ctx, to_seq, error_message, scope, key)
            seqs = ctx.plan_rollback(to_seq)
            error = error_message or last_failure_message(ctx.active_messages, seqs)
            failures = ctx.session.consecutive_failures
            if seqs and to_seq is None:
                failures += 1
            recovery = decide_recovery(error, failures, self.settings.max_retries)
            reason = "nothing to roll back" if not seqs and not error else recovery.reason
            result = RollbackResult(
                tuple(seqs), recovery.action, recovery.retry_after_seconds, reason
            )
            now = ids.now_us()
            gone = set(seqs)
            remaining = sum(e.token_count for e in ctx.entries if e.message.seq not in gone)
            new_session = replace(
                ctx.session,
                consecutive_failures=failures,
                context_tokens=ctx.fixed_tokens + remaining,
                update_time_us=now,
                version=ctx.session.version + 1,
            )
            if seqs or key is not None:
                try:
                    await self._db(
                        lambda: self.repo.rollback(
                            new_session,
                            expected_version=ctx.session.version,
                            seqs=seqs,
                            record=self._record(scope, key, _rollback_outcome(result)),
                        )
                    )
                except ConcurrentWrite:
                    raise self._concurrent(session_id) from None
                except (Unavailable, asyncio.CancelledError):
                    self.hot.evict(session_id)
                    raise
                except DuplicateKey:
                    stored = await self._replay(scope, key)
                    if stored is None:
                        raise self._concurrent(session_id) from None
                    return _rollback_from_outcome(stored.outcome)
                ctx.apply_rollback(seqs, failures, now)
                ctx.session = replace(ctx.session, version=new_session.version)
                ctx.checked_at = self.clock()
            return result

    async def _rollback_across(
        self,
        ctx: SessionContext,
        to_seq: int,
        error_message: str,
        scope: RequestScope,
        key: IdempotencyKey | None,
    ) -> RollbackResult:
        """Rewind to before the checkpoint: supersede it, fall back, reload."""
        ctx.plan_rollback(to_seq)  # validates to_seq
        sid = ctx.session.session_id
        failures = ctx.session.consecutive_failures
        recovery = decide_recovery(error_message, failures, self.settings.max_retries)
        now = ids.now_us()
        session = replace(ctx.session, update_time_us=now, version=ctx.session.version + 1)
        reason = recovery.reason if error_message else f"rewound to seq {to_seq}"

        def record(seqs: list[int]) -> RequestRecord | None:
            result = RollbackResult(
                tuple(seqs), recovery.action, recovery.retry_after_seconds, reason
            )
            return self._record(scope, key, _rollback_outcome(result))

        try:
            seqs, current = await self._db(
                lambda: self.repo.rollback_across_checkpoints(
                    session, expected_version=ctx.session.version, to_seq=to_seq, record=record
                )
            )
        except ConcurrentWrite:
            raise self._concurrent(sid) from None
        except DuplicateKey:
            stored = await self._replay(scope, key)
            if stored is None:
                raise self._concurrent(sid) from None
            return _rollback_from_outcome(stored.outcome)
        finally:
            # The effective context now starts at an older checkpoint (or at the
            # beginning): reload it from the database on the next call.
            self.hot.evict(sid)
        log.info("session %s rewound to %d; checkpoint now %r", sid, to_seq, current)
        return RollbackResult(tuple(seqs), recovery.action, recovery.retry_after_seconds, reason)

    # -- token counting ---------------------------------------------------------

    async def count_tokens(
        self,
        model: str,
        tokenizer_spec: str,
        messages: Sequence[Message],
        tools: Sequence[ToolDefinition],
        text: str,
    ) -> tuple[int, list[int], str, bool, int, int]:
        """(total, per message, tokenizer spec, exact, tools, text) for a model."""
        info = lookup_model(model)
        check_client_tokenizer(tokenizer_spec, self.settings.hf_tokenizer_dirs, "tokenizer")
        tokenizer = await _tokenizer(tokenizer_spec or info.tokenizer)
        profile = counting_profile(model, tokenizer)

        def count() -> tuple[list[int], int, int]:
            per = [profile.message(m) for m in messages]
            return per, count_text(tools_text(tools), tokenizer), count_text(text, tokenizer)

        per, tools_tokens, text_tokens = await asyncio.to_thread(count)
        total = sum(per) + tools_tokens + text_tokens + (profile.reply if messages else 0)
        return total, per, tokenizer.spec, tokenizer.exact and info.known, tools_tokens, text_tokens

    # -- tool output ------------------------------------------------------------

    async def get_tool_output(
        self, session_id: str, seq: int, offset: int, limit: int
    ) -> tuple[str, int, int, int]:
        """A byte range of a stored tool result: (content, total bytes, lines, next offset)."""
        if seq <= 0:
            raise InvalidArgument("seq must be > 0", reason="INVALID_SEQ", field="seq")
        if offset < 0 or limit < 0:
            raise InvalidArgument(
                "offset and limit must be >= 0", reason="INVALID_RANGE", field="offset"
            )
        limit = min(limit or 51200, 1024 * 1024)
        ctx = await self._context(session_id)
        message = next((m for m in ctx.active_messages if m.seq == seq), None)
        if message is None:
            message = await self._db(lambda: self.repo.get_message(session_id, seq))
        if message is None:
            raise NotFound(
                f"session {visible_id(session_id)!r} has no message with seq {seq}",
                reason="MESSAGE_NOT_FOUND",
            )
        if message.role is not Role.TOOL_RESULT:
            raise InvalidArgument(
                f"message seq {seq} is a {message.role.name.lower()} message, not a tool result",
                reason="NOT_A_TOOL_RESULT",
                field="seq",
            )
        data = message.text.encode("utf-8")
        total = len(data)
        start = min(offset, total)
        while start < total and (data[start] & 0xC0) == 0x80:
            start += 1  # never start inside a character
        end = min(start + limit, total)
        while end < total and end > start and (data[end] & 0xC0) == 0x80:
            end -= 1  # never end inside one either
        chunk = data[start:end].decode("utf-8")
        lines = len(message.text.splitlines())
        return chunk, total, lines, (end if end < total else 0)

    # -- lifecycle --------------------------------------------------------------

    async def close(self) -> None:
        await self.repo.close()


def _rollback_outcome(r: RollbackResult) -> dict[str, Any]:
    return {
        "seqs": list(r.rolled_back_seqs),
        "action": int(r.action),
        "retry_after": r.retry_after_seconds,
        "reason": r.reason,
    }


def _rollback_from_outcome(o: dict[str, Any]) -> RollbackResult:
    return RollbackResult(
        tuple(int(s) for s in o["seqs"]),
        RecoveryAction(int(o["action"])),
        float(o["retry_after"]),
        str(o["reason"]),
    )


__all__ = ["AppendResult", "IdempotencyKey", "RollbackResult", "SessionManager", "count_text"]
